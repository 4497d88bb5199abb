"""Runs projected into a real `mlflow server` print nothing of MLflow's own.

MLflow's client prints "View run ... at: URL" and "View experiment at: URL" for
every run it ends on a server; a sweep of thousands of trials would print
thousands of such lines into the user's terminal (and send one more request per
run to fetch the run's name for them).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from nestor_harness import MlflowServer

from nestor.orchestrator.projections.tracking import Tracker

pytestmark = pytest.mark.slow


def test_ending_runs_on_a_server_prints_no_view_run_lines(
        tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    server = MlflowServer(tmp_path / "server.db")
    try:
        server.start()
        tracker = Tracker(tmp_path / "run", "quiet", uri=server.uri)
        capfd.readouterr()
        stage = tracker.start_run("stage", key="stage")
        for number in range(3):
            run = tracker.start_run(f"stage/{number}", parent=stage, key=f"t{number}")
            tracker.finish(run, "FINISHED")
        tracker.finish(stage, "FINISHED")
        out, err = capfd.readouterr()
        ended = tracker.client.search_runs([tracker.experiment_id])
        assert sorted(r.info.status for r in ended) == ["FINISHED"] * 4
        assert "View run" not in out + err and "View experiment" not in out + err, out + err
    finally:
        server.stop()
