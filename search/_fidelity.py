"""What searches that continue trials share: training spans and their cost.

A trial with a ``budget`` trains from where its ``continue_from`` checkpoint
stopped (0 without one) up to its budget. Counting the cost this way is what
makes a comparison with full-budget searches honest: a promotion from 3 to 9
epochs costs 6 epochs, not 9 and not 0.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from nestor.search._base import Trial


def span(trial: Trial, trials: Mapping[str, Trial]) -> tuple[float, float]:
    """(start, until) of the training ``trial`` asks for, in budget units."""
    if trial.budget is None:
        raise ValueError(f"trial {trial.id} has no budget, so it has no training span")
    start = 0.0
    if trial.continue_from is not None:
        source = trials[trial.continue_from].budget
        start = float(source) if source is not None else 0.0
    return start, float(trial.budget)


def budget_used(trials: Mapping[str, Trial]) -> float:
    """The training all of ``trials`` ask for together (sum of until - start)."""
    total = 0.0
    for trial in trials.values():
        if trial.budget is not None:
            start, until = span(trial, trials)
            total += until - start
    return total


def check_number(name: str, value: Any, *, positive: bool = True) -> float:
    """A finite (positive) int or float, or the usual descriptive error."""
    if (
        not isinstance(value, int | float)
        or isinstance(value, bool)
        or not math.isfinite(value)
        or (positive and value <= 0)
    ):
        kind = "a positive number" if positive else "a finite number"
        raise ValueError(f"{name} must be {kind}, but got {value!r}")
    return value


def check_int(name: str, value: Any, minimum: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise ValueError(f"{name} must be an integer of at least {minimum}, but got {value!r}")
    return value


RANKS_ON_ONE = "it ranks trials on one metric to decide which continue"
"""Why the searches that continue trials (PBT, ASHA, Hyperband) take one objective."""


def check_one_objective(algorithm: str, objectives: tuple[Any, ...]) -> None:
    """These searches rank trials against each other on one number."""
    if len(objectives) != 1:
        raise ValueError(
            f"objectives must be exactly one for {algorithm} search ({RANKS_ON_ONE}), but"
            f" got {len(objectives)}: {', '.join(o.metric for o in objectives)}"
        )
