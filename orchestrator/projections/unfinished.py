"""The results of a run that has not finished, read from its journal.

``results.json`` is written when a workflow finishes; a run that was interrupted
(or still runs) has only its journal. Its results are what the journal says:
each finished stage's summary as it was journalled, and for a stage that has not
finished, a summary of its trials so far (their status, value, attempts and
slot time, and its best completed trial by its objective), marked unfinished.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

from nestor.orchestrator.journal.events import (
    StageFinished,
    StageReopened,
    StageStarted,
    TrialAttemptFailed,
    TrialFinished,
    TrialStarted,
    WorkflowInterrupted,
    WorkflowStarted,
    kinds_of,
    parse,
)
from nestor.orchestrator.journal.journal import damaged_line, iter_events
from nestor.orchestrator.journal.status import TrialStatus

JOURNAL_FILE = "journal.jsonl"
SPEC_FILE = "spec.yaml"
_READ = kinds_of(WorkflowStarted, WorkflowInterrupted, StageStarted, StageFinished, StageReopened,
                 TrialStarted, TrialAttemptFailed, TrialFinished)


def unfinished_results(run_dir: Path) -> dict[str, Any] | None:
    """results.json's layout for the run in ``run_dir`` from its journal, with
    ``"unfinished": True``; None where the journal holds no run."""
    journal = run_dir / JOURNAL_FILE
    workflow: str | None = None
    interrupted: str | None = None
    first = last = None
    stages: dict[str, dict[str, Any]] = {}  # in the order they started
    finished: dict[str, dict[str, Any]] = {}
    for record in iter_events(journal, kinds=_READ):
        try:
            event = parse(record)
        except (ValueError, TypeError, KeyError):
            raise damaged_line(journal, f"with seq {record.get('seq')!r}",
                               "is not a journal event") from None
        first = event.time if first is None else first
        last = event.time
        if isinstance(event, WorkflowStarted):
            workflow = event.workflow
        elif isinstance(event, WorkflowInterrupted):
            interrupted = event.reason
        elif isinstance(event, StageStarted):
            stages.setdefault(event.stage, _partial(event.stage, event.stage_kind, event.time))
        elif isinstance(event, StageFinished):
            stages.setdefault(event.stage, _partial(event.stage, None, event.time))
            finished[event.stage] = event.summary
        elif isinstance(event, StageReopened):
            finished.pop(event.stage, None)
        elif isinstance(event, TrialStarted | TrialAttemptFailed | TrialFinished):
            stage = stages.setdefault(event.stage, _partial(event.stage, None, event.time))
            _trial_event(stage, event)
    if workflow is None:
        return None
    modes = _objectives(run_dir)
    out = []
    for name, stage in stages.items():
        if name in finished:
            out.append(finished[name])
        else:
            out.append(_summary(stage, modes.get(name), last, interrupted))
    return {
        "workflow": workflow, "run_dir": str(run_dir), "unfinished": True,
        "interrupted": interrupted, "stages": out,
        "n_runs": sum(int(s.get("n_runs") or 0) for s in out),
        "slot_seconds": round(sum(float(s.get("slot_seconds") or 0.0) for s in out), 3),
        "wall_time_s": None if first is None else round(last - first, 3),
    }


def _partial(name: str, kind: str | None, at: float) -> dict[str, Any]:
    return {"name": name, "kind": kind, "started_at": at, "trials": {}}


def _trial_event(stage: dict[str, Any], event: Any) -> None:
    trial = event.trial if isinstance(event.trial, dict) else {"id": event.trial}
    row = stage["trials"].setdefault(str(trial.get("id")), {
        "id": str(trial.get("id")), "status": TrialStatus.RUNNING, "value": None,
        "config": dict(trial.get("config") or {}), "generation": trial.get("generation", 0),
        "attempts": 0, "slot_seconds": 0.0, "reason": None, "metrics": {},
        "checkpoint": None, "shape": None})
    row["attempts"] = max(row["attempts"], int(event.attempt or 1))
    if isinstance(event, TrialStarted):
        row["shape"] = event.shape or row["shape"]
        return
    row["slot_seconds"] = round(row["slot_seconds"] + float(event.slot_seconds or 0.0), 3)
    if isinstance(event, TrialFinished):
        row.update(status=event.status, value=event.value, reason=event.reason,
                   metrics=event.metrics or {}, checkpoint=event.checkpoint)


def _summary(stage: dict[str, Any], objective: tuple[str, str] | None, last: float | None,
             interrupted: str | None) -> dict[str, Any]:
    """A stage's summary so far, in the layout of a finished one's."""
    rows = list(stage["trials"].values())
    done = [r for r in rows if r["status"] != TrialStatus.RUNNING]
    metric, mode = objective or ("value", "max")
    scored = [r for r in done if r["status"] == TrialStatus.COMPLETED
              and isinstance(r["value"], int | float) and not isinstance(r["value"], bool)]
    best = (min if mode == "min" else max)(scored, key=lambda r: r["value"], default=None)
    running = len(rows) - len(done)
    why = f"interrupted ({interrupted})" if interrupted else "not finished"
    return {
        "name": stage["name"], "kind": stage["kind"] or "hpo", "unfinished": True,
        "objective": {"metric": metric, "mode": mode},
        "stop_reason": f"{why}: {len(done)} trial(s) finished, {running} not;"
                       " `nestor resume` goes on",
        "best": None if best is None else {
            "id": best["id"], "config": best["config"], "value": best["value"],
            "test_value": best["metrics"].get("test_accuracy"), "checkpoint": best["checkpoint"]},
        "trials": rows,
        "n_trials": len(rows), "n_runs": sum(r["attempts"] for r in rows),
        "n_failed": sum(1 for r in done if r["status"] == TrialStatus.FAILED),
        "n_pruned": sum(1 for r in done if r["status"] == TrialStatus.PRUNED),
        "slot_seconds": round(sum(r["slot_seconds"] for r in rows), 3),
        "wall_time_s": None if last is None else round(last - stage["started_at"], 3),
        "time_to_threshold_s": None,
    }


def _objectives(run_dir: Path) -> dict[str, tuple[str, str]]:
    """Each searching stage's first objective (metric, mode), from the run's spec; none
    where the spec does not load (its best trials are then the highest values)."""
    from nestor.orchestrator.spec import SpecError, load_spec

    with contextlib.suppress(SpecError, OSError, ValueError):
        workflow = load_spec(run_dir / SPEC_FILE, imports=False)
        return {stage.name: (stage.objectives[0].metric, stage.objectives[0].mode)
                for stage in workflow.stages if stage.objectives}
    return {}
