"""What the kinds that follow a search share: a fixed plan of ordinary trials
(journalled, retried, tracked, each a dp x mp gang like any hpo trial) drawn
from the summaries of the stages named in ``from:``."""

from __future__ import annotations

from typing import Any

from nestor.orchestrator.engine.plan import Plan, PlannedTrial
from nestor.orchestrator.engine.trials import KindTrials, TrialRunner
from nestor.orchestrator.journal.status import TrialStatus
from nestor.orchestrator.spec import Workflow


def source_objective(sources: list[dict[str, Any]]) -> Any:
    """The first source's objective (what its trials were judged by)."""
    from nestor.search import Objective

    for source in sources:
        if source.get("objective"):
            o = source["objective"]
            return Objective(o["metric"], o["mode"])
    return Objective("val_accuracy", "max")


def first_value(value: Any) -> float | None:
    """A trial's value on its stage's first objective: the value itself, or the first of
    a multi-objective search's values (None: it has none)."""
    if isinstance(value, list | tuple):
        value = value[0] if value else None
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def completed(summary: dict[str, Any], objective: Any) -> list[dict[str, Any]]:
    """A source's completed trials with a value, best first on its first objective
    (``objective``, as :func:`source_objective` reads it), with that value as
    ``value``: a multi-objective search's trials rank as its best trial was chosen."""
    done = [{**t, "value": first_value(t.get("value"))} for t in summary.get("trials", [])
            if t["status"] == TrialStatus.COMPLETED and first_value(t.get("value")) is not None]
    return sorted(done, key=lambda t: objective.sign * t["value"])


def best_config(sources: list[dict[str, Any]]) -> dict[str, Any]:
    for source in sources:
        best = source.get("best")
        if best and best.get("config"):
            return dict(best["config"])
    return {}


def trial_of(summary: dict[str, Any], trial_id: str) -> dict[str, Any]:
    return next((t for t in summary.get("trials") or [] if t.get("id") == trial_id), {})


class PlannedTrials(KindTrials):
    """A stage whose trials are a fixed plan (``phases``) drawn from its sources
    (the summaries of its ``from:`` stages) rather than a search."""

    def __init__(self, sources: list[dict[str, Any]]) -> None:
        self.sources = sources

    def runner(self, workflow: Workflow, stage: Any, **kwargs: Any) -> TrialRunner:
        """The runner of the plan, holding this part; judged by its sources' objective."""
        objective = source_objective(self.sources)
        plan = Plan(self.phases(workflow, stage, self.sources, objective), objective)
        return TrialRunner(workflow, stage, searcher=plan, objectives=[objective],
                           trainer_spec=workflow.trainer_of(stage.name), part=self, **kwargs)

    def phases(self, workflow: Workflow, stage: Any, sources: list[dict[str, Any]],
               objective: Any) -> list[list[PlannedTrial]]:
        raise NotImplementedError


def trial_test_value(runner: TrialRunner, trial_id: str) -> float | None:
    """A planned trial's test accuracy (None: it did not run)."""
    record = runner.records.get(trial_id)
    return None if record is None else record.metrics.get("test_accuracy")


def trial_val_value(runner: TrialRunner, trial_id: str) -> float | None:
    """A planned trial's validation accuracy (None: it did not run)."""
    record = runner.records.get(trial_id)
    return None if record is None else record.metrics.get("val_accuracy")
