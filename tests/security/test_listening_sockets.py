"""What a run listens on, and where: nothing on every address that is not documented.

A local run's Ray cluster, Horovod's rendezvous store (one HTTP key-value store
per gang, in the driver, without authentication), the ranks' Gloo and torch
stores and Ray's metrics exporters all listened on 0.0.0.0 or ::, reachable from
every machine that can route to this one. Here a real run of two gangs (one
Horovod, one torch.distributed, each of two ranks that talk) is watched: every
listening TCP socket of every process carrying the run's tag (the driver, Ray's
daemons and workers, the ranks) is read from /proc, and none may listen on all
addresses except those the README's "Security model" names.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import uuid
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

NESTOR = str(Path(sys.executable).parent / "nestor")
TAG = "NESTOR_SOCKETS_TAG"
TRAIN = """
def train(config, ctx):
    import torch
    model = torch.nn.Linear(2, 1)
    model, optimizer = ctx.distribute(model, torch.optim.SGD(model.parameters(), lr=0.1))
    loss = model(torch.ones(4, 2)).sum()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()  # gradients averaged over both ranks
    return {"result": float(config["x"])}
"""
SPEC = """
name: sockets
resources: {slots: 2}
stages:
  - name: hvd
    kind: hpo
    trainer: {function: "sockets_trainer:train"}
    parallel: {data: 2}
    search: {algorithm: random, budget: 2, seed: 1}
    space: {x: {type: float, low: 0, high: 1}}
    objective: {metric: result, mode: min}
  - name: ddp
    kind: hpo
    backend: torch
    trainer: {function: "sockets_trainer:train"}
    parallel: {data: 2}
    search: {algorithm: random, budget: 2, seed: 2}
    space: {x: {type: float, low: 0, high: 1}}
    objective: {metric: result, mode: min}
"""
ALL_ADDRESSES = {"0.0.0.0", "::", "::ffff:0.0.0.0"}
# What the README's "Security model" says stays open on all addresses, and why: Ray's
# own gRPC servers (GCS, raylet, and one per worker process, the driver's included),
# which ask for the cluster's token, and its daemons' read-only Prometheus metrics,
# whose address Ray does not let a local cluster choose.
RAY_DAEMONS = ("/ray/gcs/gcs_server", "/ray/raylet/raylet", "ray/autoscaler/_private/monitor.py",
               "ray/dashboard/dashboard.py", "ray::DashboardAgent", "ray::RuntimeEnvAgent",
               "ray/dashboard/agent.py", "ray/_private/runtime_env/agent/main.py")


def tagged(tag: str) -> dict[int, str]:
    """The processes whose environment carries ``tag``: pid -> command line."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if f"{TAG}={tag}".encode() in (entry / "environ").read_bytes().split(b"\0"):
                found[int(entry.name)] = (entry / "cmdline").read_bytes().replace(
                    b"\0", b" ").decode(errors="replace")[:120]
        except OSError:
            continue
    return found


def listening() -> dict[int, tuple[str, int]]:
    """Every listening TCP socket of this network namespace: inode -> (address, port)."""
    import ipaddress

    found = {}
    for table, width in (("/proc/net/tcp", 4), ("/proc/net/tcp6", 16)):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] != "0A":  # LISTEN
                continue
            address, port = fields[1].split(":")
            raw = bytes.fromhex(address)
            # /proc writes each 32-bit word in host (little-endian) order
            raw = b"".join(raw[i:i + 4][::-1] for i in range(0, width, 4))
            found[int(fields[9])] = (str(ipaddress.ip_address(raw)), int(port, 16))
    return found


def sockets_of(pid: int) -> set[int]:
    inodes = set()
    try:
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            with_target = os.readlink(fd)
            if with_target.startswith("socket:["):
                inodes.add(int(with_target[8:-1]))
    except OSError:
        pass
    return inodes


def test_a_local_run_listens_on_the_loopback_only(tmp_path: Path) -> None:
    (tmp_path / "sockets_trainer.py").write_text(textwrap.dedent(TRAIN))
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC)
    tag = uuid.uuid4().hex
    env = dict(os.environ, **{TAG: tag}, PYTHONPATH=os.pathsep.join(
        [str(tmp_path), *filter(None, [os.environ.get("PYTHONPATH")])]))
    driver = subprocess.Popen([NESTOR, "run", str(spec), "--run-dir", str(tmp_path / "run")],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen: dict[tuple[str, int], tuple[int, str]] = {}

    def watch() -> None:
        while driver.poll() is None:
            sockets = listening()
            for pid, command in tagged(tag).items():
                for inode in sockets_of(pid) & sockets.keys():
                    seen.setdefault(sockets[inode], (pid, command))
            time.sleep(0.1)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        out, err = driver.communicate(timeout=900)
    finally:
        if driver.poll() is None:
            driver.kill()
    watcher.join()
    assert driver.returncode == 0, out + err
    print("\nlistening:\n" + "\n".join(f"  {a}:{p}  {pid} {c}"
                                          for (a, p), (pid, c) in sorted(seen.items())))
    assert any(a == "127.0.0.1" and c.startswith("ray::") for (a, _), (_, c) in seen.items()), (
        "no rank's loopback listener was seen: the census is broken")
    everywhere: dict[int, list[tuple[str, int, str]]] = {}
    for (address, port), (pid, command) in seen.items():
        if address in ALL_ADDRESSES and not any(d in command for d in RAY_DAEMONS):
            everywhere.setdefault(pid, []).append((address, port, command))
    # A worker or the driver: its core worker's gRPC server, and nothing else.
    extra = {pid: found for pid, found in everywhere.items() if len(found) > 1}
    assert extra == {}, extra
    driver_side = [found for pid, found in everywhere.items() if pid == driver.pid]
    assert all(len(found) == 1 for found in driver_side)
    rendezvous = [(a, p) for (a, p), (pid, _) in seen.items()
                  if pid == driver.pid and a not in ALL_ADDRESSES]
    assert rendezvous and all(a == "127.0.0.1" for a, _ in rendezvous), rendezvous
    # Ray's sessions in a folder only its user enters, its token file only its user reads.
    sessions = Path(tempfile.gettempdir()) / f"nestor-ray-{os.getuid()}"
    assert sessions.is_dir() and sessions.stat().st_mode & 0o777 == 0o700
    token = Path.home() / ".ray" / "auth_token"
    assert not token.exists() or token.stat().st_mode & 0o077 == 0
