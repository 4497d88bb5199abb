"""What each stage produced, read from its summary: the one place that decides
which figures `nestor results` and a stage's summary.md put side by side.

A stage's ``best`` trial is its product only for an hpo stage. A transfer
stage's best trial by validation is usually the pretraining run (on the
source task, often easier), while what the stage makes is the fine-tuned
model; an ensemble stage's best trial is one member, while it makes the
ensemble; a train stage makes one model. So the product of each kind is named
here, with the figure it is measured against (the from-scratch baseline, the
best member), and nothing else chooses.

>>> from nestor.orchestrator.projections.kinds import stage_product
>>> p = stage_product({"kind": "transfer", "transfer": {"mode": "finetune",
...     "val_value": 0.9, "test_value": 0.88, "scratch_test_value": 0.76},
...     "best": {"id": "pretrain", "value": 0.97, "test_value": 0.96}})
>>> p.what, p.test, p.baseline, p.baseline_test
('fine-tuned model', 0.88, 'from scratch, same budget', 0.76)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Product:
    """A stage's product: ``value`` is its ``metric`` on validation data (None where
    the product was trained on the validation split), ``test`` its test accuracy;
    ``baseline`` names what it is compared with, ``baseline_test`` that one's test
    accuracy."""

    what: str
    metric: str
    value: Any
    test: float | None
    baseline: str | None = None
    baseline_test: float | None = None


def objective_label(metric: str, mode: str | None) -> str:
    """A metric with its direction beside it, ``fom (min)``: the progress bar, the
    results tables and MLflow say which way a search went, never leave it to guess."""
    return f"{metric} ({mode})" if mode in ("max", "min") else metric


def metric_label(stage: dict[str, Any], metric: str) -> str:
    """``metric`` of a stage's summary with its direction: the stage's objective's, or
    max for an accuracy (what ensemble, train and transfer products are measured by)."""
    objective = stage.get("objective") or {}
    if objective.get("metric") == metric:
        return objective_label(metric, objective.get("mode"))
    return objective_label(metric, "max" if metric.endswith("accuracy") else None)
