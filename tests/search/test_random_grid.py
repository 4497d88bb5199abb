"""Random and grid search."""

from __future__ import annotations

import math

import pytest
from _search_helpers import MIN, MIXED, drive

from nestor.search import GridSearch, RandomSearch
from nestor.search._grid import grid_values
from nestor.search.space import CategoricalParam, ConstantParam, FloatParam, IntParam, SearchSpace


def test_random_draws_log_parameters_log_uniformly() -> None:
    space = SearchSpace((FloatParam("lr", 1e-5, 1.0, log=True),))
    searcher = RandomSearch(space, MIN, budget=400, seed=0)
    lrs = [t.config["lr"] for t in searcher.ask(400)]
    below = sum(lr < 1e-3 for lr in lrs) / len(lrs)
    assert 0.3 < below < 0.5  # 2 of 5 decades


def test_random_default_budget_is_the_specs() -> None:
    assert RandomSearch(MIXED, MIN).planned == 20


def test_grid_values_per_type() -> None:
    assert grid_values(FloatParam("x", 0.0, 1.0), 3) == [0.0, 0.5, 1.0]
    lr = grid_values(FloatParam("lr", 1e-4, 1e-2, log=True), 3)
    assert lr[0] == 1e-4 and lr[2] == 1e-2 and lr[1] == pytest.approx(1e-3)
    assert grid_values(IntParam("n", 1, 3), 5) == [1, 2, 3]
    assert grid_values(IntParam("n", 0, 10), 3) == [0, 5, 10]
    batch = grid_values(IntParam("b", 1, 4, log=True), 4)
    assert batch == [1, 2, 3, 4]  # distinct even where a log grid rounds together
    assert grid_values(CategoricalParam("c", ("a", 1, True)), 3) == ["a", 1, True]
    assert grid_values(ConstantParam("k", 7), 3) == [7]


def test_grid_covers_every_point_once() -> None:
    space = SearchSpace(
        (
            FloatParam("x", 0.0, 1.0),
            IntParam("n", 1, 2),
            CategoricalParam("c", ("a", "b")),
            ConstantParam("k", "fixed"),
        )
    )
    searcher = GridSearch(space, MIN, points={"x": 4})
    assert searcher.size == searcher.planned == 4 * 2 * 2
    configs = [t.config for t in drive(searcher, lambda c: c["x"], parallel=5)]
    keys = {(c["x"], c["n"], c["c"]) for c in configs}
    assert len(keys) == len(configs) == 16
    assert all(c["k"] == "fixed" and space.contains(c) for c in configs)


def test_grid_budget_samples_the_whole_grid() -> None:
    space = SearchSpace(tuple(FloatParam(f"x{i}", 0.0, 1.0) for i in range(6)))
    searcher = GridSearch(space, MIN, points=3, budget=20, seed=0)
    configs = [t.config for t in searcher.ask(20)]
    assert searcher.size == 3**6
    assert len({c["x0"] for c in configs}) == 3  # not only the last parameter varies


def test_grid_planned_matches_the_spec() -> None:
    from nestor.orchestrator.spec.model import GridSearch as Spec

    for points in (2, 3, {"lr": 5}):
        spec = Spec(algorithm="grid", points=points)
        assert GridSearch(MIXED, MIN, points=points).planned == spec.planned_trials(MIXED)


def test_grid_settings_are_checked() -> None:
    with pytest.raises(ValueError, match="points must be at least 2, but got 1"):
        GridSearch(MIXED, MIN, points=1)
    with pytest.raises(ValueError, match="points must name numeric parameters"):
        GridSearch(MIXED, MIN, points={"act": 3})
    huge = SearchSpace(tuple(FloatParam(f"x{i}", 0.0, 1.0) for i in range(20)))
    with pytest.raises(ValueError, match="budget must be at most"):
        GridSearch(huge, MIN)
    assert GridSearch(huge, MIN, budget=10).planned == 10
    assert math.prod([3] * 20) == GridSearch(huge, MIN, budget=10).size
