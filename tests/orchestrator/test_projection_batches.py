"""Many trials' runs per transaction of the run directory's own MLflow store.

MLflow's client costs a trial's run three transactions (create, log_batch, end);
the projector writes a batch of trials through MLflow's own store models in one.
The runs must come out as the client makes them, and the batches must be batches.
"""

from __future__ import annotations

from pathlib import Path

from orchestrator.journal.events import (
    StageStarted,
    TrialFinished,
    TrialStarted,
    WorkflowStarted,
)
from orchestrator.journal.journal import Journal
from orchestrator.projections.projector import Projector
from orchestrator.projections.tracking import RunWrites, Tracker
from tests.orchestrator.test_projector import trial, workflow


def writes(key: str, parent: str) -> RunWrites:
    run = RunWrites(f"tune/{key}", key, parent=parent, start_time=1000.0,
                    create_tags={"nestor.stage": "tune", "nestor.status": "running"},
                    params={"x": 0.25, "name": "a"})
    run.tags |= {"nestor.status": "completed", "nestor.attempts": 1}
    run.metrics += [({"loss": 0.7}, 0, 1001.0), ({"loss": 0.5, "odd": float("nan")}, 1,
                                                  1002.0)]
    run.end = ("FINISHED", 1003.0)
    return run


def shown(tracker: Tracker, run_id: str) -> dict:
    """What the MLflow UI reads of a run, less what differs by run (ids, names)."""
    run = tracker.client.get_run(run_id)
    tags = {k: v for k, v in run.data.tags.items()
            if k not in {"nestor.key", "mlflow.runName"}}
    history = [(m.step, m.value, m.timestamp)
               for m in tracker.client.get_metric_history(run_id, "loss")]
    return {"tags": tags, "params": run.data.params, "metrics": run.data.metrics,
            "history": history, "status": run.info.status, "start": run.info.start_time,
            "end": run.info.end_time, "lifecycle": run.info.lifecycle_stage,
            "artifacts": run.info.artifact_uri.rsplit("/", 2)[0]}


def test_a_run_written_in_a_batch_shows_what_the_client_would_have_made(tmp_path: Path) -> None:
    tracker = Tracker(tmp_path, "batches")
    assert tracker.bulk  # the run directory's own store
    stage = tracker.start_run("tune", key="stage")
    by_client = tracker.apply(writes("one", stage))  # MLflow's client, run by run
    tracker.apply_all([writes("two", stage)])
    by_batch = tracker.keys["two"]
    assert shown(tracker, by_batch) == shown(tracker, by_client)
    tracker.apply_all([writes("two", stage)])  # again: nothing changes
    assert shown(tracker, by_batch) == shown(tracker, by_client)
    tracker.close()


def test_a_batch_of_trials_is_one_transaction_not_three_a_trial(tmp_path: Path,
                                                                monkeypatch) -> None:
    from sqlalchemy.orm import Session

    commits = []
    real = Session.commit

    def counted(self, *args, **kwargs):
        commits.append(1)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Session, "commit", counted)
    wf = workflow(tmp_path)
    with Journal(tmp_path / "journal.jsonl") as journal:
        journal.record(WorkflowStarted(workflow="projected", slots=2, pid=1, run_key="k"))
        journal.record(StageStarted(stage="tune", stage_kind="hpo", sources=[]))
        for number in range(300):
            journal.record(TrialStarted(stage="tune", trial=trial(number), attempt=1, gang=1,
                                        shape="1x1"))
            journal.record(TrialFinished(stage="tune", trial=trial(number), attempt=1,
                                         status="completed", value=0.5,
                                         metrics={"result": 0.5}, reason=None,
                                         slot_seconds=1.0))
    projector = Projector(tmp_path, wf)
    assert projector.flush(timeout_s=120), f"{projector.behind} events not projected"
    projector.close()
    runs = projector.tracker.client.search_runs([projector.tracker.experiment_id],
                                                max_results=1000)
    trials = [r for r in runs if r.info.run_name != "tune"]
    assert len(trials) == 300 and {r.info.status for r in trials} == {"FINISHED"}
    assert {r.data.metrics["result"] for r in trials} == {0.5}
    assert len(commits) < 30, f"{len(commits)} transactions for 300 trials"
