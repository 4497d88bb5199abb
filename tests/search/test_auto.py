"""``algorithm: auto``: what it picks, why, and that the pick runs and restores."""

from __future__ import annotations

import json

import pytest
from _search_helpers import MIN, MIXED, drive, loss

from search import AutoChoice, Objective, choose_search, make_searcher
from search.space import CategoricalParam, FloatParam, IntParam, SearchSpace


def box(dims: int) -> SearchSpace:
    return SearchSpace(tuple(FloatParam(f"c{i}", -1.0, 1.0) for i in range(dims)))


@pytest.mark.parametrize(
    ("space", "objectives", "budget", "parallel", "label", "because"),
    [
        (box(7), MIN, 300, 2, "bayesian cmaes", "enough for CMA-ES"),
        (box(7), MIN, 130, 2, "genetic async 10", "under the 225 CMA-ES needs"),
        (box(7), MIN, 20, 1, "bayesian tpe", "too small for an evolutionary search"),
        (box(7), MIN, 8, 1, "random", "spent before a model could help"),
        (box(7), MIN, 1000, 64, "genetic async 64, 4 demes", "64 trials at once"),
        (MIXED, MIN, 100, 2, "bayesian tpe", "1 few-valued int, 1 categorical"),
        (box(3), [Objective("a", "min"), Objective("b", "max")], 300, 2, "bayesian tpe",
         "2 objectives"),
        (box(1), MIN, 300, 1, "bayesian tpe", "one parameter"),
        (SearchSpace((CategoricalParam("a", (1, 2, 3)), CategoricalParam("b", ("x", "y")))),
         MIN, 20, 2, "grid", "6 combinations fit in the budget of 20"),
        (SearchSpace((IntParam("n", 1, 1000), FloatParam("x", 0.0, 1.0))), MIN, 300, 1,
         "bayesian cmaes", "2 numeric parameters"),
    ],
)  # fmt: skip
def test_auto_picks_by_space_budget_and_parallelism(
    space: SearchSpace, objectives: list, budget: int, parallel: int, label: str, because: str
) -> None:
    choice = choose_search(space, objectives, budget=budget, parallel=parallel)
    assert isinstance(choice, AutoChoice)
    assert choice.label() == label
    assert because in choice.reason
    assert choice.describe() == f"{label}: {choice.reason}"
    assert choice.settings["budget"] == budget


def test_auto_is_a_pure_function() -> None:
    first = choose_search(box(5), MIN, budget=200, parallel=4)
    assert first == choose_search(box(5), MIN, budget=200, parallel=4)


def test_make_searcher_builds_the_pick_and_keeps_the_reason() -> None:
    searcher = make_searcher("auto", box(7), MIN, seed=3, budget=130, parallel=2)
    assert searcher.algorithm == "genetic" and searcher.population == 10
    assert searcher.auto_choice.label() == "genetic async 10"
    assert searcher.seed == 3 and searcher.planned == 130
    plain = make_searcher("genetic", box(7), MIN, seed=3, **searcher.auto_choice.settings)
    assert plain.auto_choice is None
    assert plain.state() == searcher.state()


def test_an_auto_search_runs_and_restores() -> None:
    searcher = make_searcher("auto", MIXED, MIN, seed=1, budget=14)
    drive(searcher, loss, steps=5)
    state = json.loads(json.dumps(searcher.state()))
    resumed = make_searcher("auto", MIXED, MIN, seed=1, budget=14)
    resumed.restore(state)
    assert resumed.state() == searcher.state()
    for trial in resumed.pending:
        resumed.tell(trial.id, loss(trial.config))
    drive(resumed, loss)
    assert resumed.done() and len(resumed.observations) == 14


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"population": 8}, "auto search settings must be among seed, budget, parallel"),
        ({"parallel": 0}, "parallel must be a positive integer, but got 0"),
        ({"budget": 0}, "budget must be a positive integer or None, but got 0"),
    ],
)
def test_auto_settings_are_checked(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        make_searcher("auto", box(3), MIN, **kwargs)
