"""What each stage kind keeps in its stage's summary under its own name
(``summary["train"]``, ``summary["pbt"]``...): one dataclass per entry, which the
kind's runner (``orchestrator/engine/kinds``) writes and the kind's report
(``orchestrator/projections/kinds``) reads, so both sides name the same fields.

The summary is journalled (``StageFinished``) and written to results.json as JSON:
``to_json`` gives exactly the dict written before these classes existed (same keys,
same order), and ``from_json`` reads one back, from this version or an older one
(a field it lacks reads as None). A summary read back is data: ``from_json`` takes
whatever a mapping holds and never fails on a missing field.

This module imports nothing of the runners, so the reports load it when they print.

>>> TrainSummary.from_json(TrainSummary("train", {"lr": 0.1}, 0.9, 0.8, None).to_json())
TrainSummary(data='train', config={'lr': 0.1}, test_value=0.9, val_value=0.8, checkpoint=None)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Self

from nestor.search import ScheduleStep

__all__ = ["AutoPick", "EnsembleMember", "EnsembleSummary", "PbtSummary", "TrainSummary",
           "TransferSummary"]


class _Json:
    """``to_json``/``from_json`` for a flat dataclass: its fields in their order."""

    def to_json(self) -> dict[str, Any]:
        """The dict journalled and written to results.json."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}  # type: ignore[arg-type]

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Self:
        """One read back from a summary (a field it lacks: None)."""
        return cls(**{f.name: data.get(f.name) for f in dataclasses.fields(cls)})  # type: ignore[arg-type]


@dataclass(frozen=True)
class AutoPick(_Json):
    """``summary["auto"]`` of an hpo stage whose ``algorithm: auto`` picked a search:
    what it built, why, and for how many trials at once (and where that came from)."""

    pick: str
    reason: str
    width: int
    width_source: str


def _step(data: Mapping[str, Any]) -> ScheduleStep:
    fields: dict[str, Any] = {f.name: data.get(f.name) for f in dataclasses.fields(ScheduleStep)}
    return ScheduleStep(**fields)


def _step_json(step: ScheduleStep) -> dict[str, Any]:
    return dataclasses.asdict(step)


@dataclass(frozen=True)
class PbtSummary:
    """``summary["pbt"]`` of a population-based search: the winner's schedule (what a
    train stage ``from:`` it replays) and every member's (what the population plot
    draws), keyed by the member's number as text (a JSON object's keys)."""

    schedule: list[ScheduleStep]
    members: dict[str, list[ScheduleStep]]

    def to_json(self) -> dict[str, Any]:
        return {"schedule": [_step_json(s) for s in self.schedule],
                "members": {m: [_step_json(s) for s in steps]
                            for m, steps in self.members.items()}}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PbtSummary:
        return cls([_step(s) for s in data.get("schedule") or []],
                   {str(m): [_step(s) for s in steps or []]
                    for m, steps in (data.get("members") or {}).items()})


@dataclass(frozen=True)
class TrainSummary(_Json):
    """``summary["train"]``: the one model's data split (``train`` or ``train+val``),
    config, test and validation accuracy, and checkpoint."""

    data: str
    config: dict[str, Any] | None
    test_value: float | None
    val_value: float | None
    checkpoint: str | None


@dataclass(frozen=True)
class TransferSummary(_Json):
    """``summary["transfer"]``: the fine-tuned model's figures against the one trained
    from scratch on the same budget, the pretraining's cost, and the learning curves
    (``pretrain``, ``finetune``, ``scratch``: one point per epoch)."""

    mode: str
    test_value: float | None
    val_value: float | None
    scratch_test_value: float | None
    scratch_val_value: float | None
    pretrain_slot_seconds: float
    curves: dict[str, list[dict[str, Any]]]


@dataclass(frozen=True)
class EnsembleMember(_Json):
    """One member of an ensemble: its trial, weight, figures and checkpoint (relative
    to the run directory)."""

    id: str
    config: dict[str, Any]
    seed: Any
    weight: float
    val_value: float
    test_value: float
    checkpoint: str


@dataclass(frozen=True)
class EnsembleSummary:
    """``summary["ensemble"]`` (None where no ensemble was made) and the stage's
    ``ensemble.json``: how the members were combined, the ensemble's figures against
    its best member's and the members' mean, and the members."""

    combine: str
    val_value: float
    test_value: float
    best_member_val_value: float
    best_member_test_value: float
    mean_member_test_value: float
    members: list[EnsembleMember]

    def to_json(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        out["members"] = [m.to_json() for m in self.members]
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> EnsembleSummary:
        fields: dict[str, Any] = {f.name: data.get(f.name) for f in dataclasses.fields(cls)}
        fields["members"] = [EnsembleMember.from_json(m) for m in data.get("members") or []]
        return cls(**fields)
