"""The train stage's report: its one model is the product."""

from __future__ import annotations

from typing import Any

from nestor.orchestrator.engine.kinds.summaries import TrainSummary
from nestor.orchestrator.projections.kinds import KindReport
from nestor.orchestrator.projections.products import Product
from nestor.orchestrator.projections.tables import fmt


class TrainReport(KindReport):
    name = "train"

    def product(self, summary: dict[str, Any]) -> Product:
        train = _train(summary)
        data = train.data or "train"
        held_out = data == "train"  # with train+val the validation split was trained on
        return Product(f"model trained on {data}", "val_accuracy",
                       train.val_value if held_out else None, train.test_value)

    def product_trial(self, summary: dict[str, Any]) -> str | None:
        from nestor.orchestrator.engine.kinds.train import TRIAL  # the runner's: loaded when asked

        return TRIAL

    def checkpoint(self, summary: dict[str, Any]) -> str | None:
        return _train(summary).checkpoint or super().checkpoint(summary)

    def lines(self, summary: dict[str, Any]) -> list[str]:
        t = _train(summary)
        config = ", ".join(f"{k}={fmt(v)}" for k, v in (t.config or {}).items())
        return [f"{summary['name']}: trained on {t.data} with {config}; test"
                f" {fmt(t.test_value)}"]


def _train(summary: dict[str, Any]) -> TrainSummary:
    """What the train kind kept in the summary (all None where it kept nothing)."""
    return TrainSummary.from_json(summary.get("train") or {})


REPORT = TrainReport()
