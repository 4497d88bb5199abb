"""The projector opens MLflow before the journal holds anything: the driver starts it
before Ray, so MLflow's imports and the store's creation overlap Ray's start instead of
the scheduling loop's first trials (issue 25: nestor slower than Tune at 250 trials)."""

from __future__ import annotations

import time
from pathlib import Path

from nestor.orchestrator.projections.projector import Projector
from tests.orchestrator.projections.test_projector import workflow


def test_the_store_is_open_before_the_first_event(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    projector = Projector(run_dir, workflow(tmp_path), warm=True)  # no journal yet
    deadline = time.monotonic() + 120  # a bound for a busy machine, not a speed claim
    while projector._tracker is None and time.monotonic() < deadline:
        time.sleep(0.05)
    try:
        assert projector._tracker is not None, "the tracker waited for the first event"
        assert (run_dir / "mlflow.db").is_file()
    finally:
        assert projector.close(timeout_s=5) == 0


def test_a_catch_up_projector_opens_no_store_when_nothing_is_behind(tmp_path: Path) -> None:
    """``nestor ui`` catches MLflow up before it serves: with nothing to project, its
    projector must not open (and at exit copy back) a store the UI's server serves."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    projector = Projector(run_dir, workflow(tmp_path))
    time.sleep(1.0)  # what a warm-up would have had to start opening the store
    try:
        assert projector._tracker is None and not (run_dir / "mlflow.db").exists()
    finally:
        assert projector.close(timeout_s=5) == 0
