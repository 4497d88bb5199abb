"""What each stage produced, read from its summary: the one place that decides
which figures `nestor results` and a stage's summary.md put side by side.

A stage's ``best`` trial is its product only for an hpo stage. A transfer
stage's best trial by validation is usually the pretraining run (on the
source task, often easier), while what the stage makes is the fine-tuned
model; an ensemble stage's best trial is one member, while it makes the
ensemble; a train stage makes one model. So the product of each kind is named
here, with the figure it is measured against (the from-scratch baseline, the
best member), and nothing else chooses.

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


def stage_product(stage: dict[str, Any]) -> Product:
    kind = stage.get("kind", "hpo")
    if kind == "ensemble":
        return _ensemble(stage.get("ensemble"))
    if kind == "transfer":
        return _transfer(stage.get("transfer") or {})
    if kind == "train":
        return _train(stage.get("train") or {})
    best = stage.get("best")
    metric = (stage.get("objective") or {}).get("metric", "value")
    if not best:
        return Product("no completed trial", metric, None, None)
    return Product(f"best trial {best.get('id')}", metric, best.get("value"),
                   best.get("test_value"))


def _ensemble(ensemble: dict[str, Any] | None) -> Product:
    if not ensemble:
        return Product("no ensemble (no member completed)", "val_accuracy", None, None)
    members = ensemble.get("members") or []
    best = max(members, key=lambda m: m.get("val_value") or 0.0, default=None)
    named = f" ({best['id']})" if best else ""
    combine = f" ({ensemble['combine']})" if ensemble.get("combine") else ""
    return Product(f"ensemble of {len(members)}{combine}", "val_accuracy",
                   ensemble.get("val_value"), ensemble.get("test_value"),
                   f"best member{named}", ensemble.get("best_member_test_value"))


def _transfer(transfer: dict[str, Any]) -> Product:
    what = ("combined sub-models, fine-tuned" if transfer.get("mode") == "hierarchical"
            else "fine-tuned model")
    return Product(what, "val_accuracy", transfer.get("val_value"), transfer.get("test_value"),
                   "from scratch, same budget", transfer.get("scratch_test_value"))


def _train(train: dict[str, Any]) -> Product:
    data = train.get("data") or "train"
    held_out = data == "train"  # with train+val the validation split was trained on
    return Product(f"model trained on {data}", "val_accuracy",
                   train.get("val_value") if held_out else None, train.get("test_value"))
