"""The projector opens MLflow before the journal holds anything: the driver starts it
before Ray, so MLflow's imports and the store's creation overlap Ray's start instead of
the scheduling loop's first trials (issue 25: nestor slower than Tune at 250 trials)."""

from __future__ import annotations

import time
from pathlib import Path

from orchestrator.projections.projector import Projector
from tests.orchestrator.test_projector import workflow


def test_the_store_is_open_before_the_first_event(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    projector = Projector(run_dir, workflow(tmp_path))  # no journal yet: nothing to project
    deadline = time.monotonic() + 120  # a bound for a busy machine, not a speed claim
    while projector._tracker is None and time.monotonic() < deadline:
        time.sleep(0.05)
    try:
        assert projector._tracker is not None, "the tracker waited for the first event"
        assert (run_dir / "mlflow.db").is_file()
    finally:
        assert projector.close(timeout_s=5) == 0
