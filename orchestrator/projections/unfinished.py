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

from nestor.orchestrator.engine.history import Summaries
from nestor.orchestrator.journal.state import RunState, StageState, TrialState
from nestor.orchestrator.journal.status import StageStatus, TrialStatus

JOURNAL_FILE = "journal.jsonl"
SPEC_FILE = "spec.yaml"


def unfinished_results(run_dir: Path) -> dict[str, Any] | None:
    """results.json's layout for the run in ``run_dir`` from its journal, with
    ``"unfinished": True``; None where the journal holds no run.

    Read through the run's fold (``RunState``) with each trial's details, which no
    snapshot holds: the journal is folded from its start. The wall times run from
    the journal's first event (a stage's: its start) to its last, whatever its kind."""
    journal = run_dir / JOURNAL_FILE
    state = RunState.of(run_dir, JOURNAL_FILE, details=True)
    if state.workflow.name is None:
        return None
    modes = _objectives(run_dir)
    first, last = state.first_time, state.last_time
    summaries = Summaries()
    out = []
    for name, stage in state.stages.items():
        if stage.started_at is None and stage.summary_at is None and not stage.trials:
            continue  # only planned, or only logged: not started
        if stage.state == StageStatus.FINISHED and stage.summary_at is not None:
            summaries.found(name, journal, stage.summary_at)
            out.append(summaries[name])
        else:
            out.append(_summary(stage, modes.get(name), first, last, state.workflow.interrupted))
    return {
        "workflow": state.workflow.name, "run_dir": str(run_dir), "unfinished": True,
        "interrupted": state.workflow.interrupted, "stages": out,
        "n_runs": sum(int(s.get("n_runs") or 0) for s in out),
        "slot_seconds": round(sum(float(s.get("slot_seconds") or 0.0) for s in out), 3),
        "wall_time_s": None if first is None or last is None else round(last - first, 3),
    }


def _row(trial: TrialState) -> dict[str, Any]:
    """A trial's row, in the layout of a finished stage's."""
    detail = trial.detail
    assert detail is not None  # folded with details=True
    return {"id": trial.id, "status": trial.status, "value": trial.value,
            "config": detail.config, "generation": detail.generation,
            "attempts": trial.attempts, "slot_seconds": round(trial.slot_seconds, 3),
            "reason": detail.reason, "metrics": detail.metrics,
            "checkpoint": trial.checkpoint, "shape": trial.shape}


def _summary(stage: StageState, objective: tuple[str, str] | None, first: float | None,
             last: float | None, interrupted: str | None) -> dict[str, Any]:
    """A stage's summary so far, in the layout of a finished one's."""
    rows = [_row(trial) for trial in stage.trials.values()]
    done = [r for r in rows if r["status"] != TrialStatus.RUNNING]
    metric, mode = objective or ("value", "max")
    scored = [r for r in done if r["status"] == TrialStatus.COMPLETED
              and isinstance(r["value"], int | float) and not isinstance(r["value"], bool)]
    best = (min if mode == "min" else max)(scored, key=lambda r: r["value"], default=None)
    running = len(rows) - len(done)
    why = f"interrupted ({interrupted})" if interrupted else "not finished"
    started = stage.started_at if stage.started_at is not None else first
    return {
        "name": stage.name, "kind": stage.kind or "hpo", "unfinished": True,
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
        "wall_time_s": None if last is None or started is None else round(last - started, 3),
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
