"""Budgets in the units people plan in: trials, slot-seconds, hours or epochs.

``budget: 40`` counts trials, as before. ``budget: {slot_seconds: S}``,
``{slot_hours: H}`` (3,600 slot-seconds each; ``{hours: H}``, the older spelling,
means the same) or ``{epochs: E}``
(fidelity units: what a trial's ``budget`` counts, epochs unless the stage maps
it to another setting) is a *cost* budget: the search asks for trials while the
next one still fits and stops once it cannot, so it never leaves more than one
trial's worth unspent, and never plans whole iterations or generations it then
cannot afford.

What a trial costs the search learns from the driver: ``tell(id, result,
cost=...)`` in the budget's unit (the orchestrator tells a trial's slot-seconds,
or the epochs it trained). A trial that continues a checkpoint up to a known
length (successive halving, PBT) costs exactly its span in epochs, and in
slot-seconds its span times the slot-seconds per epoch seen so far; a trial
trained in full costs the mean of the full trials told. Before any cost is told
nothing is predicted (the first asks fill every slot).

>>> parse_budget({"hours": 2})
(None, CostBudget(unit='slot_seconds', limit=7200.0))
>>> parse_budget_text("600slot-s"), parse_budget_text("30slot-h"), parse_budget_text("40")
({'slot_seconds': 600.0}, {'slot_hours': 30.0}, 40)
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

UNITS = {"slot_seconds": ("slot_seconds", 1.0), "slot_hours": ("slot_seconds", 3600.0),
         "hours": ("slot_seconds", 3600.0), "epochs": ("epochs", 1.0)}  # fmt: skip
"""A cost budget's keys: the unit the search counts in, and the factor to it.
``hours`` is the older spelling of ``slot_hours`` (a spec says so when it reads it)."""

UNLIMITED_TRIALS = 1_000_000_000
"""The trial count a search plans under a cost budget: the cost decides when it ends."""

FORMS = "a positive integer (trials), {slot_seconds: S}, {slot_hours: H} or {epochs: E}"

_TEXT = re.compile(
    r"^\s*(?P<number>[0-9]*\.?[0-9]+(?:e[+-]?[0-9]+)?)\s*"
    r"(?P<unit>|h|hours?|slot-?h|slot[-_]hours?|slot-?s|slot[-_]seconds?|ep|epochs?)\s*$",
    re.IGNORECASE,
)
_TEXT_UNITS = {"h": "hours", "hour": "hours", "hours": "hours", "ep": "epochs",
               "epoch": "epochs", "epochs": "epochs"}  # fmt: skip
_SLOT_HOURS = re.compile(r"^slot[-_]?hours?$|^slot-?h$")


@dataclass(frozen=True)
class CostBudget:
    """A budget of ``limit`` in ``unit`` ("slot_seconds" or "epochs")."""

    unit: str
    limit: float

    def describe(self, value: float | None = None) -> str:
        amount = self.limit if value is None else value
        if self.unit == "epochs":
            return f"{amount:g} epochs"
        return f"{amount:g} slot-seconds"


def parse_budget(value: Any) -> tuple[int | None, CostBudget | None]:
    """(trials, None), (None, cost budget) or (None, None) for no budget."""
    if value is None:
        return None, None
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 1:
            raise ValueError(f"budget must be {FORMS}, but got {value!r}")
        return value, None
    if isinstance(value, Mapping):
        if len(value) != 1 or next(iter(value)) not in UNITS:
            keys = ", ".join(map(str, value)) or "none"
            named = ", ".join(u for u in UNITS if u != "hours")
            raise ValueError(f"budget must be {FORMS}: one key of {named}, but got {keys}")
        key, amount = next(iter(value.items()))
        if (not isinstance(amount, int | float) or isinstance(amount, bool)
                or not math.isfinite(amount) or amount <= 0):  # fmt: skip
            raise ValueError(f"budget.{key} must be a positive number, but got {amount!r}")
        unit, factor = UNITS[key]
        return None, CostBudget(unit, float(amount) * factor)
    raise ValueError(f"budget must be {FORMS}, but got {value!r}")


def parse_budget_text(text: str) -> int | dict[str, float]:
    """A command line's budget: ``40`` (trials), ``30slot-h``, ``600slot-s``,
    ``300epochs`` (and ``30h``, the older spelling of slot-hours)."""
    match = _TEXT.match(text)
    if match is None:
        raise ValueError(
            "--budget must be a number of trials (40), slot-hours (30slot-h), slot-seconds"
            f" (600slot-s) or epochs (300epochs), but got {text!r}"
        )
    number, unit = match["number"], match["unit"].lower()
    if not unit:
        if not number.isdigit() or int(number) < 1:
            raise ValueError(f"--budget in trials must be a positive integer, but got {text!r}")
        return int(number)
    amount = float(number)
    if amount <= 0:
        raise ValueError(f"--budget must be positive, but got {text!r}")
    if _SLOT_HOURS.match(unit):
        return {"slot_hours": amount}
    return {_TEXT_UNITS.get(unit, "slot_seconds"): amount}


@dataclass
class Spend:
    """What a cost-budgeted search has spent and expects to spend."""

    budget: CostBudget
    costs: dict[str, float] = field(default_factory=dict)  # told trials, by id
    sizes: dict[str, float | None] = field(default_factory=dict)  # their spans (None: full)

    def record(self, trial_id: str, size: float | None, cost: float | None) -> None:
        """A told trial's cost: its span in epochs, else the driver's figure, else the
        estimate (a driver that tells no cost spends what was expected)."""
        if self.budget.unit == "epochs" and size is not None:
            spent = size
        elif cost is not None:
            spent = float(cost)
        else:
            spent = self.estimate(size)
        self.costs[trial_id] = spent
        self.sizes[trial_id] = size

    def check(self, trial_id: str, size: float | None, cost: float | None) -> None:
        """Refuse an untold cost where nothing can estimate it: counted free, it would
        never end the search."""
        if cost is None and not self.costs and not (self.budget.unit == "epochs" and size):
            raise ValueError(
                f"cost must be told with trial {trial_id}'s result (tell(..., cost=...),"
                f" in {self.budget.describe(0).split(' ', 1)[1]}): a search under a cost"
                " budget learns what its trials cost from the driver, but got None")

    def estimate(self, size: float | None) -> float:
        """The expected cost of a trial that trains ``size`` (None: a full trial)."""
        if size is not None:
            if self.budget.unit == "epochs":
                return size
            spans = [(self.costs[i], s) for i, s in self.sizes.items() if s]
            if spans:
                return size * sum(c for c, _ in spans) / sum(s for _, s in spans)
        full = [self.costs[i] for i, s in self.sizes.items() if s is None]
        if full:
            return sum(full) / len(full)
        every = list(self.costs.values())
        return sum(every) / len(every) if every and size is None else 0.0

    @property
    def spent(self) -> float:
        return sum(self.costs.values())

    def committed(self, pending: Iterable[float | None]) -> float:
        """Spent, and what the pending trials (by size) are expected to spend."""
        return self.spent + sum(self.estimate(size) for size in pending)

    def fits(self, pending: Iterable[float | None], size: float | None) -> bool:
        return self.committed(pending) + self.estimate(size) <= self.budget.limit * (1 + 1e-9)
