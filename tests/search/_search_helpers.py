"""Shared pieces of the search tests: spaces, factories, a driver loop."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from nestor.search import (
    ALGORITHMS,
    ASHASearch,
    BayesianSearch,
    Failure,
    GeneticSearch,
    GridSearch,
    HyperbandSearch,
    LQCMAESSearch,
    Objective,
    PBTSearch,
    RandomSearch,
    Searcher,
    make_searcher,
    one_objective_only,
)
from nestor.search.space import (
    CategoricalParam,
    ConstantParam,
    FloatParam,
    IntParam,
    SearchSpace,
)

MIXED = SearchSpace(
    (
        FloatParam("lr", 1e-4, 0.3, log=True),
        FloatParam("momentum", 0.0, 0.99),
        IntParam("layers", 1, 6),
        IntParam("batch", 8, 512, log=True),
        CategoricalParam("act", ("relu", "tanh", 1, True)),
        ConstantParam("epochs", 3),
    )
)

MIN = [Objective("loss", "min")]


def loss(config: dict[str, Any]) -> float:
    """A cheap function of every parameter type, minimized near lr=0.01, 3 layers, relu."""
    return (
        (math.log10(config["lr"]) + 2) ** 2
        + (config["momentum"] - 0.9) ** 2
        + 0.1 * (config["layers"] - 3) ** 2
        + 0.01 * abs(math.log2(config["batch"]) - 6)
        + (0.0 if config["act"] == "relu" else 0.5)
    )


def numeric_view(space: SearchSpace) -> SearchSpace:
    """``space`` with each categorical fixed at its first value: what a search of
    numbers only (lq-cmaes) can take of MIXED, its trials still members of MIXED."""
    return SearchSpace(tuple(
        ConstantParam(p.name, p.values[0]) if isinstance(p, CategoricalParam) else p
        for p in space.params
    ))


# Small settings so a whole search takes milliseconds (seconds for GP).
FACTORIES: dict[str, Callable[..., Searcher]] = {
    "random": lambda space, obj, **kw: RandomSearch(space, obj, budget=12, **kw),
    "grid": lambda space, obj, **kw: GridSearch(space, obj, budget=12, points=2, **kw),
    "genetic": lambda space, obj, **kw: GeneticSearch(
        space, obj, population=4, generations=3, **kw
    ),
    "genetic-mu+lambda": lambda space, obj, **kw: GeneticSearch(
        space,
        obj,
        population=4,
        generations=4,
        mode="mu_plus_lambda",
        offspring=2,
        crossover="sbx",
        **kw,
    ),
    "genetic-async": lambda space, obj, **kw: GeneticSearch(
        space, obj, population=4, generations=3, schedule="async", **kw
    ),
    "genetic-demes": lambda space, obj, **kw: GeneticSearch(
        space, obj, population=6, generations=3, demes=2, migration_interval=1, **kw
    ),
    "tpe": lambda space, obj, **kw: BayesianSearch(space, obj, budget=10, startup_trials=3, **kw),
    "cmaes": lambda space, obj, **kw: BayesianSearch(
        space, obj, budget=10, startup_trials=2, sampler="cmaes", **kw
    ),
    "lq-cmaes": lambda space, obj, **kw: LQCMAESSearch(numeric_view(space), obj, budget=14, **kw),
    "gp": lambda space, obj, **kw: BayesianSearch(
        space, obj, budget=6, startup_trials=3, sampler="gp", **kw
    ),
    "pbt": lambda space, obj, **kw: PBTSearch(space, obj, population=4, intervals=3, **kw),
    "pb2": lambda space, obj, **kw: PBTSearch(
        space, obj, population=4, intervals=5, explore="pb2", **kw
    ),
    "asha": lambda space, obj, **kw: ASHASearch(space, obj, budget=14, max_budget=9, **kw),
    "asha-tpe": lambda space, obj, **kw: ASHASearch(
        space, obj, budget=14, max_budget=9, sampler="tpe", startup_trials=3, **kw
    ),
    "hyperband": lambda space, obj, **kw: HyperbandSearch(space, obj, max_budget=9, **kw),
    "bohb": lambda space, obj, **kw: HyperbandSearch(
        space, obj, max_budget=9, sampler="tpe", startup_trials=3, **kw
    ),
}
# PBT and successive halving rank trials on one metric to decide which continue.
ONE_OBJECTIVE_ONLY = {"cmaes", "lq-cmaes", "pbt", "pb2", "asha", "asha-tpe", "hyperband", "bohb"}


def _registered(name: str) -> Callable[..., Searcher]:
    return lambda space, obj, **kw: make_searcher(name, space, obj, budget=12, **kw)


# Every registered algorithm goes through the contract tests: those above with small
# settings of their own, any other (a new one: search/_registry.py) with its defaults and
# a budget of 12, so a new algorithm's tests need no edit here.
_covered = {factory(MIXED, MIN).algorithm for factory in FACTORIES.values()}
for _name in ALGORITHMS:
    if _name not in _covered:
        FACTORIES[_name] = _registered(_name)
        if one_objective_only(_name, {}) is not None:
            ONE_OBJECTIVE_ONLY.add(_name)
MULTI_OBJECTIVE = [name for name in FACTORIES if name not in ONE_OBJECTIVE_ONLY]


def drive(
    searcher: Searcher,
    function: Callable[[dict[str, Any]], Any] = loss,
    parallel: int = 3,
    fail: Callable[[int], bool] = lambda i: False,
    steps: int | None = None,
) -> list:
    """Run a search on ``parallel`` slots, results oldest first; returns all trials.

    ``fail(i)`` makes the i-th result a Failure; ``steps`` stops after that many tells.
    """
    running: list = []
    asked: list = []
    told = 0
    while not searcher.done() and (steps is None or told < steps):
        new = searcher.ask(parallel - len(running)) if len(running) < parallel else []
        running += new
        asked += new
        if not running:
            break
        trial = running.pop(0)
        result = Failure("injected") if fail(told) else function(trial.config)
        searcher.tell(trial.id, result)
        told += 1
    return asked
