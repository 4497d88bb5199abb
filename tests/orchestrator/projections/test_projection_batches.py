"""Many trials' runs per transaction of the run directory's own MLflow store.

MLflow's client costs a trial's run three transactions (create, log_batch, end);
the projector writes a batch of trials through MLflow's own store models in one.
The runs must come out as the client makes them, and the batches must be batches.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from nestor.orchestrator.journal.events import (
    SearchLogged,
    StageStarted,
    TrialFinished,
    TrialStarted,
    WorkflowStarted,
)
from nestor.orchestrator.journal.journal import Journal
from nestor.orchestrator.projections.projector import Projector
from nestor.orchestrator.projections.tracking import RunWrites, Tracker
from tests.orchestrator.projections.test_projector import trial, workflow


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


def trials_journal(path: Path, trials: int, config: dict | None = None, *,
                   searched: bool = False) -> int:
    """A journal of ``trials`` trials, each started and finished (``config`` added to
    the first's), with the search's log entries a driver journals around each (its
    ask and its tell) when ``searched``; returns its events."""
    with Journal(path, fsync=False) as journal:
        journal.record(WorkflowStarted(workflow="projected", slots=2, pid=1, run_key="k"))
        journal.record(StageStarted(stage="tune", stage_kind="hpo", sources=[]))
        for number in range(trials):
            made = trial(number)
            if number == 0:
                made["config"] |= config or {}
            if searched:
                journal.record(SearchLogged(stage="tune", start=2 * number, entries=[
                    {"event": "ask", "n": 1, "trials": [made]}]))
            journal.record(TrialStarted(stage="tune", trial=made, attempt=1, gang=1,
                                        shape="1x1"))
            journal.record(TrialFinished(stage="tune", trial=made, attempt=1,
                                         status="completed", value=0.5,
                                         metrics={"result": 0.5}, reason=None,
                                         slot_seconds=1.0))
            if searched:
                journal.record(SearchLogged(stage="tune", start=2 * number + 1, entries=[
                    {"event": "tell", "id": made["id"], "value": 0.5}]))
    return 2 + (4 if searched else 2) * trials


def trial_runs(projector: Projector) -> list:
    runs = projector.tracker.client.search_runs([projector.tracker.experiment_id],
                                                max_results=1000)
    return [r for r in runs if r.info.run_name != "tune"]


@pytest.mark.parametrize("searched", [False, True], ids=["trials", "with-search-log"])
def test_a_batch_of_trials_is_one_transaction_not_three_a_trial(tmp_path: Path,
                                                                monkeypatch,
                                                                searched: bool) -> None:
    """The search's log entries (two a trial, between its events) write nothing to
    MLflow and do not cut a batch: when each did, 300 trials took some 300
    transactions (a 2,000-trial sweep's projection, 4.7 s of the driver's CPU)."""
    from sqlalchemy.orm import Session

    commits = []
    real = Session.commit

    def counted(self, *args, **kwargs):
        commits.append(1)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Session, "commit", counted)
    wf = workflow(tmp_path)
    trials_journal(tmp_path / "journal.jsonl", 300, searched=searched)
    projector = Projector(tmp_path, wf)
    assert projector.flush(timeout_s=120), f"{projector.behind} events not projected"
    projector.close()
    trials = trial_runs(projector)
    assert len(trials) == 300 and {r.info.status for r in trials} == {"FINISHED"}
    assert {r.data.metrics["result"] for r in trials} == {0.5}
    assert len(commits) < 30, f"{len(commits)} transactions for 300 trials"


def test_a_long_journal_is_projected_part_by_part_each_event_once(tmp_path: Path,
                                                                  monkeypatch) -> None:
    """The first batch is written once a part of the journal is parsed, not all of it;
    no event is lost or doubled where a part ends, a line longer than a part
    included."""
    from nestor.orchestrator.projections import projector as module

    monkeypatch.setattr(module, "READ_BYTES", 4096)
    monkeypatch.setattr(module, "BATCH_EVENTS_BULK", 40)
    events = trials_journal(tmp_path / "journal.jsonl", 120, {"note": "n" * 9000})
    read_at_first_write = []
    real = Tracker.apply_all

    def watched(self, batch):
        read_at_first_write.append(projector.seen)
        return real(self, batch)

    monkeypatch.setattr(Tracker, "apply_all", watched)
    projector = Projector(tmp_path, workflow(tmp_path))
    assert projector.flush(timeout_s=120), f"{projector.behind} events not projected"
    projector.close()
    assert read_at_first_write[0] < events / 2, read_at_first_write[:3]
    trials = trial_runs(projector)
    assert sorted(int(r.data.tags["nestor.trial"]) for r in trials) == list(range(120))
    assert {r.info.status for r in trials} == {"FINISHED"}
    assert projector.done == projector.seen == events


def test_runs_made_later_have_ids_that_sort_later(tmp_path: Path) -> None:
    """New runs' rows go at the end of every index on ``run_uuid`` (see
    ``sql_store.ordered_run_id``), batch after batch."""
    tracker = Tracker(tmp_path, "ordered")
    stage = tracker.start_run("tune", key="stage")
    for first in range(0, 60, 20):
        tracker.apply_all([writes(str(n), stage) for n in range(first, first + 20)])
    ids = [tracker.keys[str(n)] for n in range(60)]
    assert ids == sorted(ids) and len(set(ids)) == 60
    assert all(len(run_id) == 32 and int(run_id, 16) >= 0 for run_id in ids)
    tracker.close()


def server_like(tmp_path: Path, monkeypatch) -> Tracker:
    """A tracker of a store the run directory does not own (as a server's): run by run
    (its artifacts under ``./mlruns``: the test's directory)."""
    monkeypatch.chdir(tmp_path)
    tracker = Tracker(tmp_path / "run", "elsewhere", f"sqlite:///{tmp_path / 'other.db'}")
    assert not tracker.bulk
    return tracker


def test_a_batch_of_runs_goes_to_a_server_several_at_once(tmp_path: Path,
                                                          monkeypatch) -> None:
    """A server's round trips overlap: two runs' creates are in flight together."""
    import threading

    tracker = server_like(tmp_path, monkeypatch)
    stage = tracker.start_run("tune", key="stage")
    both = threading.Barrier(2, timeout=20)
    real = tracker.client.create_run

    def create_run(*args, **kwargs):
        both.wait()  # one run at a time: never two here at once, broken after 20 s
        return real(*args, **kwargs)

    monkeypatch.setattr(tracker.client, "create_run", create_run)
    tracker.apply_all([writes("a", stage), writes("b", stage)])
    assert {"a", "b"} <= set(tracker.keys)
    for key in ("a", "b"):
        assert shown(tracker, tracker.keys[key])["status"] == "FINISHED"
    tracker.close()


def test_a_run_refused_in_a_batch_is_raised_once_the_others_are_written(
        tmp_path: Path, monkeypatch) -> None:
    """Nothing may still be writing when the projector sends the batch again (that
    would make a run twice); the refusal is raised after every other run is done."""
    import time

    from mlflow.exceptions import MlflowException

    tracker = server_like(tmp_path, monkeypatch)
    stage = tracker.start_run("tune", key="stage")
    real = tracker.client.create_run

    def create_run(experiment_id, *, run_name, **kwargs):
        if run_name == "tune/bad":
            raise MlflowException("refused")
        time.sleep(0.5)  # slower than the refusal
        return real(experiment_id, run_name=run_name, **kwargs)

    monkeypatch.setattr(tracker.client, "create_run", create_run)
    try:
        tracker.apply_all([writes("bad", stage), writes("slow", stage)])
    except MlflowException:
        pass
    else:
        raise AssertionError("the refused run was not raised")
    assert "slow" in tracker.keys
    assert shown(tracker, tracker.keys["slow"])["status"] == "FINISHED"
    tracker.close()


def test_a_run_made_by_a_request_whose_answer_was_lost_is_not_made_again(
        tmp_path: Path, monkeypatch) -> None:
    """A create that timed out may have been made all the same: the retry finds it."""
    import requests

    tracker = server_like(tmp_path, monkeypatch)
    trials_journal(tmp_path / "run" / "journal.jsonl", 3)
    real, lost = tracker.client.create_run, []

    def create_run(*args, **kwargs):
        made = real(*args, **kwargs)
        if kwargs.get("run_name") == "tune/1" and not lost:
            lost.append(made.info.run_id)
            raise requests.ConnectionError("read timed out")  # made, but never said so
        return made

    monkeypatch.setattr(tracker.client, "create_run", create_run)
    projector = Projector(tmp_path / "run", workflow(tmp_path), tracker=tracker)
    assert projector.flush(timeout_s=120), f"{projector.behind} events not projected"
    projector.close()
    runs = tracker.client.search_runs([tracker.experiment_id], max_results=100)
    assert sorted(r.info.run_name for r in runs) == ["tune", "tune/0", "tune/1", "tune/2"]
    assert lost and lost[0] in tracker.keys.values()  # the run made then, found
    for run in runs:  # the found run's params too: its create's log_batch never came
        if run.info.run_name != "tune":
            assert run.data.params == {"x": str(int(run.info.run_name[5:]) / 10)}, run.info


def test_appends_as_a_run_goes_are_projected_in_few_passes(tmp_path: Path,
                                                            monkeypatch) -> None:
    """A trial's events come milliseconds apart; the projector gathers what comes
    within ``PACE_S`` into one pass (a transaction, a store read, a cursor check, in
    the driver's process) instead of a pass per append, and a flush (the run's end)
    does not wait the pace out. Broken on purpose (``PACE_S = 0``: a pass per wake),
    the passes number in the dozens."""
    import time

    from nestor.orchestrator.projections import projector as module

    passes: list[int] = []
    real = Tracker.apply_all

    def counted(self, batch):
        passes.append(len(batch))
        return real(self, batch)

    monkeypatch.setattr(Tracker, "apply_all", counted)
    # Opened first: a pass then costs what it does in a run, not the store's creation.
    projector = Projector(tmp_path, workflow(tmp_path), tracker=Tracker(tmp_path, "projected"))
    trials, began = 120, time.monotonic()
    with Journal(tmp_path / "journal.jsonl", on_append=projector.wake, fsync=False) as journal:
        journal.record(WorkflowStarted(workflow="projected", slots=2, pid=1, run_key="k"))
        journal.record(StageStarted(stage="tune", stage_kind="hpo", sources=[]))
        for number in range(trials):
            made = trial(number)
            journal.record(TrialStarted(stage="tune", trial=made, attempt=1, gang=1,
                                        shape="1x1"))
            time.sleep(0.004)
            journal.record(TrialFinished(stage="tune", trial=made, attempt=1,
                                         status="completed", value=0.5,
                                         metrics={"result": 0.5}, reason=None,
                                         slot_seconds=1.0))
            time.sleep(0.004)
    took = time.monotonic() - began
    flushing = time.monotonic()
    assert projector.flush(timeout_s=120), f"{projector.behind} events not projected"
    flushed = time.monotonic() - flushing
    projector.close()
    assert len(trial_runs(projector)) == trials
    # At most a pass per PACE_S of appending (and the flush's), however slow the
    # machine made the appends, and many trials a pass: with a pass per append there
    # would be ~240 (PACE_S near 0 makes ~100).
    assert len(passes) <= took / module.PACE_S + 3, (len(passes), round(took, 2), passes)
    assert len(passes) <= trials / 8, (len(passes), round(took, 2), passes)
    print(f"{len(passes)} passes over {took:.2f} s of appends; the flush took {flushed:.2f} s")
