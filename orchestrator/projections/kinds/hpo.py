"""The hpo stage's report: its best trial is the product; its plots are the
search's best so far (beside the run's other searches of the same metric),
its generations, its Pareto front, a population's schedules, and what the
parameters did (parallel coordinates, one slice per parameter); its lines say
which parameters mattered (fANOVA) and, with several objectives, list the
Pareto front."""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

from nestor.orchestrator.engine.kinds.summaries import PbtSummary
from nestor.orchestrator.journal.state import RunState
from nestor.orchestrator.journal.status import StageStatus
from nestor.orchestrator.projections.explain import importance, importance_line, pareto_trials
from nestor.orchestrator.projections.kinds import KindReport, PlotMaker
from nestor.orchestrator.projections.products import Product
from nestor.orchestrator.projections.tables import Report, fmt

SPEC_FILE = "spec.yaml"


class HpoReport(KindReport):
    name = "hpo"
    searched = True

    def explained_lines(self, summary: dict[str, Any]) -> list[str]:
        return explained_lines(summary)

    def explained(self, summary: dict[str, Any]) -> dict[str, Any]:
        found = importance(summary)
        return {"importance": None if found is None else {
                    "method": "fanova", "trials": found.trials, "shares": found.shares,
                    "not_rated": found.unrated},
                "pareto_front": [t["id"] for t in pareto_trials(summary)]}

    def product(self, summary: dict[str, Any]) -> Product:
        best = summary.get("best")
        metric = (summary.get("objective") or {}).get("metric", "value")
        if not best:
            return Product("no completed trial", metric, None, None)
        return Product(f"best trial {best.get('id')}", metric, best.get("value"),
                       best.get("test_value"))

    def product_trial(self, summary: dict[str, Any]) -> str | None:
        return (summary.get("best") or {}).get("id")

    def checkpoint(self, summary: dict[str, Any]) -> str | None:
        return (summary.get("best") or {}).get("checkpoint")

    def lines(self, summary: dict[str, Any]) -> list[str]:
        lines = []
        name, best = summary["name"], summary.get("best")
        if best:
            config = ", ".join(f"{k}={fmt(v)}" for k, v in best["config"].items())
            lines.append(f"best of {name} ({best['id']}): {config}")
        schedule = PbtSummary.from_json(summary.get("pbt") or {}).schedule
        if schedule:
            steps = "; ".join(
                f"{s.start:g}-{s.until:g}: "
                + ", ".join(f"{k}={fmt(v)}" for k, v in s.config.items()) for s in schedule)
            lines.append(f"winner's schedule (a train stage from: {name} replays it): {steps}")
        lines += replanned_lines(summary)
        lines.append(f"{name} stopped: {summary.get('stop_reason')}")
        return lines

    def detail(self, report: Report, summary: dict[str, Any], objectives: list[Any]) -> None:
        best = summary.get("best") or {}
        if best:
            config = ", ".join(f"{k}={fmt(v)}" for k, v in (best.get("config") or {}).items())
            report.facts.append(("best config", config or "-"))
        found = importance(summary)
        if found is not None:
            report.facts.append(("parameter importance (fANOVA)", ", ".join(
                f"{k} {v:.0%}" for k, v in found.shares.items())))
        front = pareto_trials(summary)
        if front:
            report.facts.append(("Pareto front", ", ".join(str(t["id"]) for t in front)))
        super().detail(report, summary, objectives)

    def headline(self, summary: dict[str, Any]) -> dict[str, Any]:
        best = summary.get("best") or {}
        found = importance(summary)
        shares = {f"importance.{k}": v for k, v in found.shares.items()} if found else {}
        return {"best_value": best.get("value"), "best_test_value": best.get("test_value"),
                "pareto_front_size": len(pareto_trials(summary)) or None, **shares}

    def plots(self, summary: dict[str, Any], stage: Any, objectives: list[Any],
              state: RunState, run_dir: Path) -> list[PlotMaker]:
        from nestor.orchestrator.projections.plots import (
            plot_generations,
            plot_parallel_coordinates,
            plot_pareto,
            plot_population,
            plot_slices,
        )

        name = str(summary["name"])
        plots = run_dir / "plots"
        # Calls of module-level functions on plain data (not closures): each can be
        # sent to the plot helper (plot_helper) and drawn beside the others.
        makers: list[PlotMaker] = [("best so far", partial(
            _best_so_far, summary, stage, objectives, state, run_dir, plots / f"{name}.png"))]
        if objectives:
            makers.append(("generations", partial(
                plot_generations, summary, objectives[0].metric, objectives[0].mode,
                plots / f"{name}-generations.png")))
        if len(objectives) > 1:
            makers.append(("pareto", partial(
                plot_pareto, summary, objectives, plots / f"{name}-pareto.png")))
        if objectives:
            metric, mode = objectives[0].metric, objectives[0].mode
            makers.append(("parallel coordinates", partial(
                plot_parallel_coordinates, summary, metric, mode,
                plots / f"{name}-parallel.png")))
            makers.append(("slices", partial(
                plot_slices, summary, metric, mode, plots / f"{name}-slices.png")))
        if summary.get("pbt"):
            pbt = PbtSummary.from_json(summary["pbt"])
            makers.append(("population", partial(
                plot_population, name, pbt, plots / f"{name}-population.png")))
        return makers


def explained_lines(summary: dict[str, Any]) -> list[str]:
    """Which parameters mattered, and a multi-objective stage's Pareto front."""
    lines = []
    said = importance_line(importance(summary))
    if said:
        lines.append(f"{summary['name']}: {said}")
    front = pareto_trials(summary)
    if front:
        each = "; ".join(f"{t['id']} " + ", ".join(f"{v:.4g}" for v in t["value"])
                         for t in front)
        metrics = ", ".join(str(o["metric"]) for o in summary.get("objectives") or [])
        lines.append(f"{summary['name']}: Pareto front, {len(front)} trial(s) no other beats"
                     f" in every objective ({metrics}): {each}")
    return lines


def replanned_lines(summary: dict[str, Any]) -> list[str]:
    """What a planned stage's tail re-plan changed: its last trials ran at another
    data-parallel width, so at another global batch and learning rate (``lr_rule``).
    Named trial by trial, since a searched lr differs per trial; nothing when the
    width never changed."""
    first = summary.get("planned_shape")
    if not first:  # no planned width to move from (and the trials go unread)
        return []
    replans = summary.get("replans") or []
    trials = summary.get("trials") or []
    moved = [t for t in trials if t.get("shape") and first and t["shape"] != first]
    if not moved:
        return []
    widths = {first.split("x")[0], *(t["shape"].split("x")[0] for t in moved)}
    if len(widths) == 1:  # only the model-parallel split changed: same batch and lr
        return []
    name = summary["name"]
    to = ", ".join(f"to {r['dp']}x{r['mp']} with {r['left']} trial(s) left" for r in replans)
    each = "; ".join(f"{t['id']} at {t['shape']}: global batch {t.get('global_batch', '?')},"
                     f" lr {fmt(t['lr']) if t.get('lr') is not None else '?'}" for t in moved)
    kept = [t for t in trials if t.get("shape") == first]
    batches = sorted({t["global_batch"] for t in kept if t.get("global_batch") is not None})
    others = (f"; the other {len(kept)} ran at {first}, global batch"
              f" {', '.join(str(b) for b in batches) or '?'}") if kept else ""
    return [f"{name} re-planned its tail ({to or 'to another shape'}): {len(moved)} trial(s)"
            " ran at another data-parallel width, so at another global batch and learning"
            f" rate (the trial's lr scaled by lr_rule {summary.get('lr_rule') or 'none'}):"
            f" {each}{others}"]


def _best_so_far(summary: dict[str, Any], stage: Any, objectives: list[Any],
                 state: RunState, run_dir: Path, path: Path) -> Path | None:
    """This stage's curve beside those of the run's earlier hpo stages that chase
    the same metric, one line per search, labelled with its algorithm."""
    from nestor.orchestrator.projections.plots import (
        best_so_far,
        best_so_far_from_summary,
        plot_best_so_far,
    )

    if not objectives:
        return None
    metric, mode = objectives[0].metric, objectives[0].mode
    name = str(summary["name"])
    searches = {name: _algorithm(stage)}
    for other in _other_searches(run_dir, state, name, metric, mode):
        searches[other.name] = _algorithm(other)
    curves, totals = {}, {}
    for stage_name, algorithm in searches.items():
        label = f"{stage_name} ({algorithm})" if algorithm else stage_name
        curve = best_so_far(state, stage_name, mode)
        found = state.stages.get(stage_name)
        runs = len(found.runs) if found else 0  # attempts that ended: finished or retried
        if stage_name == name and not runs:  # no journal: the summary alone
            curve = best_so_far_from_summary(summary, mode)
            runs = int(summary.get("n_runs") or 0)
        curves[label], totals[label] = curve, runs
    return plot_best_so_far(curves, totals, metric, mode, path)


def _algorithm(stage: Any) -> str:
    search = getattr(stage, "search", None)
    return str(getattr(search, "algorithm", "") or "")


def _other_searches(run_dir: Path, state: RunState, name: str, metric: str,
                    mode: str) -> list[Any]:
    """The run's finished hpo stages, other than ``name``, that chase the same metric."""
    finished = {n for n, stage in state.stages.items() if stage.state == StageStatus.FINISHED}
    if not finished or not (run_dir / SPEC_FILE).exists():
        return []
    from nestor.orchestrator.spec import HpoStage, SpecError, load_spec

    try:
        workflow = load_spec(run_dir / SPEC_FILE)
    except SpecError:
        return []
    others = []
    for other in workflow.stages:
        objectives = getattr(other, "objectives", None)
        if (other.name != name and other.name in finished and isinstance(other, HpoStage)
                and objectives and objectives[0].metric == metric
                and objectives[0].mode == mode):
            others.append(other)
    return others


REPORT = HpoReport()
