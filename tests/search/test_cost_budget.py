"""Cost budgets: every search spends slot-seconds, hours or epochs to the last trial
that fits, and leaves less than one trial's worth."""

from __future__ import annotations

import json
from typing import Any

import pytest
from _search_helpers import MIN, MIXED, loss

from nestor.search import Failure, Searcher, make_searcher
from nestor.search._budget import parse_budget, parse_budget_text

FULL_SECONDS = 10.0  # what a trial trained in full costs (slot-seconds)
PER_EPOCH = 2.0  # what one epoch of a continued trial costs (slot-seconds)
FULL_EPOCHS = 9  # a full training's epochs (the trainer's setting)

SEARCHES: list[tuple[str, dict[str, Any]]] = [
    ("random", {}),
    ("genetic", {"population": 6}),
    ("genetic", {"population": 6, "schedule": "async"}),
    ("bayesian", {"startup_trials": 4}),
    ("asha", {"max_budget": 9}),
    ("asha", {"max_budget": 9, "sampler": "tpe", "startup_trials": 4}),
    ("hyperband", {"max_budget": 9}),
    ("hyperband", {"max_budget": 9, "sampler": "tpe"}),
    ("pbt", {"population": 4, "interval": 1}),
]


def cost(trial: Any, searcher: Searcher, unit: str) -> float:
    """The driver's figure: slot-seconds, or the epochs a trial trained."""
    if trial.budget is None:
        return FULL_SECONDS if unit == "slot_seconds" else FULL_EPOCHS
    start = 0.0
    if trial.continue_from is not None:
        start = float(searcher.trials[trial.continue_from].budget)
    span = float(trial.budget) - start
    return span * (PER_EPOCH if unit == "slot_seconds" else 1.0)


def spend(searcher: Searcher, unit: str, parallel: int = 3, stop: int | None = None) -> float:
    """Drive to the end (or ``stop`` tells), telling each trial's cost; the total."""
    running: list = []
    total, told = 0.0, 0
    while not searcher.done() and (stop is None or told < stop):
        running += searcher.ask(parallel - len(running)) if len(running) < parallel else []
        if not running:
            break
        trial = running.pop(0)
        paid = cost(trial, searcher, unit)
        total += paid
        told += 1
        result = Failure("nan") if told % 7 == 0 else loss(trial.config)
        searcher.tell(trial.id, result, cost=paid)
    return total


@pytest.mark.parametrize(("algorithm", "settings"), SEARCHES,
                         ids=[f"{a}-{'-'.join(map(str, s.values()))}" for a, s in SEARCHES])
@pytest.mark.parametrize(("budget", "unit"), [({"slot_seconds": 600}, "slot_seconds"),
                                              ({"hours": 0.15}, "slot_seconds"),
                                              ({"epochs": 200}, "epochs")])
def test_every_search_spends_its_cost_budget_to_the_last_trial(
    algorithm: str, settings: dict, budget: dict, unit: str
) -> None:
    """Spent within the budget, with less left than the costliest trial it could ask."""
    searcher = make_searcher(algorithm, MIXED, MIN, seed=3, budget=budget, **settings)
    limit = parse_budget(budget)[1].limit  # type: ignore[union-attr]
    total = spend(searcher, unit)
    assert searcher.done(), (algorithm, len(searcher.trials))
    assert "budget of" in searcher.stop_reason and "is spent" in searcher.stop_reason
    assert total == pytest.approx(searcher.cost_spent)
    largest = max(cost(t, searcher, unit) for t in searcher.trials.values())
    assert limit - largest < total <= limit + 1e-9, (algorithm, total, limit)
    assert not searcher.pending


@pytest.mark.parametrize(("algorithm", "settings"), SEARCHES[2:8:2])
def test_a_cost_budgeted_search_restores_exactly(algorithm: str, settings: dict) -> None:
    """The costs told are in the journal, so a restored search stops where the
    original would."""
    make = lambda: make_searcher(algorithm, MIXED, MIN, seed=5,  # noqa: E731
                                 budget={"slot_seconds": 300}, **settings)
    first = make()
    spend(first, "slot_seconds", stop=12)
    resumed = make()
    resumed.restore(json.loads(json.dumps(first.state())))
    assert resumed.state() == first.state() and resumed.cost_spent == first.cost_spent
    for trial in list(first.pending):
        first.tell(trial.id, loss(trial.config), cost=cost(trial, first, "slot_seconds"))
        resumed.tell(trial.id, loss(trial.config), cost=cost(trial, resumed, "slot_seconds"))
    spend(first, "slot_seconds")
    spend(resumed, "slot_seconds")
    assert resumed.state() == first.state()


def test_a_slot_seconds_budget_predicts_a_continued_trial_from_its_span() -> None:
    """Before a promotion is asked, its cost is its epochs times the slot-seconds per
    epoch seen so far: a budget that cannot pay for it asks a cheaper trial instead."""
    asha = make_searcher("asha", MIXED, MIN, seed=1, budget={"slot_seconds": 9},
                         max_budget=9)  # fmt: skip
    spend(asha, "slot_seconds", parallel=1)
    # Three 1-epoch trials (2 s each), then the best's promotion to 3 epochs would
    # cost 2 epochs x 2 s: over the 3 s left, so a fourth 1-epoch trial is asked
    # instead, and then not even that fits the 1 s left.
    assert [t.budget for t in asha.trials.values()] == [1, 1, 1, 1]
    assert asha.cost_spent == 8
    assert "next trial would need about 2 slot-seconds" in asha.stop_reason


@pytest.mark.parametrize(
    ("text", "budget"),
    [("40", 40), ("30h", {"hours": 30.0}), ("1.5hours", {"hours": 1.5}),
     ("600slot-s", {"slot_seconds": 600.0}), ("600 slot_seconds", {"slot_seconds": 600.0}),
     ("300epochs", {"epochs": 300.0}), ("12ep", {"epochs": 12.0})],
)
def test_budget_text(text: str, budget: Any) -> None:
    assert parse_budget_text(text) == budget


@pytest.mark.parametrize(
    ("value", "message"),
    [("2d", "--budget must be a number of trials"), ("0", "positive integer"),
     ("0h", "--budget must be positive")],
)
def test_bad_budget_text_says_what_is_allowed(value: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_budget_text(value)


@pytest.mark.parametrize(
    ("value", "message"),
    [({"epochs": 0}, "budget.epochs must be a positive number, but got 0"),
     ({"epochs": 5, "hours": 1},
      "one key of slot_seconds, slot_hours, epochs, but got epochs, hours"),
     (2.5, "budget must be a positive integer")],
)
def test_bad_budgets_are_refused(value: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        make_searcher("random", MIXED, MIN, budget=value)


def test_a_cost_budget_needs_the_first_cost_told() -> None:
    """Counted free, an untold cost would never end the search."""
    searcher = make_searcher("random", MIXED, MIN, budget={"hours": 1})
    (trial,) = searcher.ask(1)
    with pytest.raises(ValueError, match=r"cost must be told with trial 0's result .*"
                                         r"in slot-seconds"):
        searcher.tell(trial.id, 1.0)
    assert searcher.pending == [trial]  # refused before anything was recorded
    searcher.tell(trial.id, 1.0, cost=5.0)
    assert searcher.cost_spent == 5.0


HALVING = [("asha", {"max_budget": 9}), ("asha", {"max_budget": 9, "sampler": "tpe"}),
           ("hyperband", {"max_budget": 9}), ("hyperband", {"max_budget": 9, "sampler": "tpe"}),
           ("asha", {"min_budget": 1, "max_budget": 100}),
           ("hyperband", {"min_budget": 1, "max_budget": 100})]  # fmt: skip


@pytest.mark.parametrize(("algorithm", "settings"), HALVING,
                         ids=[f"{a}-{'-'.join(map(str, s.values()))}" for a, s in HALVING])
@pytest.mark.parametrize(("budget", "unit"), [({"epochs": 200}, "epochs"),
                                              ({"epochs": 457}, "epochs"),
                                              ({"slot_seconds": 377}, "slot_seconds")])
@pytest.mark.parametrize("parallel", [1, 4])
def test_successive_halving_leaves_less_than_a_bottom_rung_trial_unspent(
    algorithm: str, settings: dict, budget: dict, unit: str, parallel: int
) -> None:
    """A promotion (or a conservative bracket's first trial) that no longer fits gives
    way to cheaper trials down to a new bottom-rung one: what is left at the end
    is less than one bottom-rung trial, not less than the costliest trial."""
    searcher = make_searcher(algorithm, MIXED, MIN, seed=11, budget=budget, **settings)
    limit = parse_budget(budget)[1].limit  # type: ignore[union-attr]
    total = spend(searcher, unit, parallel=parallel)
    assert searcher.done() and "is spent" in searcher.stop_reason
    bottom = searcher.rungs[0] * (PER_EPOCH if unit == "slot_seconds" else 1.0)
    assert limit - bottom < total <= limit + 1e-9, (total, limit, bottom)
