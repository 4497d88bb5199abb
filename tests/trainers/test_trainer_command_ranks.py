"""Multi-rank command trainers: a real horovodrun and a real torchrun start 2 ranks.

The trial runs the launcher once (as rank 0 of a gang would); the launcher
is told how many ranks to start and where by nestor's placeholders or
environment. Each rank adds ``rank + 1`` to an allreduce over Gloo and rank 0
prints the sum as the figure of merit: 3.0 only if both ranks took part, and
each rank prints a line of its own, read back from the command's log.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from rank_helpers import HOROVOD_SUM, TORCH_SUM

from nestor.trainers import TrainerRef, TrialRequest, run_trial

pytestmark = pytest.mark.slow

BIN = Path(sys.executable).parent


def _trial(tmp_path: Path, argv: list[str], script: str) -> tuple[object, str]:
    path = tmp_path / "sum.py"
    path.write_text(script)
    request = TrialRequest(
        "ranks", TrainerRef.command([*argv, str(path)]), data_parallel=2,
        log_dir=str(tmp_path / "logs"), timeout=240)
    result = run_trial(request)
    out = Path(result.logs["stdout"]).read_text() if result.logs else ""
    return result, out


def _both_ranks_took_part(result: object, out: str) -> None:
    assert result.ok, f"{result.reason}\n{result.details}"
    assert result.metrics["result"] == 3.0, out  # 1 + 2: both ranks' contributions
    assert "rank 0 of 2" in out and "rank 1 of 2" in out, out


def test_horovodrun_starts_the_ranks_from_np_and_hosts(tmp_path: Path) -> None:
    result, out = _trial(
        tmp_path, [str(BIN / "horovodrun"), "--gloo", "-np", "{np}", "-H", "{hosts}",
                   sys.executable], HOROVOD_SUM)
    _both_ranks_took_part(result, out)


def test_horovodrun_reads_the_hostfile(tmp_path: Path) -> None:
    result, out = _trial(
        tmp_path, [str(BIN / "horovodrun"), "--gloo", "-np", "{np}", "--hostfile", "{hostfile}",
                   sys.executable], HOROVOD_SUM)
    _both_ranks_took_part(result, out)


def test_torchrun_starts_the_ranks_from_the_placeholders(tmp_path: Path) -> None:
    result, out = _trial(
        tmp_path, [str(BIN / "torchrun"), "--nnodes", "{nnodes}", "--nproc_per_node",
                   "{nproc_per_node}", "--master_addr", "{master_addr}", "--master_port",
                   "{master_port}"], TORCH_SUM)
    _both_ranks_took_part(result, out)


def test_a_bare_torchrun_starts_the_ranks_from_the_environment(tmp_path: Path) -> None:
    # torchrun reads PET_NPROC_PER_NODE, PET_NNODES, PET_MASTER_ADDR/PORT as its defaults.
    result, out = _trial(tmp_path, [str(BIN / "torchrun")], TORCH_SUM)
    _both_ranks_took_part(result, out)
