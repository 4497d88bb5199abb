"""The train kind: one training run of a given config, or of the best of the
``from:`` stage with overrides; on ``data: train+val`` it retrains on the
validation rows too. Its one model is the product."""

from __future__ import annotations

from typing import Any

from nestor.orchestrator.engine.kinds import StageKind
from nestor.orchestrator.engine.kinds._planned import (
    PlannedTrials,
    best_config,
    trial_test_value,
    trial_val_value,
)
from nestor.orchestrator.engine.kinds.summaries import PbtSummary, TrainSummary
from nestor.orchestrator.engine.plan import PlannedTrial
from nestor.orchestrator.engine.trials import SkipTrial, TrialRunner
from nestor.orchestrator.journal.safe import inside
from nestor.orchestrator.journal.status import TrialStatus
from nestor.orchestrator.spec import TrainStage, Workflow
from nestor.search import ScheduleStep

TRIAL = "final"


class TrainTrials(PlannedTrials):
    """One run, or a population's winner replayed step by step."""

    def __init__(self, sources: list[dict[str, Any]]) -> None:
        super().__init__(sources)
        self._untils: dict[str, Any] = {}  # a replayed step's trial id -> its last epoch

    def phases(self, workflow: Workflow, stage: TrainStage, sources: list[dict[str, Any]],
               objective: Any) -> list[list[PlannedTrial]]:
        """One run; or, from a population-based search, one trial per step of its
        winner's schedule (the last one ``final``), each carrying on from the last."""
        schedule = _schedule(sources) if stage.replay else []
        if not schedule:
            return [[PlannedTrial(TRIAL, {**best_config(sources), **stage.config})]]
        phases: list[list[PlannedTrial]] = []
        previous: tuple[str, ...] = ()
        for i, step in enumerate(schedule):
            trial_id = TRIAL if i == len(schedule) - 1 else f"step-{i}"
            self._untils[trial_id] = step.until
            phases.append([PlannedTrial(trial_id, {**step.config, **stage.config},
                                        origin="replay", parents=previous)])
            previous = (trial_id,)
        return phases

    def request_extras(self, runner: TrialRunner, trial: Any) -> dict[str, Any]:
        """``data: train+val`` is the request's data split (a function trainer's
        ``ctx.data_split``, a command's ``NESTOR_DATA_SPLIT``: no flag it may not know),
        and a built-in trainer's ``train_data`` setting; a replayed step trains up to
        its interval's end, carrying on from the step before."""
        settings: dict[str, Any] = {}
        extras: dict[str, Any] = {}
        if runner.stage.data != "train":
            extras["data_split"] = runner.stage.data
            if runner.trainer_spec.name is not None:
                settings["train_data"] = runner.stage.data
        until = self._untils.get(trial.id)
        if until is None:
            return {**extras, "settings": settings} if settings else extras
        settings["epochs"] = int(until) if float(until).is_integer() else until
        extras["settings"] = settings
        if trial.parents:
            record = runner.records.get(trial.parents[0])
            if record is None or record.status != TrialStatus.COMPLETED or not record.checkpoint:
                raise SkipTrial(f"{trial.parents[0]} did not complete: nothing to carry on from")
            extras["continue_from"] = str(inside(runner.run_dir, record.checkpoint))
        return extras

    def finalize(self, runner: TrialRunner, done: Any) -> dict[str, Any]:
        summary = runner.summary()
        record = runner.records.get(TRIAL)
        summary["train"] = TrainSummary(
            data=runner.stage.data,
            config=record.config if record else None,
            test_value=trial_test_value(runner, TRIAL),
            val_value=trial_val_value(runner, TRIAL),
            checkpoint=record.checkpoint if record else None,
        ).to_json()
        return summary


def _schedule(sources: list[dict[str, Any]]) -> list[ScheduleStep]:
    """The first source's population-based winner's schedule, if it has one."""
    for source in sources:
        schedule = PbtSummary.from_json(source.get("pbt") or {}).schedule
        if schedule:
            return schedule
    return []


class TrainKind(StageKind):
    name = "train"
    simulated = True

    def runner(self, workflow: Any, stage: Any, sources: list[dict[str, Any]],
               **kwargs: Any) -> TrialRunner:
        return TrainTrials(sources).runner(workflow, stage, **kwargs)


KIND = TrainKind()
