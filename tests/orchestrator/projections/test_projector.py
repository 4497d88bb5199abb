"""MLflow as a projection of the journal: a real SQLite store, a hand-written journal.

What a run's journal says is what MLflow shows, once, however often the
projector is stopped, killed or replayed over it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from nestor.orchestrator.journal.events import (
    SearchSized,
    StageStarted,
    ThresholdReached,
    TrialAttemptFailed,
    TrialFinished,
    TrialInterrupted,
    TrialStarted,
    WorkflowStarted,
)
from nestor.orchestrator.journal.journal import Journal
from nestor.orchestrator.projections.projector import CURSOR_FILE, Projector
from nestor.orchestrator.spec import load_spec
from tests.orchestrator.projections.journal_in_mlflow import (
    assert_mlflow_shows_every_event,
    journal_events,
)


def workflow(tmp_path: Path):
    spec = tmp_path / "spec.yaml"
    spec.write_text(textwrap.dedent("""
        name: projected
        resources: {slots: 2}
        stages:
          - name: tune
            kind: hpo
            trainer: {command: ["true"]}
            search: {algorithm: random, budget: 3, seed: 1}
            space: {x: {type: float, low: 0, high: 1}}
            objective: {metric: result, mode: min}
        """))
    return load_spec(spec)


def trial(number: int) -> dict:
    return {"id": str(number), "config": {"x": number / 10}, "generation": 0, "deme": 0,
            "parents": [], "origin": "random"}


def write_journal(journal: Journal) -> None:
    journal.record(WorkflowStarted(workflow="projected", slots=2, pid=1, run_key="k"))
    journal.record(StageStarted(stage="tune", stage_kind="hpo", sources=[]))
    for number in range(3):
        journal.record(TrialStarted(stage="tune", trial=trial(number), attempt=1, gang=1,
                                    shape="1x1"))
    journal.record(TrialFinished(
        stage="tune", trial=trial(0), attempt=1, status="completed", value=0.5,
        metrics={"result": 0.5, "wall_time": 2.0}, reason=None, slot_seconds=2.0,
        history=[{"step": 1.0, "result": 0.7}, {"step": 2.0, "result": 0.5}]))
    journal.record(TrialAttemptFailed(stage="tune", trial=trial(1), attempt=1,
                                      reason="rank 1 died", slot_seconds=1.0))
    journal.record(TrialFinished(
        stage="tune", trial=trial(1), attempt=2, status="failed", value=None, metrics={},
        reason="rank 1 died again", slot_seconds=1.0))
    # trial 2 is still running when this journal ends


def project(tmp_path: Path, wf) -> Projector:
    projector = Projector(tmp_path, wf)
    assert projector.flush(timeout_s=60), f"{projector.behind} events not projected"
    projector.close()
    return projector


def check(projector: Projector) -> None:
    client = projector.tracker.client
    runs = {r.info.run_name: r for r in client.search_runs([projector.tracker.experiment_id])}
    assert sorted(runs) == ["tune", "tune/0", "tune/1", "tune/2"]  # each once
    stage = runs["tune"].info.run_id
    assert all(runs[f"tune/{n}"].data.tags["mlflow.parentRunId"] == stage for n in range(3))
    done, failed, running = (runs[f"tune/{n}"] for n in range(3))
    assert done.info.status == "FINISHED" and done.data.params == {"x": "0.0"}
    history = client.get_metric_history(done.info.run_id, "result")
    assert [(m.step, m.value) for m in history] == [(0, 0.7), (1, 0.5), (2, 0.5)]
    assert failed.info.status == "FAILED"
    assert failed.data.tags["nestor.failure"] == "rank 1 died again"
    assert failed.data.tags["nestor.attempt1.failure"] == "rank 1 died"
    assert running.info.status == "RUNNING"  # still to run: a resume runs it


def test_the_journal_is_projected_into_nested_runs(tmp_path: Path) -> None:
    wf = workflow(tmp_path)
    with Journal(tmp_path / "journal.jsonl") as journal:
        write_journal(journal)
    projector = project(tmp_path, wf)
    check(projector)
    assert (tmp_path / CURSOR_FILE).read_text() == "8"  # the next event's seq


def test_the_stage_run_shows_what_auto_built_and_for_how_many(tmp_path: Path) -> None:
    """The width an auto search was built for is a tag of its stage's run; a resumed
    driver's restatement of it changes nothing there."""
    wf = workflow(tmp_path)
    with Journal(tmp_path / "journal.jsonl") as journal:
        journal.record(WorkflowStarted(workflow="projected", slots=64, pid=1, run_key="k"))
        journal.record(StageStarted(stage="tune", stage_kind="hpo", sources=[]))
        built = dict(stage="tune", width=64, pick="genetic async 16",
                     source="64 slots (resources.slots) / 1 rank a trial")
        journal.record(SearchSized(**built, why="64 trials at once"))
        journal.record(SearchSized(**built, resumed_at=2))
    projector = project(tmp_path, wf)
    client = projector.tracker.client
    (run,) = client.search_runs([projector.tracker.experiment_id])
    assert run.data.tags["nestor.search"] == "genetic async 16"
    assert run.data.tags["nestor.search.width"] == (
        "64 at once (64 slots (resources.slots) / 1 rank a trial)")


def test_projecting_again_from_any_point_changes_nothing(tmp_path: Path) -> None:
    # A driver killed after MLflow took some writes of an event but before the
    # cursor moved projects that event again; so does a lost cursor file.
    wf = workflow(tmp_path)
    with Journal(tmp_path / "journal.jsonl") as journal:
        write_journal(journal)
    project(tmp_path, wf)
    for cursor in ("0", "4", "6"):
        (tmp_path / CURSOR_FILE).write_text(cursor)
        check(project(tmp_path, wf))


def test_events_appended_while_it_runs_are_projected_as_they_come(tmp_path: Path) -> None:
    wf = workflow(tmp_path)
    projector = Projector(tmp_path, wf)
    with Journal(tmp_path / "journal.jsonl", on_append=projector.wake) as journal:
        write_journal(journal)
        assert projector.flush(timeout_s=60)
    projector.close()
    check(projector)


def varied_journal(journal: Journal) -> None:
    """Every kind of trial event, trials interleaved (a trial's events far apart, so
    that batches cut through them): completed with a history and a NaN, retried after
    a failed attempt, failed, pruned, interrupted; a gang or none; Horovod or torch."""
    journal.record(WorkflowStarted(workflow="projected", slots=2, pid=1, run_key="k"))
    journal.record(StageStarted(stage="tune", stage_kind="hpo", sources=[]))
    for number in range(40):
        journal.record(TrialStarted(stage="tune", trial=trial(number), attempt=1,
                                    gang=number % 3 or None, shape=f"{1 + number % 2}x1",
                                    comm="torch" if number % 4 == 0 else "horovod"))
        if number < 3:
            continue  # the first ones end after all the others started
        ending = number - 3
        made, outcome = trial(ending), ending % 5
        if outcome == 1:
            journal.record(TrialAttemptFailed(stage="tune", trial=made, attempt=1,
                                              reason=f"rank 1 of {ending} died",
                                              slot_seconds=1.0))
            journal.record(TrialStarted(stage="tune", trial=made, attempt=2, gang=7,
                                        shape="1x1"))
        if outcome == 4:
            journal.record(TrialInterrupted(stage="tune", trial=made, attempt=1,
                                            reason="the allocation ended"))
            continue
        status = {2: "failed", 3: "pruned"}.get(outcome, "completed")
        journal.record(TrialFinished(
            stage="tune", trial=made, attempt=2 if outcome == 1 else 1, status=status,
            value=None if status == "failed" else ending / 10,
            metrics={} if status == "failed" else {"result": ending / 10, "wall_time": 1.5,
                                                   "odd": float("nan")},
            reason=f"trial {ending} failed" if status == "failed" else None,
            slot_seconds=1.0,
            history=[{"step": float(s), "result": ending + s / 10} for s in range(outcome)]))
    journal.record(ThresholdReached(stage="tune", trial="5"))


@pytest.mark.parametrize("batch", [6, 1, 64])
def test_mlflow_shows_every_event_of_every_batch(tmp_path: Path, monkeypatch,
                                                 batch: int) -> None:
    # Batches of 6 (cut through trials), of 1 (each event its own) and the default's
    # size: MLflow must show each event's params, metrics step by step, tags and end,
    # the first and last of each batch included.
    from nestor.orchestrator.projections import projector as module

    monkeypatch.setattr(module, "BATCH_EVENTS_BULK", batch)
    monkeypatch.setattr(module, "BATCH_EVENTS", batch)
    wf = workflow(tmp_path)
    with Journal(tmp_path / "journal.jsonl", fsync=False) as journal:
        varied_journal(journal)
    projector = project(tmp_path, wf)
    events = journal_events(tmp_path)
    assert len(events) > 64 + 1  # more than one default batch
    shown = assert_mlflow_shows_every_event(projector.tracker.client,
                                            projector.tracker.experiment_id, events)
    assert shown == 41  # the stage and its 40 trials


def test_mlflow_shows_every_event_appended_while_it_projects(tmp_path: Path) -> None:
    # Batches as the events come (whatever was on disk at each wake).
    wf = workflow(tmp_path)
    projector = Projector(tmp_path, wf)
    with Journal(tmp_path / "journal.jsonl", on_append=projector.wake) as journal:
        varied_journal(journal)
        assert projector.flush(timeout_s=60), f"{projector.behind} events not projected"
    projector.close()
    assert_mlflow_shows_every_event(projector.tracker.client, projector.tracker.experiment_id,
                                    journal_events(tmp_path))


@pytest.mark.slow
def test_a_finished_run_leaves_mlflow_showing_every_event(tmp_path: Path) -> None:
    # Many quick trials put the projection well behind the loop; the driver waits for
    # it at the end. (A race in how far behind it was read 0 for a moment once, and
    # the driver left 2,131 of 4,004 events to a resume.) MLflow itself is read back:
    # every trial's run with its params, metrics, tags and end, as the journal says.
    (tmp_path / "triv.py").write_text("def trivial(config, ctx):\n"
                                      "    return {'score': config['x'] ** 2}\n")
    spec = tmp_path / "many.yaml"
    spec.write_text(textwrap.dedent("""
        name: many
        resources: {slots: 2}
        stages:
          - name: tune
            kind: hpo
            trainer: {function: "triv:trivial"}
            search: {algorithm: random, budget: 400, seed: 0}
            space: {x: {type: float, low: -1, high: 1}}
            objective: {metric: score, mode: min}
        """))
    run_dir = tmp_path / "run"
    nestor = str(Path(sys.executable).parent / "nestor")
    ran = subprocess.run([nestor, "run", str(spec), "--run-dir", str(run_dir)],
                         capture_output=True, text=True, timeout=600, check=False,
                         env={**os.environ, "PYTHONPATH": str(tmp_path)})
    assert ran.returncode == 0, ran.stderr
    assert "not in MLflow" not in ran.stderr
    events = journal_events(run_dir)
    assert (run_dir / CURSOR_FILE).read_text() == str(len(events))
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{run_dir / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("many")
    assert experiment is not None
    shown = assert_mlflow_shows_every_event(client, experiment.experiment_id, events)
    assert shown == 401  # the stage and its 400 trials
    assert sum(e["event"] == "stage_finished" for e in events) == 1


class _Quick:
    """A tracker that takes every write at once: the projection runs as fast as the
    projector itself can go, which is what this test races against."""

    uri = "memory:"

    def start_run(self, name: str, **_: object) -> str:
        return name

    def __getattr__(self, _name: str):
        return lambda *args, **kwargs: None


def test_how_far_behind_is_never_read_as_caught_up_too_early(tmp_path: Path) -> None:
    # The driver's thread asks `behind` while the projector's thread reads the journal;
    # both counts it compares must come from one moment, or it reads 0 while events
    # wait, and the driver leaves them to a resume.
    wf = workflow(tmp_path)
    with Journal(tmp_path / "journal.jsonl") as journal:
        journal.record(WorkflowStarted(workflow="projected", slots=2, pid=1, run_key="k"))
        for number in range(3000):
            journal.record(TrialStarted(stage="tune", trial=trial(number), attempt=1, gang=1,
                                        shape="1x1"))
    total = 3001
    projector = Projector(tmp_path, wf, tracker=_Quick())  # type: ignore[arg-type]
    early = []
    while projector.done < total:
        if projector.behind == 0 and projector.done < total:
            early.append(projector.done)
    projector.close()
    assert not early, f"read as caught up at {early[:5]} of {total} events"


def test_a_run_is_never_searched_for_in_mlflow(tmp_path: Path, monkeypatch) -> None:
    # A run's identity comes from the journal (its derived key), learnt from the store
    # in one paged read when a projector starts on a store that has runs, and not at
    # all on a new one: never a search per trial, whose cost grows with the store.
    from mlflow.tracking import MlflowClient

    searches = []
    real = MlflowClient.search_runs

    def counted(self, *args, **kwargs):
        searches.append(kwargs.get("filter_string"))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(MlflowClient, "search_runs", counted)
    wf = workflow(tmp_path)
    with Journal(tmp_path / "journal.jsonl") as journal:
        write_journal(journal)
    project(tmp_path, wf)
    assert searches == []  # a fresh run: nothing to look up
    (tmp_path / CURSOR_FILE).write_text("0")  # a replay over a store that has the runs
    projector = project(tmp_path, wf)
    assert len(searches) == 1, searches  # one paged read, not one per run
    monkeypatch.setattr(MlflowClient, "search_runs", real)
    check(projector)
