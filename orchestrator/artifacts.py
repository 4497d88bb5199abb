"""What a finished stage leaves in MLflow beside its trials: plots, the best
checkpoint and its headline metrics. One function, so every stage kind
publishes the same way and the UI finds things in the same places."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from orchestrator.tracking import Tracker


def publish_stage(tracker: Tracker, run_id: str, summary: dict[str, Any], stage: Any,
                  run_dir: Path) -> list[Path]:
    """Write the stage's plots into the run directory and log them with the rest."""
    from orchestrator.plots import plot_trials

    written: list[Path] = []
    if summary.get("kind") == "hpo":
        plot = plot_trials(summary, stage.objectives[0], run_dir / "plots" / f"{stage.name}.png")
        tracker.log_artifact(run_id, plot, "plots")
        written.append(plot)
    best = summary.get("best")
    if best and best.get("checkpoint") and Path(best["checkpoint"]).is_file():
        tracker.log_artifact(run_id, Path(best["checkpoint"]), "best_checkpoint")
    if best and isinstance(best.get("value"), int | float):
        tracker.log_metrics(run_id, {"best_value": best["value"]})
    return written
