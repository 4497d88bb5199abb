"""The hpo kind: a searcher proposes trials, early stopping may cut them short;
the best trial is the stage's product (its report: orchestrator/projections/kinds/hpo.py)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import asdict
from typing import Any

from orchestrator.engine.kinds import Finding, StageKind
from orchestrator.engine.trials import KindTrials, SkipTrial, TrialRunner
from orchestrator.spec import HpoStage, Workflow


def hpo_runner(workflow: Workflow, stage: HpoStage, **kwargs: Any) -> TrialRunner:
    """An hpo stage's runner: its trials asked of its searcher, cut short by the
    backend's early stopping where the stage sets one."""
    from search import Objective, make_searcher

    objectives = [Objective(o.metric, o.mode, o.threshold) for o in stage.objectives]
    searcher = make_searcher(
        stage.search.algorithm, stage.search_space(), objectives, **stage.search_settings()
    )
    runner = TrialRunner(workflow, stage, searcher=searcher, objectives=objectives,
                         trainer_spec=stage.trainer, part=HpoTrials(), **kwargs)
    runner.stopper = runner.backend.early_stopping(stage.early_stopping, objectives[0])
    return runner


class HpoTrials(KindTrials):
    """What an hpo stage adds to its searched trials."""

    def finalize(self, runner: TrialRunner, done: Any) -> dict[str, Any]:
        """A population's schedules join the summary: the winner's lineage is what a
        train stage replays, and what the population plot draws."""
        summary = runner.summary()
        searcher = runner.searcher
        if hasattr(searcher, "best_schedule"):
            population = getattr(searcher, "population", 0)
            summary["pbt"] = {
                "schedule": [asdict(s) for s in searcher.best_schedule()],
                "members": {str(m): [asdict(s) for s in searcher.history(m)]
                            for m in range(population)},
            }
        return summary

    def request_extras(self, runner: TrialRunner, trial: Any) -> dict[str, Any]:
        """A trial that continues another (a PBT exploit, a promotion) starts from that
        trial's checkpoint, weights and optimizer state, and trains on up to its budget
        (in the search's fidelity: epochs unless the spec names another setting)."""
        extras: dict[str, Any] = {}
        if trial.budget is not None:
            budget = trial.budget
            if float(budget).is_integer():
                budget = int(budget)
            fidelity = getattr(runner.stage.search, "fidelity", None) or "epochs"
            extras["settings"] = {fidelity: budget}
        if trial.continue_from is not None:
            parent = runner.records.get(trial.continue_from)
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
        return hpo_runner(workflow, stage, **kwargs)

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


KIND = HpoKind()
