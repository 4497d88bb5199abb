"""What a finished stage leaves beside its trials, in the run directory and in
its MLflow stage run: plots, the summary table, the best checkpoint and the
headline metrics. One function for every stage kind, so the UI finds things
in the same places:

    plots/<stage>.png             the kind's main plot (best so far, ensemble, curves)
    plots/<stage>-generations.png hpo: each trial's metric by generation
    plots/<stage>-pareto.png      hpo with several objectives: the Pareto front
    plots/<stage>-parallel.png    hpo: parallel coordinates of the completed trials
    plots/<stage>-slices.png      hpo: the value against each parameter alone
    plots/<stage>-slots.png       every kind with trials: slot use over time
    summary.md, summary.html      the stage's table (run dir: reports/<stage>/)
    best_checkpoint/              the product's checkpoint (hpo: the best trial's)

A plot or table that cannot be made is logged as a warning and skipped: a finished
stage's results matter more than its pictures.
"""

from __future__ import annotations

import logging
from functools import partial
from pathlib import Path
from typing import Any

from nestor.orchestrator.journal.journal import DamagedRun
from nestor.orchestrator.journal.safe import inside_or_warn
from nestor.orchestrator.journal.state import RunState
from nestor.orchestrator.projections.kinds import report_of
from nestor.orchestrator.projections.plot_helper import PlotHelper, draw_all
from nestor.orchestrator.projections.tracking import Tracker

log = logging.getLogger(__name__)

JOURNAL_FILE = "journal.jsonl"


def publish_stage(tracker: Tracker, run_id: str, summary: dict[str, Any], stage: Any,
                  run_dir: Path, helper: PlotHelper | None = None) -> list[Path]:
    """Write the stage's plots and tables into ``run_dir`` and log them, with the
    best checkpoint and headline metrics, to the stage's MLflow run ``run_id``.
    Half the plots are drawn in ``helper`` where there is one (``plot_helper``).
    Returns the files written."""
    state = _journal_state(run_dir, summary)
    name = str(summary.get("name") or getattr(stage, "name", "stage"))
    objectives = list(getattr(stage, "objectives", None) or [])
    if not objectives and summary.get("objective"):  # planned stages judge by their source's
        from nestor.search import Objective

        objectives = [Objective(summary["objective"]["metric"], summary["objective"]["mode"])]
    report = report_of(summary)
    makers = report.plots(summary, stage, objectives, state, run_dir)
    slots = run_dir / "plots" / f"{name}-slots.png"
    makers.append(("slot use", partial(_slot_use, state, name, slots)))

    written: list[Path] = []
    for what, path in draw_all(makers, helper):
        if isinstance(path, BaseException):  # a plot must not lose a finished stage
            log.warning("stage %s: could not draw its %s plot: %s", name, what, path)
            continue
        if path is not None:
            tracker.log_artifact(run_id, path, "plots")
            written.append(path)
    try:
        written += _tables(tracker, run_id, summary, objectives, run_dir / "reports" / name)
    except Exception as exc:
        log.warning("stage %s: could not write its summary table: %s", name, exc)
    _best_checkpoint(tracker, run_id, summary, report.checkpoint(summary), run_dir)
    tracker.log_metrics(run_id, headline_metrics(summary))
    return written


def headline_metrics(summary: dict[str, Any]) -> dict[str, float]:
    """What the stage produced, as metrics of the stage run, so the runs table can sort
    stages by them (the workflow logs the rest of the headline); its kind's report
    names them."""
    pairs = report_of(summary).headline(summary)
    return {name: value for name, value in pairs.items()
            if isinstance(value, int | float) and not isinstance(value, bool)}


def _journal_state(run_dir: Path, summary: dict[str, Any]) -> RunState:
    """The journal's typed fold, for the plots: read line by line (the whole journal
    is never held as records), from the run's fold snapshot where one is still good.
    An unreadable journal draws the plots of an empty one."""
    try:
        return RunState.of(run_dir, JOURNAL_FILE, save=False)
    except (ValueError, TypeError, KeyError, DamagedRun) as exc:
        log.warning("stage %s: journal unreadable for plots (%s)", summary.get("name"), exc)
        return RunState()


def _slot_use(state: RunState, name: str, path: Path) -> Path | None:
    from nestor.orchestrator.projections.plots import plot_slot_use, slot_intervals

    intervals, slots = slot_intervals(state)  # every stage's: they share the slots
    if not any(i.stage == name for i in intervals):
        return None
    return plot_slot_use(intervals, slots, f"stage {name}", path, stage=name)


def _tables(tracker: Tracker, run_id: str, summary: dict[str, Any], objectives: list[Any],
            folder: Path) -> list[Path]:
    from nestor.orchestrator.projections.kinds import stage_report
    from nestor.orchestrator.projections.tables import to_html, to_markdown

    report = stage_report(summary, objectives)
    folder.mkdir(parents=True, exist_ok=True)
    markdown, page = folder / "summary.md", folder / "summary.html"
    markdown.write_text(to_markdown(report))
    page.write_text(to_html(report))
    for path in (markdown, page):
        tracker.log_artifact(run_id, path)
    return [markdown, page]


def _best_checkpoint(tracker: Tracker, run_id: str, summary: dict[str, Any],
                     where: str | None, run_dir: Path) -> None:
    """The product's checkpoint (an hpo stage's best trial's, a transfer stage's
    fine-tuned model, a train stage's model), logged as ``best_checkpoint``."""
    if not where:
        return
    checkpoint = inside_or_warn(run_dir, str(where), f"stage {summary.get('name')}'s checkpoint")
    if checkpoint is None:
        return
    if checkpoint.is_file():
        tracker.log_artifact(run_id, checkpoint, "best_checkpoint")
    elif checkpoint.is_dir():
        for path in sorted(checkpoint.rglob("*")):
            if path.is_file():
                folder = Path("best_checkpoint") / path.parent.relative_to(checkpoint)
                tracker.log_artifact(run_id, path, folder.as_posix())
    else:
        log.warning("stage %s: best checkpoint %s is gone", summary.get("name"), checkpoint)
