"""The transfer kind: pretrain on a source task (or on sub-problems of it),
fine-tune on the target; train the target from scratch on the same budget to
compare. The fine-tuned model is the product, the from-scratch one its baseline."""

from __future__ import annotations

from typing import Any

from nestor.orchestrator.engine.kinds import StageKind
from nestor.orchestrator.engine.kinds._planned import (
    PlannedTrials,
    best_config,
    trial_test_value,
    trial_val_value,
)
from nestor.orchestrator.engine.kinds.summaries import TransferSummary
from nestor.orchestrator.engine.plan import PlannedTrial
from nestor.orchestrator.engine.trials import SkipTrial, TrialRunner
from nestor.orchestrator.journal.safe import inside
from nestor.orchestrator.journal.status import TrialStatus
from nestor.orchestrator.spec import TransferStage, Workflow

DEFAULT_LR = 0.05  # the built-in trainers' default, when the config names none


def tuned_trial(mode: str | None) -> str:
    """The trial that makes the product: the fine-tuned model."""
    return "combined" if mode == "hierarchical" else "finetune"


class TransferTrials(PlannedTrials):
    """Pretraining (or sub-models), the fine-tuning that starts from it, and the
    from-scratch baseline."""

    def phases(self, workflow: Workflow, stage: TransferStage, sources: list[dict[str, Any]],
               objective: Any) -> list[list[PlannedTrial]]:
        config = {**best_config(sources), **stage.config}
        tuned = dict(config)
        # A user trainer without an lr gets none (a command would not know the flag).
        if "lr" in config or workflow.trainer_of(stage.name).name is not None:
            tuned["lr"] = float(config.get("lr", DEFAULT_LR)) * stage.lr_scale
        if stage.mode == "finetune":
            first = [PlannedTrial("pretrain", config, origin="source")]
            last = PlannedTrial("finetune", tuned, origin="target", parents=("pretrain",))
        else:
            groups = stage.groups or []
            first = [PlannedTrial(f"group-{i}", config, origin="source")
                     for i in range(len(groups))]
            last = PlannedTrial("combined", tuned, origin="target",
                                parents=tuple(t.id for t in first))
        if stage.scratch_baseline:
            first.append(PlannedTrial("scratch", config, origin="target"))
        return [first, [last]]

    def _task(self, task: Any, classes: list[int] | None = None) -> dict[str, Any]:
        settings: dict[str, Any] = {"dataset": task.dataset}
        if classes or task.classes:
            settings["classes"] = list(classes or task.classes)
        return {**settings, **task.settings}

    def request_extras(self, runner: TrialRunner, trial: Any) -> dict[str, Any]:
        """The task each trial trains on; the tuned trial starts from its parents'
        checkpoints (several: the trainer averages them, on the gang, not here)."""
        stage: TransferStage = runner.stage
        if trial.id == "pretrain":
            return {"settings": self._task(stage.source)}
        if trial.id.startswith("group-"):
            group = (stage.groups or [])[int(trial.id.split("-")[1])]
            return {"settings": self._task(stage.source, group)}
        if trial.id == "scratch":
            return {"settings": self._task(stage.target)}
        sources = []
        for parent in trial.parents:
            record = runner.records.get(parent)
            if record is None or record.status != TrialStatus.COMPLETED or not record.checkpoint:
                raise SkipTrial(f"{parent} did not complete, so there is nothing to fine-tune")
            sources.append(str(inside(runner.run_dir, record.checkpoint)))
        init_from: str | tuple[str, ...] = sources[0] if len(sources) == 1 else tuple(sources)
        return {"settings": self._task(stage.target), "init_from": init_from,
                "init_groups": ("features",), "freeze": tuple(stage.freeze)}

    def finalize(self, runner: TrialRunner, done: Any) -> dict[str, Any]:
        summary = runner.summary()
        records = runner.records
        tuned = tuned_trial(runner.stage.mode)
        pretrained = [t for t in records if t == "pretrain" or t.startswith("group-")]
        summary["transfer"] = TransferSummary(
            mode=runner.stage.mode,
            test_value=trial_test_value(runner, tuned),
            val_value=trial_val_value(runner, tuned),
            scratch_test_value=trial_test_value(runner, "scratch"),
            scratch_val_value=trial_val_value(runner, "scratch"),
            pretrain_slot_seconds=round(sum(records[t].slot_seconds for t in pretrained), 3),
            curves={
                "pretrain": _curve(runner, pretrained[0]) if pretrained else [],
                "finetune": _curve(runner, tuned),
                "scratch": _curve(runner, "scratch"),
            },
        ).to_json()
        return summary


def _curve(runner: TrialRunner, trial_id: str) -> list[dict[str, Any]]:
    record = runner.records.get(trial_id)
    if record is None:
        return []
    keep = ("epoch", "train_loss", "val_loss", "val_accuracy")
    return [{k: h[k] for k in keep if k in h} for h in record.history]


class TransferKind(StageKind):
    name = "transfer"

    def runner(self, workflow: Any, stage: Any, sources: list[dict[str, Any]],
               **kwargs: Any) -> TrialRunner:
        return TransferTrials(sources).runner(workflow, stage, **kwargs)


KIND = TransferKind()
