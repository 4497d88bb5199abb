"""The transfer kind: pretrain on a source task (or on sub-problems of it),
fine-tune on the target; train the target from scratch on the same budget to
compare. The fine-tuned model is the product, the from-scratch one its baseline."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from orchestrator.engine.kinds import PlotMaker, StageKind
from orchestrator.engine.kinds._planned import PlannedRunner, best_config
from orchestrator.engine.plan import PlannedTrial
from orchestrator.engine.trials import SkipTrial, TrialRunner
from orchestrator.projections.products import Product
from orchestrator.spec import TransferStage, Workflow

DEFAULT_LR = 0.05  # the built-in trainers' default, when the config names none


def tuned_trial(mode: str | None) -> str:
    """The trial that makes the product: the fine-tuned model."""
    return "combined" if mode == "hierarchical" else "finetune"


class TransferRunner(PlannedRunner):
    def phases(self, workflow: Workflow, stage: TransferStage, sources: list[dict[str, Any]],
               objective: Any) -> list[list[PlannedTrial]]:
        config = {**best_config(sources), **stage.config}
        tuned = dict(config)
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

    def request_extras(self, trial: Any) -> dict[str, Any]:
        """The task each trial trains on; the tuned trial starts from its parents'
        checkpoints (several: the trainer averages them, on the gang, not here)."""
        stage: TransferStage = self.stage
        if trial.id == "pretrain":
            return {"settings": self._task(stage.source)}
        if trial.id.startswith("group-"):
            group = (stage.groups or [])[int(trial.id.split("-")[1])]
            return {"settings": self._task(stage.source, group)}
        if trial.id == "scratch":
            return {"settings": self._task(stage.target)}
        sources = []
        for parent in trial.parents:
            record = self.records.get(parent)
            if record is None or record.status != "completed" or not record.checkpoint:
                raise SkipTrial(f"{parent} did not complete, so there is nothing to fine-tune")
            sources.append(str(record.checkpoint))
        init_from: str | tuple[str, ...] = sources[0] if len(sources) == 1 else tuple(sources)
        return {"settings": self._task(stage.target), "init_from": init_from,
                "init_groups": ("features",), "freeze": tuple(stage.freeze)}

    def finalize(self, done: Any = None) -> dict[str, Any]:
        summary = self.summary()
        tuned = tuned_trial(self.stage.mode)
        pretrained = [t for t in self.records if t == "pretrain" or t.startswith("group-")]
        summary["transfer"] = {
            "mode": self.stage.mode,
            "test_value": self.test_value(tuned),
            "val_value": self.val_value(tuned),
            "scratch_test_value": self.test_value("scratch"),
            "scratch_val_value": self.val_value("scratch"),
            "pretrain_slot_seconds": round(sum(self.records[t].slot_seconds
                                               for t in pretrained), 3),
            "curves": {
                "pretrain": self._curve(pretrained[0]) if pretrained else [],
                "finetune": self._curve(tuned),
                "scratch": self._curve("scratch"),
            },
        }
        return summary

    def _curve(self, trial_id: str) -> list[dict[str, Any]]:
        record = self.records.get(trial_id)
        if record is None:
            return []
        keep = ("epoch", "train_loss", "val_loss", "val_accuracy")
        return [{k: h[k] for k in keep if k in h} for h in record.history]


class TransferKind(StageKind):
    name = "transfer"

    def runner(self, workflow: Any, stage: Any, sources: list[dict[str, Any]],
               **kwargs: Any) -> TrialRunner:
        return TransferRunner(workflow, stage, sources, **kwargs)

    def product(self, summary: dict[str, Any]) -> Product:
        transfer = summary.get("transfer") or {}
        what = ("combined sub-models, fine-tuned" if transfer.get("mode") == "hierarchical"
                else "fine-tuned model")
        return Product(what, "val_accuracy", transfer.get("val_value"),
                       transfer.get("test_value"), "from scratch, same budget",
                       transfer.get("scratch_test_value"))

    def product_trial(self, summary: dict[str, Any]) -> str | None:
        return tuned_trial((summary.get("transfer") or {}).get("mode"))

    def lines(self, summary: dict[str, Any]) -> list[str]:
        from orchestrator.projections.tables import fmt

        t = summary.get("transfer") or {}
        return [f"{summary['name']}: {t.get('mode', 'finetune')} on the target, test"
                f" {fmt(t.get('test_value'))}, against training from scratch on the same"
                f" budget {fmt(t.get('scratch_test_value'))}"]

    def detail(self, report: Any, summary: dict[str, Any], objectives: list[Any]) -> None:
        """Learning curves, one row per epoch (the test accuracies are the product's)."""
        from orchestrator.projections.tables import fmt

        if not summary.get("transfer"):
            return super().detail(report, summary, objectives)
        curves = summary["transfer"].get("curves") or {}
        metrics = sorted({k for points in curves.values() for p in points for k in p
                          if k != "epoch"})
        report.columns = ["phase", "epoch", *metrics]
        for phase, points in curves.items():
            for point in points or []:
                report.rows.append([phase, fmt(point.get("epoch")),
                                    *[fmt(point.get(m)) for m in metrics]])
        report.caption = "learning curves, one row per epoch"

    def plots(self, summary: dict[str, Any], stage: Any, objectives: list[Any],
              events: list[dict[str, Any]], run_dir: Path) -> list[PlotMaker]:
        from orchestrator.projections.plots import plot_transfer

        if not summary.get("transfer"):
            return []
        name = str(summary["name"])
        return [("transfer", lambda: plot_transfer(name, summary["transfer"],
                                                   run_dir / "plots" / f"{name}.png"))]


KIND = TransferKind()
