"""A genetic search's genome: one float gene per searched parameter, and DEAP's RNG.

The genome is explicit: one float gene per searched parameter, in the space
the parameter varies in (log of the value for ``log`` parameters, the index of
the value for categoricals).

Randomness: DEAP's operators call the *module* ``random``. Seeding that global
would make two searchers in one process (or a test running beside the
orchestrator) disturb each other. Instead, DEAP's tool modules are given a
stand-in for ``random`` that forwards to the RNG of whichever searcher is
running an operator at that moment (a context variable, so threads and async
tasks each see their own), and to the real module otherwise. So each searcher
owns a seeded ``random.Random`` and DEAP's operators are used as published.

Why apart from the algorithm: the encoding and the RNG's plumbing are what every
part of the search (variation, the steady state, snapshots) works on, and none
of them is the generational algorithm.
"""

from __future__ import annotations

import contextlib
import importlib
import math
import random
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from deap import base

from nestor.search.space import CategoricalParam, FloatParam, IntParam, Param, Scalar

_current_rng: ContextVar[Any] = ContextVar("nestor_deap_rng", default=random)


class _RandomForwarder:
    """Stands in for the ``random`` module inside DEAP's tool modules."""

    def __getattr__(self, name: str) -> Any:
        return getattr(_current_rng.get(), name)


for _module in ("crossover", "mutation", "selection", "emo", "migration"):
    _deap_module = importlib.import_module(f"deap.tools.{_module}")
    if hasattr(_deap_module, "random"):
        _deap_module.random = _RandomForwarder()  # type: ignore[attr-defined]


@contextlib.contextmanager
def using(rng: random.Random) -> Iterator[None]:
    token = _current_rng.set(rng)
    try:
        yield
    finally:
        _current_rng.reset(token)


@dataclass(frozen=True)
class Gene:
    """How one parameter is encoded: a float in [low, high] of its search space."""

    param: Param
    low: float
    high: float

    @classmethod
    def of(cls, param: Param) -> Gene:
        if isinstance(param, CategoricalParam):
            return cls(param, 0.0, float(len(param.values) - 1))
        assert isinstance(param, FloatParam | IntParam)
        if param.log:
            return cls(param, math.log(param.low), math.log(param.high))
        return cls(param, float(param.low), float(param.high))

    @property
    def categorical(self) -> bool:
        return isinstance(self.param, CategoricalParam)

    def encode(self, value: Scalar) -> float:
        param = self.param
        if isinstance(param, CategoricalParam):
            return float(
                next(i for i, v in enumerate(param.values) if type(v) is type(value) and v == value)
            )
        return math.log(value) if param.log else float(value)  # type: ignore[union-attr,arg-type]

    def decode(self, gene: float) -> Scalar:
        param = self.param
        gene = min(max(gene, self.low), self.high)
        if isinstance(param, CategoricalParam):
            return param.values[round(gene)]
        value = math.exp(gene) if param.log else gene  # type: ignore[union-attr]
        if isinstance(param, IntParam):
            return min(max(round(value), param.low), param.high)
        assert isinstance(param, FloatParam)
        return min(max(value, param.low), param.high)

    def snap(self, gene: float) -> float:
        """The gene of the value it decodes to (integers and categoricals are exact)."""
        if isinstance(self.param, FloatParam):
            return min(max(gene, self.low), self.high)
        return self.encode(self.decode(gene))


class Individual(list):
    """A genome (a list of genes, as DEAP's operators expect) and its bookkeeping."""

    fitness: base.Fitness
    trial_id: str | None
    deme: int
    parents: tuple[str, ...]
    origin: str
    failed: bool
    target: Individual | None = None  # a DE child's target (crossover "de")
    de: tuple[float, float] | None = None  # ...and the F and CR it was bred with
    decoded: tuple[tuple[float, ...], dict[str, Scalar]] | None = None  # genes, their config


def interleave(groups: list[list[Individual]]) -> list[Individual]:
    """Round-robin over demes, so a partial ask serves every deme."""
    result: list[Individual] = []
    for i in range(max((len(g) for g in groups), default=0)):
        result.extend(g[i] for g in groups if i < len(g))
    return result
