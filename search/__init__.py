"""Search spaces and ask/tell search algorithms.

Pure decision logic: no Ray, Horovod, MLflow or torch import here, so the
orchestrator can drive it from anywhere and tests run in milliseconds.
Optuna is imported only when a Bayesian search is built.

>>> from search import Objective, make_searcher
>>> from search.space import FloatParam, SearchSpace
>>> space = SearchSpace([FloatParam("x", -1.0, 1.0)])
>>> searcher = make_searcher("random", space, [Objective("loss", "min")], seed=0, budget=4)
>>> while not searcher.done():
...     for trial in searcher.ask(2):
...         _ = searcher.tell(trial.id, trial.config["x"] ** 2)
>>> len(searcher.observations)
4
"""

from __future__ import annotations

from typing import Any

from search._base import (
    Failure,
    Objective,
    Observation,
    Searcher,
    Trial,
    as_objectives,
    observations_from_state,
)
from search._bayesian import BayesianSearch
from search._genetic import GeneticSearch
from search._grid import GridSearch
from search._random import RandomSearch
from search.space import SearchSpace

ALGORITHMS: dict[str, type[Searcher]] = {
    "genetic": GeneticSearch,
    "bayesian": BayesianSearch,
    "random": RandomSearch,
    "grid": GridSearch,
}


def make_searcher(algorithm: str, space: SearchSpace, objectives: Any, **settings: Any) -> Searcher:
    """Build a searcher by name with the spec's settings as keyword arguments.

    ``make_searcher(spec.search.algorithm, space, objectives,
    **spec.search.model_dump(exclude={"algorithm"}))``
    """
    if algorithm not in ALGORITHMS:
        raise ValueError(f"algorithm must be one of {', '.join(ALGORITHMS)}, but got {algorithm!r}")
    return ALGORITHMS[algorithm](space, objectives, **settings)


__all__ = [
    "ALGORITHMS",
    "BayesianSearch",
    "Failure",
    "GeneticSearch",
    "GridSearch",
    "Objective",
    "Observation",
    "RandomSearch",
    "Searcher",
    "Trial",
    "as_objectives",
    "make_searcher",
    "observations_from_state",
]
