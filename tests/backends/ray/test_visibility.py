"""The run directory must be the same directory on every Ray node, checked for real.

A 3-node Ray cluster on this host: a head and one node from
``ray.cluster_utils.Cluster``, and a third node whose raylet (and so every
worker it starts) runs in a mount namespace of its own (``unshare --mount``)
where ``TMP/shared`` is covered by an empty tmpfs: the view of a compute node
that does not mount the filesystem the driver's run directory is on. The check
runs from a driver process joined to the cluster, as ``nestor run --address``
would.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from nestor.orchestrator.backends.ray.visibility import NodeView, RunDirNotShared

TAG = "NESTOR_VISIBILITY_TEST"

CLUSTER = """
import json, sys
from ray.cluster_utils import Cluster

cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1,
                                                        "include_dashboard": False})
cluster.add_node(num_cpus=1)
cluster.wait_for_nodes()
print(json.dumps({"address": cluster.address}), flush=True)
sys.stdin.read()  # until the test closes it
cluster.shutdown()
"""

DRIVER = """
import json, sys, time
from pathlib import Path
import ray
from nestor.orchestrator.backends.ray.visibility import RunDirNotShared, check_run_dir_shared

ray.init(address=sys.argv[1], log_to_driver=False, configure_logging=False)
deadline = time.monotonic() + 60
while len([n for n in ray.nodes() if n["Alive"]]) < 3 and time.monotonic() < deadline:
    time.sleep(0.2)
blind = [n["NodeID"] for n in ray.nodes() if n["Alive"] and "blind" in n["Resources"]]
out = {"blind_node": blind}
for path in sys.argv[2:]:
    started = time.monotonic()
    try:
        views = check_run_dir_shared(Path(path), settle_s=1.0, timeout_s=60)
        out[path] = {"ok": [v.node_id for v in views], "s": time.monotonic() - started}
    except RunDirNotShared as exc:
        out[path] = {"error": str(exc), "blind": [v.node_id for v in exc.blind],
                     "reasons": [v.reason for v in exc.blind], "total": exc.total,
                     "s": time.monotonic() - started}
print(json.dumps(out), flush=True)
"""


def tagged(tag: str) -> list[int]:
    """Live processes this test started (its tag in their environment)."""
    needle = f"{TAG}={tag}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            with contextlib.suppress(OSError):
                if needle in Path(f"/proc/{entry}/environ").read_bytes().split(b"\0"):
                    found.append(int(entry))
    return found


def can_unshare() -> bool:
    if shutil.which("unshare") is None or os.geteuid() != 0:
        return False
    done = subprocess.run(["unshare", "--mount", "--propagation", "private", "true"],
                          capture_output=True, check=False)
    return done.returncode == 0


@pytest.mark.slow  # about 45 s here: a 3-node cluster, then `nestor doctor --run-dir`
@pytest.mark.skipif(not can_unshare(), reason="needs root and unshare --mount for the blind node")
def test_a_node_that_cannot_see_the_run_dir_is_named(tmp_path: Path) -> None:
    shared = tmp_path / "shared"  # hidden from the blind node
    seen_everywhere = tmp_path / "everywhere"
    for folder in (shared / "run", seen_everywhere / "run"):
        folder.mkdir(parents=True)
    tag = uuid.uuid4().hex
    env = dict(os.environ, RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=secrets.token_hex(32))
    env[TAG] = tag
    cluster = subprocess.Popen([sys.executable, "-c", CLUSTER], env=env, stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, text=True)
    blind = None
    try:
        address = json.loads(cluster.stdout.readline())["address"]
        ray_cli = str(Path(sys.executable).parent / "ray")
        blind = subprocess.Popen(
            ["unshare", "--mount", "--propagation", "private", "sh", "-c",
             'mount -t tmpfs nestor-blind "$1" && shift && exec "$@"', "sh", str(shared),
             ray_cli, "start", "--address", address, "--num-cpus", "1",
             "--resources", '{"blind": 1}', "--dashboard-agent-listen-port", "0",
             "--disable-usage-stats", "--block"],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
            start_new_session=True)
        started = time.monotonic()
        driver = subprocess.run(
            [sys.executable, "-c", DRIVER, address, str(shared / "run"),
             str(seen_everywhere / "run")],
            env=env, capture_output=True, text=True, timeout=240, check=False)
        assert driver.returncode == 0, driver.stderr[-3000:]
        out = json.loads(driver.stdout.strip().splitlines()[-1])
        print(f"\ncluster of 3 up and both checks done in {time.monotonic() - started:.1f} s;"
              f" checks: {out[str(shared / 'run')]['s']:.2f} s (one node blind),"
              f" {out[str(seen_everywhere / 'run')]['s']:.2f} s (all see it)")

        assert len(out["blind_node"]) == 1, out
        hidden = out[str(shared / "run")]
        assert hidden["blind"] == out["blind_node"], hidden
        assert hidden["total"] == 3
        assert f"the run directory {shared / 'run'} is not visible from 1 of the Ray" \
               f" cluster's 3 nodes (node {out['blind_node'][0][:12]} at" in hidden["error"]
        assert hidden["reasons"] == [f"{shared / 'run'} does not exist there"]

        visible = out[str(seen_everywhere / "run")]
        assert "error" not in visible, visible
        assert len(visible["ok"]) == 3 and out["blind_node"][0] in visible["ok"]
        assert not [p for p in (shared / "run").iterdir()], "the marker was left behind"

        # The same check from `nestor doctor --run-dir`, before a run.
        doctor = subprocess.run(
            [sys.executable, "-m", "nestor.orchestrator.commands.cli", "doctor",
             "--address", address,
             "--run-dir", str(shared / "run"), "--format", "json", "--strict"],
            env=env, capture_output=True, text=True, timeout=180, check=False)
        assert doctor.returncode == 1, doctor.stderr[-3000:]
        seen = json.loads(doctor.stdout)["ray"]["run_dir"]
        assert seen["shared"] is False
        assert f"node {out['blind_node'][0][:12]}" in seen["error"]
        assert f"WARNING: the run directory {shared / 'run'} is not visible" in doctor.stderr
    finally:
        if blind is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(blind.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                blind.wait(timeout=20)
        cluster.stdin.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            cluster.wait(timeout=60)
        for pid in tagged(tag):  # whatever of this test's Ray outlived its parents
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def test_the_error_names_the_path_and_every_blind_node() -> None:
    error = RunDirNotShared(Path("/scratch/me/run"), [
        NodeView("a" * 56, "10.0.0.7", False, "/scratch/me/run does not exist there"),
        NodeView("b" * 56, "10.0.0.9", False, "did not answer within 120 s")], total=8)
    text = str(error)
    assert text.startswith("the run directory /scratch/me/run is not visible from 2 of the"
                           " Ray cluster's 8 nodes (node aaaaaaaaaaaa at 10.0.0.7:"
                           " /scratch/me/run does not exist there; node bbbbbbbbbbbb at"
                           " 10.0.0.9: did not answer within 120 s)")
    assert "filesystem every node mounts" in text
