"""The hpo kind: a searcher proposes trials, early stopping may cut them short;
the best trial is the stage's product."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

from orchestrator.engine.kinds import Finding, PlotMaker, StageKind
from orchestrator.engine.trials import SkipTrial, TrialRunner
from orchestrator.journal.state import RunState
from orchestrator.projections.products import Product
from orchestrator.spec import HpoStage, Workflow

SPEC_FILE = "spec.yaml"


class HpoRunner(TrialRunner):
    """An hpo stage's trials: asked of its searcher."""

    def __init__(self, workflow: Workflow, stage: HpoStage, **kwargs: Any) -> None:
        from search import Objective, make_searcher

        objectives = [Objective(o.metric, o.mode, o.threshold) for o in stage.objectives]
        searcher = make_searcher(
            stage.search.algorithm, stage.search_space(), objectives, **stage.search_settings()
        )
        super().__init__(workflow, stage, searcher=searcher, objectives=objectives,
                         trainer_spec=stage.trainer, **kwargs)
        self.stopper = self.backend.early_stopping(stage.early_stopping, objectives[0])

    def finalize(self, done: Any = None) -> dict[str, Any]:
        """A population's schedules join the summary: the winner's lineage is what a
        train stage replays, and what the population plot draws."""
        summary = self.summary()
        if hasattr(self.searcher, "best_schedule"):
            population = getattr(self.searcher, "population", 0)
            summary["pbt"] = {
                "schedule": [asdict(s) for s in self.searcher.best_schedule()],
                "members": {str(m): [asdict(s) for s in self.searcher.history(m)]
                            for m in range(population)},
            }
        return summary

    def request_extras(self, trial: Any) -> dict[str, Any]:
        """A trial that continues another (a PBT exploit, a promotion) starts from that
        trial's checkpoint, weights and optimizer state, and trains on up to its budget
        (in the search's fidelity: epochs unless the spec names another setting)."""
        extras: dict[str, Any] = {}
        if trial.budget is not None:
            budget = trial.budget
            if float(budget).is_integer():
                budget = int(budget)
            fidelity = getattr(self.stage.search, "fidelity", None) or "epochs"
            extras["settings"] = {fidelity: budget}
        if trial.continue_from is not None:
            parent = self.records.get(trial.continue_from)
            if parent is None or parent.status != "completed" or not parent.checkpoint:
                raise SkipTrial(f"{trial.continue_from} left no checkpoint to continue from")
            extras["continue_from"] = str(parent.checkpoint)
        return extras


class HpoKind(StageKind):
    name = "hpo"
    searches = True
    simulated = True

    def runner(self, workflow: Any, stage: Any, sources: list[dict[str, Any]],
               **kwargs: Any) -> TrialRunner:
        return HpoRunner(workflow, stage, **kwargs)

    def check(self, workflow: Any, here: tuple[Any, ...], stage: Any) -> Iterator[Finding]:
        """The space and grid points against the trainer's hyperparameters; objectives."""
        from orchestrator.spec.checks import option_mismatch
        from orchestrator.spec.errors import allowed, did_you_mean
        from orchestrator.spec.model import CategoricalSpec, ConstantSpec, GridSearch
        from trainers.catalog import TRAINERS

        if stage.trainer.name in TRAINERS:
            info = TRAINERS[stage.trainer.name]
            known = {**info.hyperparameters, **info.settings}
            for name, spec in stage.space.items():
                loc = (*here, "space", name)
                option = known.get(name)
                if option is None:
                    yield loc, (
                        f"{stage.trainer.name} takes no hyperparameter {name!r}"
                        f"{did_you_mean(name, known)} ({allowed(info.hyperparameters)})"
                    )
                    continue
                values: list[Any] = []
                if isinstance(spec, CategoricalSpec):
                    values = list(spec.values)
                elif isinstance(spec, ConstantSpec):
                    values = [spec.value]
                for value in values:
                    message = option_mismatch(option, value)
                    if message:
                        yield loc, message
        if isinstance(stage.search, GridSearch) and isinstance(stage.search.points, dict):
            for name in stage.search.points:
                if name not in stage.space:
                    yield (*here, "search", "points", name), (
                        f"no parameter {name!r} in space{did_you_mean(name, stage.space)}"
                        f" ({allowed(stage.space)})"
                    )
        objectives = stage.objectives
        if not objectives:
            yield (*here, "objective"), "must name at least one metric, but got an empty list"
        metrics = [o.metric for o in objectives]
        if len(set(metrics)) != len(metrics):
            yield (*here, "objective"), f"names a metric twice: {metrics}"

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
        from orchestrator.projections.tables import fmt

        lines = []
        name, best = summary["name"], summary.get("best")
        if best:
            config = ", ".join(f"{k}={fmt(v)}" for k, v in best["config"].items())
            lines.append(f"best of {name} ({best['id']}): {config}")
        schedule = (summary.get("pbt") or {}).get("schedule") or []
        if schedule:
            steps = "; ".join(
                f"{s['start']:g}-{s['until']:g}: "
                + ", ".join(f"{k}={fmt(v)}" for k, v in s["config"].items()) for s in schedule)
            lines.append(f"winner's schedule (a train stage from: {name} replays it): {steps}")
        lines += replanned_lines(summary)
        lines.append(f"{name} stopped: {summary.get('stop_reason')}")
        return lines

    def detail(self, report: Any, summary: dict[str, Any], objectives: list[Any]) -> None:
        from orchestrator.projections.tables import fmt

        best = summary.get("best") or {}
        if best:
            config = ", ".join(f"{k}={fmt(v)}" for k, v in (best.get("config") or {}).items())
            report.facts.append(("best config", config or "-"))
        super().detail(report, summary, objectives)

    def headline(self, summary: dict[str, Any]) -> dict[str, Any]:
        best = summary.get("best") or {}
        return {"best_value": best.get("value"), "best_test_value": best.get("test_value")}

    def plots(self, summary: dict[str, Any], stage: Any, objectives: list[Any],
              events: list[dict[str, Any]], run_dir: Path) -> list[PlotMaker]:
        from orchestrator.projections.plots import plot_generations, plot_pareto, plot_population

        name = str(summary["name"])
        plots = run_dir / "plots"
        makers: list[PlotMaker] = [("best so far", lambda: _best_so_far(
            summary, stage, objectives, events, run_dir, plots / f"{name}.png"))]
        if objectives:
            makers.append(("generations", lambda: plot_generations(
                summary, objectives[0].metric, objectives[0].mode,
                plots / f"{name}-generations.png")))
        if len(objectives) > 1:
            makers.append(("pareto", lambda: plot_pareto(
                summary, objectives, plots / f"{name}-pareto.png")))
        if summary.get("pbt"):
            makers.append(("population", lambda: plot_population(
                name, summary["pbt"], plots / f"{name}-population.png")))
        return makers


def replanned_lines(summary: dict[str, Any]) -> list[str]:
    """What a planned stage's tail re-plan changed: its last trials ran at another
    data-parallel width, so at another global batch and learning rate (``lr_rule``).
    Named trial by trial, since a searched lr differs per trial; nothing when the
    width never changed."""
    from orchestrator.projections.tables import fmt

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
                 events: list[dict[str, Any]], run_dir: Path, path: Path) -> Path | None:
    """This stage's curve beside those of the run's earlier hpo stages that chase
    the same metric, one line per search, labelled with its algorithm."""
    from orchestrator.projections.plots import (
        as_state,
        best_so_far,
        best_so_far_from_summary,
        plot_best_so_far,
    )

    if not objectives:
        return None
    metric, mode = objectives[0].metric, objectives[0].mode
    name = str(summary["name"])
    state = as_state(events)  # the journal's typed fold (the same one best_so_far reads)
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
    finished = {n for n, stage in state.stages.items() if stage.state == "finished"}
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
        if (other.name != name and other.name in finished and isinstance(other, HpoStage)
                and objectives and objectives[0].metric == metric
                and objectives[0].mode == mode):
            others.append(other)
    return others


KIND = HpoKind()
