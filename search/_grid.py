"""Grid search: every combination of a few points per parameter."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Any

from nestor.search._base import Observation, Searcher, Trial
from nestor.search._registry import register
from nestor.search._settings import SearchSettings, setting
from nestor.search.space import CategoricalParam, FloatParam, IntParam, Param, Scalar, SearchSpace

_MAX_SHUFFLED = 1_000_000


def grid_values(param: Param, points: int) -> list[Scalar]:
    """The grid of one parameter: ``points`` evenly spaced values (geometrically
    for ``log``), ``min(points, high - low + 1)`` distinct integers for an int,
    every value of a categorical, the value of a constant."""
    if isinstance(param, FloatParam):
        if param.log:
            lo, hi = math.log(param.low), math.log(param.high)
            values = [math.exp(lo + (hi - lo) * i / (points - 1)) for i in range(points)]
        else:
            values = [
                param.low + (param.high - param.low) * i / (points - 1) for i in range(points)
            ]
        values[0], values[-1] = param.low, param.high  # exact ends despite rounding
        return [min(max(v, param.low), param.high) for v in values]
    if isinstance(param, IntParam):
        k = min(points, param.high - param.low + 1)
        if param.log:
            lo, hi = math.log(param.low), math.log(param.high)
            raw = [math.exp(lo + (hi - lo) * i / (k - 1)) for i in range(k)]
        else:
            raw = [param.low + (param.high - param.low) * i / (k - 1) for i in range(k)]
        values: list[Scalar] = []
        for i, x in enumerate(raw):
            # Distinct even where rounding a log grid collides: at least one step up
            # from the previous point, and room left for the points still to come.
            v = max(round(x), values[-1] + 1 if values else param.low)  # type: ignore[operator]
            values.append(min(v, param.high - (k - 1 - i)))
        return values
    if isinstance(param, CategoricalParam):
        return list(param.values)
    return [param.value]


@dataclass(frozen=True)
class GridSettings(SearchSettings):
    points: int | dict[str, int] = setting(
        3, "grid points per numeric parameter, or per parameter by name")

    def check(self) -> None:
        counts = self.points.values() if isinstance(self.points, dict) else [self.points]
        for count in counts:
            if not isinstance(count, int) or isinstance(count, bool) or count < 2:
                raise ValueError(f"points must be at least 2, but got {count!r}")


@register
class GridSearch(Searcher):
    """Every combination of per-parameter grids, in a seeded random order.

    ``points`` is the number of grid points for each numeric parameter (an int),
    or a mapping from parameter name to count (others get 3). The order is
    shuffled so that a ``budget`` smaller than the grid samples all of it
    rather than only varying the last parameter.
    """

    algorithm = "grid"

    Settings = GridSettings

    def __init__(self, space: SearchSpace, objectives: Any, **settings: Any) -> None:
        s = self.Settings(**settings)
        seed, budget, points = s.seed, s.budget, s.points
        super().__init__(space, objectives, seed=seed, budget=budget)
        numeric = [p.name for p in space.searched if isinstance(p, FloatParam | IntParam)]
        if isinstance(points, dict):
            unknown = sorted(set(points) - set(numeric))
            if unknown:
                raise ValueError(
                    f"points must name numeric parameters ({', '.join(numeric) or 'none'}),"
                    f" but got {unknown}"
                )
        self._settings["points"] = points
        self._axes = [
            (p.name, grid_values(p, points.get(p.name, 3) if isinstance(points, dict) else points))
            for p in space.searched
        ]
        self.size = math.prod(len(values) for _, values in self._axes)
        self._valid: list[dict[str, Scalar]] | None = None
        if space.conditions or space.constraints:
            self._valid = self._valid_points()
            self.size = len(self._valid)
        planned = min(self.size, self.budget) if self.budget is not None else self.size
        if planned > _MAX_SHUFFLED:
            raise ValueError(
                f"budget must be at most {_MAX_SHUFFLED} for a grid, but the grid has"
                f" {self.size} points and the budget is {budget}"
            )
        self._planned = planned
        # random.sample over a range draws without building the whole grid.
        self._order = random.Random(seed).sample(range(self.size), planned)

    @property
    def planned(self) -> int:
        return self._planned

    def _valid_points(self) -> list[dict[str, Scalar]]:
        """A conditional or constrained space's grid: every point projected (an
        inactive parameter's grid values all give the same configuration, kept once)
        and only those that meet the constraints, in grid order."""
        if self.size > _MAX_SHUFFLED:
            raise ValueError(
                f"a conditional or constrained grid must have at most {_MAX_SHUFFLED}"
                f" points before conditions and constraints apply, but it has {self.size}:"
                " lower points")
        seen: set[tuple[tuple[str, Scalar], ...]] = set()
        valid = []
        constants = self.space.constants()
        for index in range(self.size):
            config = self._product_point(index)
            projected = self.space.project({**config, **constants})
            key = tuple((k, type(v).__name__, v) for k, v in projected.items())
            if key in seen or not self.space.satisfies(projected):
                continue
            seen.add(key)  # type: ignore[arg-type]
            valid.append({k: v for k, v in projected.items() if k not in constants})
        if not valid:
            rules = "; ".join(c.text for c in self.space.constraints)
            raise ValueError(f"no grid point meets the constraints ({rules}): loosen them"
                             " or change the grid's points")
        return valid

    def point(self, index: int) -> dict[str, Scalar]:
        """The grid point at ``index`` (mixed radix, first parameter slowest; in a
        conditional or constrained space, the index-th valid point)."""
        if self._valid is not None:
            return dict(self._valid[index])
        return self._product_point(index)

    def _product_point(self, index: int) -> dict[str, Scalar]:
        config: dict[str, Scalar] = {}
        for name, values in reversed(self._axes):
            index, digit = divmod(index, len(values))
            config[name] = values[digit]
        return {name: config[name] for name, _ in self._axes}

    def _ask(self, n: int) -> list[Trial]:
        start = self.n_asked
        return [
            self._new_trial(self.point(i), origin="grid") for i in self._order[start : start + n]
        ]

    def _tell(self, trial: Trial, observation: Observation) -> None:
        pass
