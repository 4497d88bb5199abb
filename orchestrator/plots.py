"""PNG plots of a stage's trials, for the run directory and MLflow."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def plot_trials(summary: dict[str, Any], objective: Any, path: Path) -> Path:
    """The metric of each trial in the order they finished, coloured by
    generation, with the best-so-far line; failed trials as red crosses."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    trials = [t for t in summary["trials"] if t["status"] != "running"]
    sign = -1.0 if objective.mode == "max" else 1.0
    xs, ys, generations, failed_x = [], [], [], []
    for index, trial in enumerate(trials, start=1):
        value = trial["value"]
        if isinstance(value, list):
            value = value[0]
        if trial["status"] == "completed" and value is not None:
            xs.append(index)
            ys.append(value)
            generations.append(trial["generation"])
        else:
            failed_x.append(index)
    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=110)
    if xs:
        points = ax.scatter(xs, ys, c=generations, cmap="viridis", s=28, label="trial")
        if len(set(generations)) > 1:
            fig.colorbar(points, ax=ax, label="generation", ticks=sorted(set(generations)))
        best, line = None, []
        for y in ys:
            best = y if best is None or sign * y < sign * best else best
            line.append(best)
        ax.step(xs, line, where="post", color="black", linewidth=1.5, label="best so far")
        floor = min(ys) if objective.mode == "max" else max(ys)
    else:
        floor = 0.0
    if failed_x:
        ax.scatter(failed_x, [floor] * len(failed_x), marker="x", color="red", s=40,
                   label=f"failed ({len(failed_x)})")
    ax.set_xlabel("trial (in the order they finished)")
    ax.set_ylabel(f"{objective.metric} ({objective.mode})")
    ax.set_title(f"stage {summary['name']}: {len(trials)} trials, {summary['n_runs']} runs")
    ax.grid(alpha=0.3)
    ax.legend(loc="best", fontsize="small")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path
