"""Multi-rank command trainers on real gangs: the gang holds the slots, rank 0's
command starts the ranks there.

A command trainer with ``parallel: {data: 2}`` gets a 2-slot gang; only rank 0
runs the command (a launcher), which learns from the gang where its 2 ranks
go. Each rank adds ``rank + 1`` to a Gloo allreduce, so the figure of merit is
3.0 only when both ranks took part; each rank also prints a line of its own.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import ray.cloudpickle
from rank_helpers import HOROVOD_SUM, TORCH_SUM, command_sweep_spec, ray_cluster

from nestor.orchestrator.backends.ray.gangs import GangPool, Shape
from nestor.trainers import TrainerRef, TrialRequest, run_trial

pytestmark = pytest.mark.slow

# Ray's workers cannot import test modules; send this module's functions by value.
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])

BIN = Path(sys.executable).parent


def gang_layout() -> tuple[str | None, str | None]:
    return os.environ.get("NESTOR_GANG_HOSTS"), os.environ.get("NESTOR_GANG_ADDR")


def test_a_command_gang_runs_its_launcher_once_on_the_gangs_slots(ray_local: object,
                                                                 tmp_path: Path) -> None:
    script = tmp_path / "sum.py"
    script.write_text(HOROVOD_SUM)
    logs = tmp_path / "logs"
    request = TrialRequest(
        "ranks", TrainerRef.command([str(BIN / "horovodrun"), "--gloo", "-np", "{np}", "-H",
                                     "{hosts}", sys.executable, str(script)]),
        data_parallel=2, log_dir=str(logs), timeout=240)
    with GangPool(slots=2, rendezvous_timeout_s=60) as pool:
        gang = pool.acquire(Shape(data=2))
        assert pool.busy_slots == 2  # both slots are the trial's while it runs
        layouts = gang.executor.run(gang_layout)
        gang.submit(run_trial, request)
        first, second = gang.collect(timeout_s=300)
        pool.release(gang)
    out = (logs / "stdout.log").read_text()
    assert first.ok, f"{first.reason}\n{out}\n{first.details}"
    assert first.metrics["result"] == 3.0, out
    assert second.ok and second.metrics == {}  # rank 1 held its slot, ran nothing
    # One launcher: exactly one rank 0 and one rank 1 in the command's output.
    assert out.count("rank 0 of 2") == 1 and out.count("rank 1 of 2") == 1, out
    host = socket.gethostname()  # the gang's ranks are on this host's Ray node
    # every rank knows where the whole gang is; the first node's address is Ray's
    assert layouts == [(f"{host}:2", ray.util.get_node_ip_address())] * 2
    argv = (logs / "command.txt").read_text().splitlines()
    assert argv[argv.index("-np") + 1] == "2" and argv[argv.index("-H") + 1] == f"{host}:2"
    assert (logs / "hostfile").read_text() == f"{host} slots=2\n"


def test_nestor_run_gives_a_torchrun_command_trainer_its_parallel_ranks(tmp_path: Path) -> None:
    script = tmp_path / "sum.py"
    script.write_text(TORCH_SUM)
    torchrun = [str(BIN / "torchrun"), "--nnodes", "{nnodes}", "--nproc_per_node",
                "{nproc_per_node}", "--master_addr", "{master_addr}", "--master_port",
                "{master_port}", str(script)]
    spec = tmp_path / "spec.yaml"
    spec.write_text(command_sweep_spec("torchrun-sweep", torchrun))
    run_dir = tmp_path / "run"
    done = subprocess.run([str(BIN / "nestor"), "run", str(spec), "--run-dir", str(run_dir)],
                          capture_output=True, text=True, timeout=600, check=False,
                          env=dict(os.environ))
    assert done.returncode == 0, done.stderr[-4000:]
    events = [json.loads(line) for line in (run_dir / "journal.jsonl").read_text().splitlines()]
    started = [e for e in events if e["event"] == "trial_started"]
    finished = [e for e in events if e["event"] == "trial_finished"]
    assert {e["shape"] for e in started} == {"2x1"} and len(finished) == 2
    # 1 + 2 from the two ranks' allreduce, plus the trial's own x
    assert sorted(e["value"] for e in finished) == [13.0, 23.0], finished
    for event in finished:
        out = Path(event["logs"]["stdout"]).read_text()
        assert "rank 0 of 2" in out and "rank 1 of 2" in out, out


@pytest.fixture(scope="module")
def two_nodes() -> Iterator[tuple[str, dict[str, str]]]:
    """A Ray cluster of two 1-CPU nodes on this host: a 2-rank gang spans both."""
    env = dict(os.environ, RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=secrets.token_hex(32))
    with ray_cluster(env, [{"num_cpus": 1}] * 2) as cluster:
        yield cluster["address"], env


def _nestor_run(spec: Path, run_dir: Path, cluster: tuple[str, dict[str, str]]
                ) -> tuple[subprocess.CompletedProcess[str], list[dict]]:
    address, env = cluster
    done = subprocess.run([str(BIN / "nestor"), "run", str(spec), "--run-dir", str(run_dir),
                           "--address", address], capture_output=True, text=True, timeout=600,
                          check=False, env=env)
    journal = run_dir / "journal.jsonl"
    assert journal.exists(), done.stderr[-4000:]
    return done, [json.loads(line) for line in journal.read_text().splitlines()]


def test_a_torchrun_command_naming_node_rank_runs_once_on_each_node(
        tmp_path: Path, two_nodes: tuple[str, dict[str, str]]) -> None:
    script = tmp_path / "sum.py"
    script.write_text(TORCH_SUM)
    torchrun = [str(BIN / "torchrun"), "--nnodes", "{nnodes}", "--node_rank", "{node_rank}",
                "--nproc_per_node", "{nproc_per_node}", "--master_addr", "{master_addr}",
                "--master_port", "{master_port}", str(script)]
    spec = tmp_path / "spec.yaml"
    spec.write_text(command_sweep_spec("torchrun-per-node", torchrun))
    done, events = _nestor_run(spec, tmp_path / "run", two_nodes)
    assert done.returncode == 0, done.stderr[-4000:]
    finished = [e for e in events if e["event"] == "trial_finished"]
    assert not [e for e in events if e["event"] == "trial_attempt_failed"]
    # 1 + 2 from the allreduce of the two nodes' ranks, plus the trial's own x
    assert sorted(e["value"] for e in finished) == [13.0, 23.0], finished
    for event in finished:
        logs = Path(event["logs"]["stdout"]).parent
        first = (logs / "stdout.log").read_text()
        second = (logs / "node1" / "stdout.log").read_text()
        # one torchrun a node, each starting its node's one rank: rank 0 on node 0 ...
        assert "rank 0 of 2 node 0" in first and "rank 1 of" not in first, first
        assert "rank 1 of 2 node 1" in second and "rank 0 of" not in second, second
        argv = [(logs / "command.txt").read_text().splitlines(),
                (logs / "node1" / "command.txt").read_text().splitlines()]
        for node, words in enumerate(argv):
            given = {flag: words[words.index(flag) + 1]
                     for flag in ("--nnodes", "--node_rank", "--nproc_per_node", "--master_port")}
            assert given == {"--nnodes": "2", "--node_rank": str(node), "--nproc_per_node": "1",
                             "--master_port": argv[0][argv[0].index("--master_port") + 1]}


FAILS_ON_NODE_1 = """
import sys, time
if sys.argv[1] == "1":
    print("node 1 gives up", flush=True)
    sys.exit(3)
time.sleep(90)  # node 0 would succeed, much later
print("FoM: 1.0", flush=True)
"""


def test_a_per_node_command_failing_on_one_node_fails_the_trial(
        tmp_path: Path, two_nodes: tuple[str, dict[str, str]]) -> None:
    script = tmp_path / "fails.py"
    script.write_text(FAILS_ON_NODE_1)
    spec = tmp_path / "spec.yaml"
    command = [sys.executable, str(script), "{node_rank}"]
    spec.write_text(command_sweep_spec("fails-per-node", command).replace(
        "trial: {timeout: 240}", "trial: {timeout: 240, retries: 0}"))
    began = time.monotonic()
    _, events = _nestor_run(spec, tmp_path / "run", two_nodes)
    finished = [e for e in events if e["event"] == "trial_finished"]
    assert len(finished) == 2 and {e["status"] for e in finished} == {"failed"}, finished
    for event in finished:
        assert "node 1: command exited with status 3" in event["reason"], event
    # the trials ended when node 1 failed, not when node 0's command would have
    assert time.monotonic() - began < 90, events
