"""What an attempt's end means for its trial: completed, pruned or failed, with its
value(s) on the stage's objectives, or why it failed."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from orchestrator.backends import Ended
from orchestrator.engine.attempts import Attempt
from orchestrator.spec.needs import Need, what_to_do


def outcome(attempt: Attempt, ended: Ended, objectives: list[Any]) -> dict[str, Any]:
    """The attempt's result as {status, value, metrics, reason, history, logs, checkpoint,
    repeats}.

    A trial the driver killed failed for the reason it was killed; one without a
    result failed as its gang did; a result without every objective's metric, or
    with one that is not a finite number, failed saying which. ``repeats`` (only on
    a failure): a rerun would fail the same way, as the trainer judged its failure
    (``TrialResult.repeats``), or the trainer reported no metric the stage needs."""
    if attempt.cancelled is not None:
        return {"status": "failed", "reason": attempt.cancelled}
    if ended.result is None:
        return {"status": "failed", "reason": ended.failure or "the gang failed"}
    result = ended.result
    files = {"logs": dict(result.logs), "checkpoint": result.checkpoint}
    if not result.ok:
        return {"status": "failed", "reason": result.reason or "the trainer failed",
                "metrics": dict(result.metrics), "history": list(result.history),
                "repeats": result.repeats, **files}
    values = []
    for objective in objectives:
        value = result.metrics.get(objective.metric)
        if value is None:
            return {"status": "failed", "metrics": dict(result.metrics), "repeats": True,
                    "reason": f"the trainer reported no {objective.metric!r}"
                    f" (it reported: {', '.join(sorted(result.metrics)) or 'nothing'})"}
        if not isinstance(value, int | float) or not math.isfinite(value):
            return {"status": "failed", "metrics": dict(result.metrics),
                    "reason": f"{objective.metric} is {value!r}, not a finite number"}
        values.append(float(value))
    return {
        # A pruned trial keeps the value it had when stopped: the search learns
        # that the configuration was poor, the results show it was cut short.
        "status": "pruned" if result.stopped_early else "completed",
        "value": values[0] if len(values) == 1 else values,
        "metrics": dict(result.metrics),
        "history": list(result.history),
        **files,
    }


def unmet_need(done: dict[str, Any], needs: list[Need], trainer: str) -> str | None:
    """Why a completed trial of a function or command ``trainer`` (as people read it)
    breaks its stage, or None: the stage ``needs`` a checkpoint (the trial left no
    file in its checkpoint folder) or predictions (no predictions file there) that
    the spec said it gives. A continuing search would otherwise carry on from
    nothing: PBT would quietly become random search."""
    from trainers.outputs import PREDICTIONS_FILE

    if done["status"] != "completed":
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


def slot_time(attempt: Attempt, ended: Ended) -> tuple[float, float]:
    """The attempt's (own, start-up) slot-seconds: its ranks' busy time from their start
    to its end, and the time spent starting a new gang for it (or failing to)."""
    ranks = attempt.shape.ranks
    if attempt.started is not None:
        return (ended.at - attempt.started) * ranks, attempt.startup_s * ranks
    return 0.0, (ended.at - attempt.launched) * ranks
