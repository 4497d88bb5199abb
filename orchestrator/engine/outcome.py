"""What an attempt's end means for its trial: completed, pruned or failed, with its
value(s) on the stage's objectives, or why it failed."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from nestor.orchestrator.backends.interface import Ended
from nestor.orchestrator.engine.attempts import Attempt
from nestor.orchestrator.journal.errors import out_of_space
from nestor.orchestrator.journal.journal import DiskFull
from nestor.orchestrator.journal.status import TrialStatus
from nestor.orchestrator.journal.text import first_line
from nestor.orchestrator.spec.needs import Need, what_to_do
from nestor.trainers.history import bounded

MAX_REASON = 2000  # characters of a failure's reason kept (a command's last line may be 64 KiB)


class TrialDiskFull(DiskFull):
    """A trial failed for want of disk space or quota: the driver stops as on its own
    full disk (exit 75), the trial unjournalled as finished, so `nestor resume` runs
    it again once there is space."""

    def __init__(self, run_dir: Path, trial: str, reason: str) -> None:
        self.trial, self.reason = trial, first_line(RuntimeError(reason))[:300]
        super().__init__(Path(run_dir) / "journal.jsonl", 0)

    def message(self) -> str:
        return (f"trial {self.trial} ran out of disk space ({self.reason}); the disk"
                f" holding {self.path.parent} has {self.free} bytes free")


def disk_full(reason: str | None) -> bool:
    """Whether a failure was the machine's (a full disk or quota), not the trial's: such
    a trial is not journalled as failed but run again once there is space."""
    return out_of_space(reason)


def outcome(attempt: Attempt, ended: Ended, objectives: list[Any]) -> dict[str, Any]:
    """The attempt's result as {status, value, metrics, reason, history, logs, checkpoint,
    repeats}.

    A trial the driver killed failed for the reason it was killed; one without a
    result failed as its gang did; a result without every objective's metric, or
    with one that is not a finite number, failed saying which. ``repeats`` (only on
    a failure): a rerun would fail the same way, as the trainer judged its failure
    (``TrialResult.repeats``), or the trainer reported no metric the stage needs."""
    if attempt.cancelled is not None:
        return {"status": TrialStatus.FAILED, "reason": attempt.cancelled}
    if ended.result is None:
        return {"status": TrialStatus.FAILED, "reason": _short(ended.failure or "the gang failed")}
    result = ended.result
    files = {"logs": dict(result.logs), "checkpoint": result.checkpoint,
             "logged": dict(result.logged or {})}
    if not result.ok:
        return {"status": TrialStatus.FAILED,
                "reason": _short(result.reason or "the trainer failed"),
                "metrics": dict(result.metrics), "history": bounded(result.history),
                "repeats": result.repeats, **files}
    values = []
    for objective in objectives:
        value = result.metrics.get(objective.metric)
        if value is None:  # a metric the trainer logged (nestor.metric, ctx.log_metrics)
            value = last_logged(result.logged, objective.metric)
        if value is None:
            return {"status": TrialStatus.FAILED, "metrics": dict(result.metrics), "repeats": True,
                    "reason": f"the trainer reported no {objective.metric!r}"
                    f" (it reported: {', '.join(sorted(result.metrics)) or 'nothing'})"}
        if not isinstance(value, int | float) or not math.isfinite(value):
            return {"status": TrialStatus.FAILED, "metrics": dict(result.metrics),
                    "reason": f"{objective.metric} is {value!r}, not a finite number"}
        values.append(float(value))
    return {
        # A pruned trial keeps the value it had when stopped: the search learns
        # that the configuration was poor, the results show it was cut short.
        "status": TrialStatus.PRUNED if result.stopped_early else TrialStatus.COMPLETED,
        "value": values[0] if len(values) == 1 else values,
        "metrics": dict(result.metrics),
        "history": bounded(result.history),
        **files,
    }


def journalled_logs(logged: dict[str, Any] | None, folder: str) -> dict[str, Any] | None:
    """What a trial logged (``TrialResult.logged``) as its ``trial_finished`` keeps it:
    each artifact with its path relative to the run directory (its artifact folder
    is ``folder`` there); None when it logged nothing."""
    if not logged:
        return None
    out = dict(logged)
    if out.get("artifacts"):
        out["artifacts"] = [{**entry, "path": f"{folder}/{entry['name']}"}
                            for entry in out["artifacts"]
                            if isinstance(entry, dict) and isinstance(entry.get("name"), str)]
    return out


def unmet_need(done: dict[str, Any], needs: list[Need], trainer: str) -> str | None:
    """Why a completed trial of a function or command ``trainer`` (as people read it)
    breaks its stage, or None: the stage ``needs`` a checkpoint (the trial left no
    file in its checkpoint folder) or predictions (no predictions file there) that
    the spec said it gives. A continuing search would otherwise carry on from
    nothing: PBT would quietly become random search."""
    from nestor.trainers.outputs import PREDICTIONS_FILE

    if done["status"] != TrialStatus.COMPLETED:
        return None
    checkpoint = done.get("checkpoint")
    for need in needs:
        if need.capability == "checkpoints" and not checkpoint:
            left = "no file in its checkpoint folder"
        elif need.capability == "predictions" and not (
                checkpoint and (Path(checkpoint) / PREDICTIONS_FILE).is_file()):
            left = f"no {PREDICTIONS_FILE} in its checkpoint folder"
        else:
            continue
        return (f"the {trainer} says it gives {need.capability} but left {left};"
                f" {what_to_do(need.capability, need.why, declare=False)}")
    return None


def _short(reason: str) -> str:
    """A reason as the journal keeps it: at most ``MAX_REASON`` characters."""
    return reason if len(reason) <= MAX_REASON else reason[:MAX_REASON - 3] + "..."


def slot_time(attempt: Attempt, ended: Ended) -> tuple[float, float]:
    """The attempt's (own, start-up) slot-seconds: its ranks' busy time from their start
    to its end, and the time spent starting a new gang for it (or failing to)."""
    ranks = attempt.shape.ranks
    if attempt.started is not None:
        return (ended.at - attempt.started) * ranks, attempt.startup_s * ranks
    return 0.0, (ended.at - attempt.launched) * ranks


def last_logged(logged: dict[str, Any] | None, metric: str) -> float | None:
    """The last value the trainer logged of ``metric`` (None: it logged none): how a
    command reports a second objective beside its ``FoM:`` line (``nestor.metric
    latency=0.2``), or a function one it logged but did not return."""
    points = ((logged or {}).get("metrics") or {}).get(metric) or []
    return float(points[-1][1]) if points else None
