"""The hpo kind: a searcher proposes trials, early stopping may cut them short;
the best trial is the stage's product (its report: orchestrator/projections/kinds/hpo.py)."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from orchestrator.engine.kinds import StageKind
from orchestrator.engine.trials import KindTrials, SkipTrial, TrialRunner
from orchestrator.journal.safe import inside
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
            extras["continue_from"] = str(inside(runner.run_dir, parent.checkpoint))
        return extras


class HpoKind(StageKind):
    name = "hpo"
    simulated = True

    def runner(self, workflow: Any, stage: Any, sources: list[dict[str, Any]],
               **kwargs: Any) -> TrialRunner:
        return hpo_runner(workflow, stage, **kwargs)


KIND = HpoKind()
