"""The transfer stage's report: the fine-tuned model is the product, training
from scratch on the same budget its baseline; learning curves are its detail."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from nestor.orchestrator.engine.kinds.summaries import TransferSummary
from nestor.orchestrator.journal.state import RunState
from nestor.orchestrator.projections.kinds import KindReport, PlotMaker
from nestor.orchestrator.projections.products import Product
from nestor.orchestrator.projections.tables import Report, fmt


class TransferReport(KindReport):
    name = "transfer"

    def product(self, summary: dict[str, Any]) -> Product:
        transfer = _transfer(summary)
        what = ("combined sub-models, fine-tuned" if transfer.mode == "hierarchical"
                else "fine-tuned model")
        return Product(what, "val_accuracy", transfer.val_value, transfer.test_value,
                       "from scratch, same budget", transfer.scratch_test_value)

    def product_trial(self, summary: dict[str, Any]) -> str | None:
        from nestor.orchestrator.engine.kinds.transfer import tuned_trial  # loaded when asked

        return tuned_trial(_transfer(summary).mode)

    def lines(self, summary: dict[str, Any]) -> list[str]:
        t = _transfer(summary)
        return [f"{summary['name']}: {t.mode or 'finetune'} on the target, test"
                f" {fmt(t.test_value)}, against training from scratch on the same"
                f" budget {fmt(t.scratch_test_value)}"]

    def detail(self, report: Report, summary: dict[str, Any], objectives: list[Any]) -> None:
        """Learning curves, one row per epoch (the test accuracies are the product's)."""
        if not summary.get("transfer"):
            return super().detail(report, summary, objectives)
        curves = _transfer(summary).curves or {}
        metrics = sorted({k for points in curves.values() for p in points for k in p
                          if k != "epoch"})
        report.columns = ["phase", "epoch", *metrics]
        for phase, points in curves.items():
            for point in points or []:
                report.rows.append([phase, fmt(point.get("epoch")),
                                    *[fmt(point.get(m)) for m in metrics]])
        report.caption = "learning curves, one row per epoch"

    def plots(self, summary: dict[str, Any], stage: Any, objectives: list[Any],
              state: RunState, run_dir: Path) -> list[PlotMaker]:
        from nestor.orchestrator.projections.plots import plot_transfer

        return self.summary_plot(summary, run_dir, plot_transfer)


def _transfer(summary: dict[str, Any]) -> TransferSummary:
    """What the transfer kind kept in the summary (all None where it kept nothing)."""
    return TransferSummary.from_json(summary.get("transfer") or {})


REPORT = TransferReport()
