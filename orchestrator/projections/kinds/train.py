"""The train stage's report: its one model is the product."""

from __future__ import annotations

from typing import Any

from nestor.orchestrator.projections.kinds import KindReport
from nestor.orchestrator.projections.products import Product
from nestor.orchestrator.projections.tables import fmt


class TrainReport(KindReport):
    name = "train"

    def product(self, summary: dict[str, Any]) -> Product:
        train = summary.get("train") or {}
        data = train.get("data") or "train"
        held_out = data == "train"  # with train+val the validation split was trained on
        return Product(f"model trained on {data}", "val_accuracy",
                       train.get("val_value") if held_out else None, train.get("test_value"))

    def product_trial(self, summary: dict[str, Any]) -> str | None:
        from nestor.orchestrator.engine.kinds.train import TRIAL  # the runner's: loaded when asked

        return TRIAL

    def checkpoint(self, summary: dict[str, Any]) -> str | None:
        return (summary.get("train") or {}).get("checkpoint") or super().checkpoint(summary)

    def lines(self, summary: dict[str, Any]) -> list[str]:
        t = summary.get("train") or {}
        config = ", ".join(f"{k}={fmt(v)}" for k, v in (t.get("config") or {}).items())
        return [f"{summary['name']}: trained on {t.get('data')} with {config}; test"
                f" {fmt(t.get('test_value'))}"]


REPORT = TrainReport()
