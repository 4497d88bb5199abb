"""The hpo kind: a searcher proposes trials, early stopping may cut them short;
the best trial is the stage's product (its report: orchestrator/projections/kinds/hpo.py)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from nestor.orchestrator.engine.kinds import StageKind
from nestor.orchestrator.engine.kinds.summaries import AutoPick, PbtSummary
from nestor.orchestrator.engine.search_width import kept_width, run_width, sized_event
from nestor.orchestrator.engine.trials import KindTrials, SkipTrial, TrialRunner, stage_events
from nestor.orchestrator.journal.events import Event, SearchLogged, SearchSized
from nestor.orchestrator.journal.safe import inside
from nestor.orchestrator.journal.status import TrialStatus
from nestor.orchestrator.spec import HpoStage, Workflow
from nestor.orchestrator.spec.width import SearchWidth


def hpo_runner(workflow: Workflow, stage: HpoStage, **kwargs: Any) -> TrialRunner:
    """An hpo stage's runner: its trials asked of its searcher, cut short by the
    backend's early stopping where the stage sets one."""
    from nestor.search import Objective

    objectives = [Objective(o.metric, o.mode, o.threshold) for o in stage.objectives]
    part = HpoTrials(objectives)
    # Its searcher is built once the runner knows the shape of the stage's trials: a
    # search that sizes itself by width plans for the trials the slots run at once.
    runner = TrialRunner(workflow, stage, searcher=None, objectives=objectives,
                         trainer_spec=stage.trainer, part=part, **kwargs)
    part.build(runner, stage_events(kwargs.get("events"), stage.name, SearchSized,
                                    SearchLogged))
    runner.stopper = runner.backend.early_stopping(stage.early_stopping, objectives[0])
    return runner


class HpoTrials(KindTrials):
    """What an hpo stage adds to its searched trials: the searcher, built for the
    trials the stage runs at once (``orchestrator.engine.search_width``)."""

    def __init__(self, objectives: list[Any]) -> None:
        self.objectives = objectives
        self.width: SearchWidth | None = None  # what the searcher was built for
        self.kept: SearchWidth | None = None  # a resumed search's journalled width

    def build(self, runner: TrialRunner, mine: Iterable[Event]) -> None:
        """Build the stage's searcher: at the width journalled for it (a resumed
        search), else at the trials the backend's slots run at once."""
        self.kept = kept_width(runner.stage, mine)
        self._build(runner)

    def _build(self, runner: TrialRunner) -> None:
        from nestor.search import make_searcher

        width = self.kept or run_width(runner)
        if runner.has_searcher and width == self.width:
            return
        self.width = width
        stage = runner.stage
        runner.searcher = make_searcher(
            stage.search.algorithm, stage.search_space(), self.objectives,
            **stage.search_settings(None if width is None else width.trials))

    def restoring(self, runner: TrialRunner, mine: Iterable[Event]) -> None:
        """Before its first ask (the shape may have been planned again on the trainer's
        profile since it was built): build the searcher for the width the shape now
        gives, and journal that width, or, resumed, that the search keeps its own."""
        self._build(runner)
        if self.width is not None:
            runner.journal.record(sized_event(runner, self.width, resumed=self.kept is not None))

    def restored(self, runner: TrialRunner, mine: list[Event]) -> None:
        """A new search is seeded (``search.warm_start``) and given its first
        configurations (``search.enqueue``), logged before its first ask, so a resume
        replays them; a reopened one is extended to its new budget."""
        from nestor.orchestrator.engine.reopen import extend_search
        from nestor.orchestrator.engine.seeding import seed_search

        if runner.search_log.logged == 0 and runner.searcher.n_asked == 0:
            seed_search(runner)
        extend_search(runner, mine)

    def finalize(self, runner: TrialRunner, done: Any) -> dict[str, Any]:
        """A population's schedules join the summary: the winner's lineage is what a
        train stage replays, and what the population plot draws."""
        summary = runner.summary()
        searcher = runner.searcher
        choice = getattr(searcher, "auto_choice", None)
        if choice is not None and self.width is not None:  # what auto built, for how many
            summary["auto"] = AutoPick(choice.label(), choice.reason, self.width.trials,
                                       self.width.source).to_json()
        best_schedule = getattr(searcher, "best_schedule", None)  # a population's search
        if best_schedule is not None:
            population = getattr(searcher, "population", 0)
            history = searcher.history  # type: ignore[attr-defined]
            summary["pbt"] = PbtSummary(
                schedule=best_schedule(),
                members={str(m): history(m) for m in range(population)},
            ).to_json()
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
            if parent is None or parent.status != TrialStatus.COMPLETED or not parent.checkpoint:
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
