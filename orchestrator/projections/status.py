"""`nestor status RUNDIR`: a workflow's progress, read from its journal alone.

Reading only the journal means status works while the driver runs, after it
was killed, and on a copy of the run directory elsewhere.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from nestor.orchestrator.journal.state import RunState
from nestor.orchestrator.journal.status import StageStatus, TrialStatus


def _alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _all_failed(finished: dict[str, int]) -> bool:
    """A stage whose every trial failed (none completed, none pruned with a value) made
    nothing: it failed, whatever ended it."""
    return bool(finished) and set(finished) == {TrialStatus.FAILED}


def workflow_status(run_dir: Path) -> dict[str, Any]:
    """Per stage: its state (running, finished, failed: every trial failed, or
    interrupted) and how many trials completed, failed, were stopped at its wall budget
    and are running.

    Read from the journal's fold (:class:`RunState`, its stages alone), whose
    snapshot in the run directory makes a second look at a big run read only what
    was appended since."""
    run = RunState.of(run_dir, trials=False)
    if not run.events or run.last_time is None:
        raise FileNotFoundError(f"{run_dir} has no journal: not a nestor run directory")
    finished = run.workflow.finished
    alive = _alive(run.workflow.pid) and not finished
    stages = []
    for stage in run.stages.values():
        state = stage.state
        if state == StageStatus.RUNNING and not alive:
            state = StageStatus.INTERRUPTED
        elif state == StageStatus.FINISHED and _all_failed(stage.finished):
            state = StageStatus.FAILED
        completed = stage.count(TrialStatus.COMPLETED)
        stopped = stage.count(TrialStatus.STOPPED)  # at its wall budget: not failed
        stages.append({
            "name": stage.name, "state": state, "completed": completed,
            "failed": sum(stage.finished.values()) - completed - stopped,
            **({"stopped": stopped} if stopped else {}),
            "running": len(stage.running) if alive or stage.state == StageStatus.RUNNING else 0,
        })
    state = StageStatus.FINISHED if finished else (
        StageStatus.RUNNING if alive else StageStatus.INTERRUPTED)
    if finished and any(stage["state"] == StageStatus.FAILED for stage in stages):
        state = StageStatus.FAILED  # as the run's exit status said: not one result from a stage
    return {
        "run_dir": str(run_dir),
        "state": state,
        "driver_pid": run.workflow.pid if alive else None,
        "last_event_age_s": round(time.time() - run.last_time, 1),
        "stages": stages,
    }
