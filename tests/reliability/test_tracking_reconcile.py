"""A driver killed between journalling a trial's end and telling MLflow leaves
the trial's run RUNNING; the next Tracker on the run directory closes it."""

from __future__ import annotations

from pathlib import Path

from orchestrator.journal import Journal
from orchestrator.tracking import Tracker, derived_key


def test_runs_of_journalled_trials_are_closed_on_resume(tmp_path: Path) -> None:
    tracker = Tracker(tmp_path, "reconcile")
    stage = tracker.start_run("tune")
    done = tracker.start_run("tune/0", parent=stage, params={"x": 0.1})
    tracker.log_metrics(done, {"result": 0.5})  # got through before the kill
    failed = tracker.start_run("tune/1", parent=stage, params={"x": 0.2})
    running = tracker.start_run("tune/2", parent=stage, params={"x": 0.3})
    trial = {"config": {}, "generation": 0, "deme": 0, "parents": []}
    with Journal(tmp_path / "journal.jsonl") as journal:
        for number, run in enumerate((done, failed, running)):
            journal.append("trial_started", stage="tune", trial={**trial, "id": str(number)},
                           attempt=1, run_id=run)
        journal.append("trial_finished", stage="tune", trial={**trial, "id": "0"}, attempt=1,
                       status="completed", value=0.5, metrics={"result": 0.5, "wall": 2.0})
        journal.append("trial_finished", stage="tune", trial={**trial, "id": "1"}, attempt=2,
                       status="failed", value=None, metrics={}, reason="rank died")
    tracker.close()

    resumed = Tracker(tmp_path, "reconcile")  # what `nestor resume` builds
    client = resumed.client
    first, second, third = (client.get_run(r) for r in (done, failed, running))
    assert first.info.status == "FINISHED" and first.data.tags["nestor.status"] == "completed"
    assert [m.value for m in client.get_metric_history(done, "result")] == [0.5]  # not twice
    assert first.data.metrics["wall"] == 2.0
    assert second.info.status == "FAILED" and second.data.tags["nestor.failure"] == "rank died"
    assert third.info.status == "RUNNING"  # still to run: the resume runs it
    assert resumed.reconcile() == 0  # nothing left to close
    resumed.close()


def test_a_run_created_but_never_recorded_is_adopted_by_its_derived_key(tmp_path: Path) -> None:
    key = derived_key("run-key", "tune", "3")
    assert key == derived_key("run-key", "tune", "3") != derived_key("run-key", "tune", "4")
    tracker = Tracker(tmp_path, "adopt")
    first = tracker.start_run("tune/3", params={"x": 0.1}, key=key)
    tracker.close()
    (tmp_path / "tracking-keys.json").unlink()  # killed before the id was written anywhere

    resumed = Tracker(tmp_path, "adopt")
    assert resumed.start_run("tune/3", params={"x": 0.1}, key=key, adopt=True) == first
    fresh = resumed.start_run("tune/4", key=derived_key("run-key", "tune", "4"), adopt=True)
    assert fresh != first
    runs = resumed.client.search_runs([resumed.experiment_id])
    assert sorted(r.info.run_id for r in runs) == sorted([first, fresh])
    resumed.close()
