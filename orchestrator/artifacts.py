"""What a finished stage leaves beside its trials, in the run directory and in
its MLflow stage run: plots, the summary table, the best checkpoint and the
headline metrics. One function for every stage kind, so the UI finds things
in the same places:

    plots/<stage>.png             the kind's main plot (best so far, ensemble, curves)
    plots/<stage>-generations.png hpo: each trial's metric by generation
    plots/<stage>-pareto.png      hpo with several objectives: the Pareto front
    plots/<stage>-slots.png       every kind with trials: slot use over time
    summary.md, summary.html      the stage's table (run dir: reports/<stage>/)
    best_checkpoint/              the best trial's checkpoint

A plot or table that cannot be made is logged as a warning and skipped: a finished
stage's results matter more than its pictures.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from orchestrator.tracking import Tracker

log = logging.getLogger(__name__)

JOURNAL_FILE = "journal.jsonl"
SPEC_FILE = "spec.yaml"


def publish_stage(tracker: Tracker, run_id: str, summary: dict[str, Any], stage: Any,
                  run_dir: Path) -> list[Path]:
    """Write the stage's plots and tables into ``run_dir`` and log them, with the
    best checkpoint and headline metrics, to the stage's MLflow run ``run_id``.
    Returns the files written."""
    from orchestrator.journal import JournalError, read_events

    try:
        events = read_events(run_dir / JOURNAL_FILE)
    except JournalError as exc:
        log.warning("stage %s: journal unreadable for plots (%s)", summary.get("name"), exc)
        events = []
    name = str(summary.get("name") or getattr(stage, "name", "stage"))
    objectives = list(getattr(stage, "objectives", None) or [])
    if not objectives and summary.get("objective"):  # planned stages judge by their source's
        from search import Objective

        objectives = [Objective(summary["objective"]["metric"], summary["objective"]["mode"])]
    plots = run_dir / "plots"
    kind = summary.get("kind")
    makers: list[tuple[str, Callable[[], Path | None]]] = []
    if kind == "hpo":
        makers.append(("best so far", lambda: _best_so_far(
            summary, stage, objectives, events, run_dir, plots / f"{name}.png")))
        if objectives:
            from orchestrator.plots import plot_generations

            makers.append(("generations", lambda: plot_generations(
                summary, objectives[0].metric, objectives[0].mode,
                plots / f"{name}-generations.png")))
        if len(objectives) > 1:
            from orchestrator.plots import plot_pareto

            makers.append(("pareto", lambda: plot_pareto(
                summary, objectives, plots / f"{name}-pareto.png")))
    elif kind == "ensemble" and summary.get("ensemble"):
        from orchestrator.plots import plot_ensemble

        makers.append(("ensemble", lambda: plot_ensemble(
            name, summary["ensemble"], plots / f"{name}.png")))
    elif kind == "transfer" and summary.get("transfer"):
        from orchestrator.plots import plot_transfer

        makers.append(("transfer", lambda: plot_transfer(
            name, summary["transfer"], plots / f"{name}.png")))
    makers.append(("slot use", lambda: _slot_use(events, name, plots / f"{name}-slots.png")))

    written: list[Path] = []
    for what, make in makers:
        try:
            path = make()
        except Exception as exc:  # a plot must not lose a finished stage
            log.warning("stage %s: could not draw its %s plot: %s", name, what, exc)
            continue
        if path is not None:
            tracker.log_artifact(run_id, path, "plots")
            written.append(path)
    try:
        written += _tables(tracker, run_id, summary, objectives, run_dir / "reports" / name)
    except Exception as exc:
        log.warning("stage %s: could not write its summary table: %s", name, exc)
    _best_checkpoint(tracker, run_id, summary, run_dir)
    tracker.log_metrics(run_id, headline_metrics(summary))
    return written


def headline_metrics(summary: dict[str, Any]) -> dict[str, float]:
    """What the stage produced, as metrics of the stage run, so the runs table can sort
    stages by them (the workflow logs the rest of the headline): an hpo stage's best
    trial (``best_value``, ``best_test_value``); any other stage's product
    (``product_value``, ``product_test_value``, ``baseline_test_value``), since its
    best trial is no product of it (a transfer stage's is its pretraining run)."""
    from orchestrator.products import stage_product

    if summary.get("kind", "hpo") == "hpo":
        best = summary.get("best") or {}
        pairs = [("best_value", best.get("value")), ("best_test_value", best.get("test_value"))]
    else:
        product = stage_product(summary)
        pairs = [("product_value", product.value), ("product_test_value", product.test),
                 ("baseline_test_value", product.baseline_test)]
    return {name: value for name, value in pairs
            if isinstance(value, int | float) and not isinstance(value, bool)}


def _best_so_far(summary: dict[str, Any], stage: Any, objectives: list[Any],
                 events: list[dict[str, Any]], run_dir: Path, path: Path) -> Path | None:
    """This stage's curve beside those of the run's earlier hpo stages that chase
    the same metric, one line per search, labelled with its algorithm."""
    from orchestrator.plots import best_so_far, best_so_far_from_summary, plot_best_so_far

    if not objectives:
        return None
    metric, mode = objectives[0].metric, objectives[0].mode
    name = str(summary["name"])
    searches = {name: _algorithm(stage)}
    for other in _other_hpo_stages(run_dir, events, name, metric, mode):
        searches[other.name] = _algorithm(other)
    curves, totals = {}, {}
    for stage_name, algorithm in searches.items():
        label = f"{stage_name} ({algorithm})" if algorithm else stage_name
        curve = best_so_far(events, stage_name, mode)
        runs = sum(1 for e in events if e.get("stage") == stage_name
                   and e["event"] in ("trial_finished", "trial_attempt_failed"))
        if stage_name == name and not runs:  # no journal: the summary alone
            curve = best_so_far_from_summary(summary, mode)
            runs = int(summary.get("n_runs") or 0)
        curves[label], totals[label] = curve, runs
    return plot_best_so_far(curves, totals, metric, mode, path)


def _algorithm(stage: Any) -> str:
    search = getattr(stage, "search", None)
    return str(getattr(search, "algorithm", "") or "")


def _other_hpo_stages(run_dir: Path, events: list[dict[str, Any]], name: str, metric: str,
                      mode: str) -> list[Any]:
    finished = {e["stage"] for e in events if e["event"] == "stage_finished"}
    if not finished or not (run_dir / SPEC_FILE).exists():
        return []
    from orchestrator.spec import SpecError, load_spec

    try:
        workflow = load_spec(run_dir / SPEC_FILE)
    except SpecError:
        return []
    others = []
    for other in workflow.stages:
        objectives = getattr(other, "objectives", None)
        if (other.name != name and other.name in finished and other.kind == "hpo"
                and objectives and objectives[0].metric == metric
                and objectives[0].mode == mode):
            others.append(other)
    return others


def _slot_use(events: list[dict[str, Any]], name: str, path: Path) -> Path | None:
    from orchestrator.plots import plot_slot_use, slot_intervals

    intervals, slots = slot_intervals(events)  # every stage's: they share the slots
    if not any(i.stage == name for i in intervals):
        return None
    return plot_slot_use(intervals, slots, f"stage {name}", path, stage=name)


def _tables(tracker: Tracker, run_id: str, summary: dict[str, Any], objectives: list[Any],
            folder: Path) -> list[Path]:
    from orchestrator.tables import stage_report, to_html, to_markdown

    report = stage_report(summary, objectives)
    folder.mkdir(parents=True, exist_ok=True)
    markdown, page = folder / "summary.md", folder / "summary.html"
    markdown.write_text(to_markdown(report))
    page.write_text(to_html(report))
    for path in (markdown, page):
        tracker.log_artifact(run_id, path)
    return [markdown, page]


def _best_checkpoint(tracker: Tracker, run_id: str, summary: dict[str, Any],
                     run_dir: Path) -> None:
    """The best trial's checkpoint (a train stage's: its final model)."""
    best = summary.get("best") or {}
    where = best.get("checkpoint") or (summary.get("train") or {}).get("checkpoint")
    if not where:
        return
    checkpoint = Path(where) if Path(where).is_absolute() else run_dir / where
    if checkpoint.is_file():
        tracker.log_artifact(run_id, checkpoint, "best_checkpoint")
    elif checkpoint.is_dir():
        for path in sorted(checkpoint.rglob("*")):
            if path.is_file():
                folder = Path("best_checkpoint") / path.parent.relative_to(checkpoint)
                tracker.log_artifact(run_id, path, folder.as_posix())
    else:
        log.warning("stage %s: best checkpoint %s is gone", summary.get("name"), checkpoint)
