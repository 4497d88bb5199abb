"""Analytic test problems with known optima, for tests and ``bench/search_bench.py``.

They cost microseconds, so algorithms can be compared over many seeds at the
budgets real searches have (tens to hundreds of trials). All are minimized.

>>> PROBLEMS["branin"].function({"x1": math.pi, "x2": 2.275})  # doctest: +ELLIPSIS
0.39788...
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from nestor.search._base import Objective
from nestor.search.space import FloatParam, SearchSpace


@dataclass(frozen=True)
class Problem:
    """A function to minimize over ``space``; ``threshold`` marks "good enough"."""

    name: str
    space: SearchSpace
    function: Callable[[Mapping[str, Any]], float]
    optimum: float
    threshold: float

    def __call__(self, config: Mapping[str, Any]) -> float:
        return self.function(config)

    @property
    def objectives(self) -> list[Objective]:
        return [Objective(self.name, "min")]


def _box(prefix: str, dims: int, low: float, high: float) -> SearchSpace:
    return SearchSpace(tuple(FloatParam(f"{prefix}{i}", low, high) for i in range(dims)))


def sphere(config: Mapping[str, Any]) -> float:
    return sum(v * v for v in config.values())


def rastrigin(config: Mapping[str, Any]) -> float:
    return sum(10 + v * v - 10 * math.cos(2 * math.pi * v) for v in config.values())


def branin(config: Mapping[str, Any]) -> float:
    x1, x2 = config["x1"], config["x2"]
    b, c, t = 5.1 / (4 * math.pi**2), 5 / math.pi, 1 / (8 * math.pi)
    return (x2 - b * x1 * x1 + c * x1 - 6) ** 2 + 10 * (1 - t) * math.cos(x1) + 10


_XS = [-math.pi + 2 * math.pi * i / 64 for i in range(65)]
_SIN = [math.sin(x) for x in _XS]


def polyfit_sin(config: Mapping[str, Any]) -> float:
    """Mean squared error of sum(c_k (x/pi)^k, k=0..6) against sin(x) on [-pi, pi].

    The coefficients multiply powers of x/pi (in [-1, 1]) so that all seven
    matter on one scale; the least-squares fit has error 2.2e-5.
    """
    coefficients = [config[f"c{k}"] for k in range(7)]
    total = 0.0
    for x, y in zip(_XS, _SIN, strict=True):
        t, p, power = x / math.pi, 0.0, 1.0
        for c in coefficients:
            p += c * power
            power *= t
        total += (p - y) ** 2
    return total / len(_XS)


PROBLEMS: dict[str, Problem] = {
    "sphere": Problem("sphere", _box("x", 4, -5.12, 5.12), sphere, 0.0, 0.5),
    "rastrigin": Problem("rastrigin", _box("x", 4, -5.12, 5.12), rastrigin, 0.0, 10.0),
    "branin": Problem(
        "branin",
        SearchSpace((FloatParam("x1", -5.0, 10.0), FloatParam("x2", 0.0, 15.0))),
        branin,
        0.397887,
        0.45,
    ),
    "polyfit_sin": Problem("polyfit_sin", _box("c", 7, -6.0, 6.0), polyfit_sin, 2.19e-5, 0.3),
}
