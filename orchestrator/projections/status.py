"""`nestor status RUNDIR`: a workflow's progress, read from its journal alone.

Reading only the journal means status works while the driver runs, after it
was killed, and on a copy of the run directory elsewhere.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from orchestrator.journal.journal import iter_events

# What the progress is read from: a line of any other kind (the searchers' logs,
# most of a big journal) is skipped unparsed.
KINDS = frozenset({"workflow_started", "workflow_resumed", "workflow_finished",
                   "stage_started", "stage_finished", "trial_started", "trial_finished"})


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


def workflow_status(run_dir: Path) -> dict[str, Any]:
    """Per stage: its state and how many trials completed, failed and are running."""
    stages: dict[str, dict[str, Any]] = {}
    driver_pid = None
    finished = False
    last: dict[str, Any] | None = None
    for event in iter_events(run_dir / "journal.jsonl", KINDS):
        last = event
        kind = event["event"]
        if kind in ("workflow_started", "workflow_resumed"):
            driver_pid = event.get("pid")
        elif kind == "workflow_finished":
            finished = True
        name = event.get("stage")
        if name is None:
            continue
        stage = stages.setdefault(
            name, {"name": name, "state": "running", "running": set(), "completed": 0,
                   "failed": 0}
        )
        if kind == "trial_started":
            stage["running"].add(event["trial"]["id"])
        elif kind == "trial_finished":
            stage["running"].discard(event["trial"]["id"])
            stage["completed" if event["status"] == "completed" else "failed"] += 1
        elif kind == "stage_finished":
            stage["state"] = "finished"
            stage["running"] = set()
    if last is None:
        raise FileNotFoundError(f"{run_dir} has no journal: not a nestor run directory")
    alive = _alive(driver_pid) and not finished
    for stage in stages.values():
        stage["running"] = len(stage["running"]) if alive or stage["state"] == "running" else 0
        if stage["state"] == "running" and not alive:
            stage["state"] = "interrupted"
    state = "finished" if finished else ("running" if alive else "interrupted")
    return {
        "run_dir": str(run_dir),
        "state": state,
        "driver_pid": driver_pid if alive else None,
        "last_event_age_s": round(time.time() - last["time"], 1),
        "stages": list(stages.values()),
    }
