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
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import ray.cloudpickle
from rank_helpers import HOROVOD_SUM, TORCH_SUM, command_sweep_spec

from orchestrator.gangs import GangPool, Shape
from trainers import TrainerRef, TrialRequest, run_trial

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
