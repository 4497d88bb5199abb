"""Genetic and Bayesian search must beat random search at the same budget.

Median best value over 10 seeds at a budget of 100 trials on sphere,
Rastrigin, Branin and a least-squares polynomial fit of sin(x) (see
``bench/search_bench.py`` for the full table).
"""

from __future__ import annotations

import statistics

import pytest
from _search_helpers import drive

from nestor.search import make_searcher
from nestor.search.problems import PROBLEMS

BUDGET = 100
SEEDS = range(10)
CONTENDERS = {
    "genetic": ("genetic", {"population": 16, "generations": 7}),
    "genetic-async": ("genetic", {"population": 16, "generations": 7, "schedule": "async"}),
    "tpe": ("bayesian", {"sampler": "tpe"}),
    "cmaes": ("bayesian", {"sampler": "cmaes"}),
}


def median_best(problem_name: str, algorithm: str, settings: dict) -> float:
    problem = PROBLEMS[problem_name]
    bests = []
    for seed in SEEDS:
        searcher = make_searcher(
            algorithm, problem.space, problem.objectives, seed=seed, budget=BUDGET, **settings
        )
        drive(searcher, problem, parallel=4)
        assert len(searcher.observations) == BUDGET
        bests.append(searcher.best().value)
    return statistics.median(bests)


@pytest.mark.parametrize("problem", list(PROBLEMS))
@pytest.mark.parametrize("contender", list(CONTENDERS))
def test_beats_random_search(problem: str, contender: str) -> None:
    random_median = median_best(problem, "random", {})
    algorithm, settings = CONTENDERS[contender]
    assert median_best(problem, algorithm, settings) < random_median
