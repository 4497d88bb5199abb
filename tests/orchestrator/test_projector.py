"""MLflow as a projection of the journal: a real SQLite store, a hand-written journal.

What a run's journal says is what MLflow shows, once, however often the
projector is stopped, killed or replayed over it.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

from orchestrator.events import (
    StageStarted,
    TrialAttemptFailed,
    TrialFinished,
    TrialStarted,
    WorkflowStarted,
)
from orchestrator.journal import Journal
from orchestrator.projector import CURSOR_FILE, Projector
from orchestrator.spec import load_spec


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
