"""Random search: the baseline every other algorithm must beat at equal budget."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from nestor.search._base import Observation, Searcher, Trial
from nestor.search._registry import register
from nestor.search._sampling import sample_config
from nestor.search._settings import SearchSettings, budget_setting
from nestor.search.space import SearchSpace


@dataclass(frozen=True)
class RandomSettings(SearchSettings):
    budget: int | dict[str, float] | None = budget_setting(20)


@register
class RandomSearch(Searcher):
    """Independent draws from the space (log-uniform for ``log`` parameters).

    Warm start asks the previous run's best configurations first (up to a
    quarter of the budget; they are re-run, as the old results may come from
    other data), then draws at random.

    >>> from nestor.search.space import FloatParam, SearchSpace
    >>> s = RandomSearch(SearchSpace([FloatParam("x", 0.0, 1.0)]), [("loss", "min")], budget=3)
    >>> len(s.ask(5))
    3
    """

    algorithm = "random"

    Settings = RandomSettings

    def __init__(self, space: SearchSpace, objectives: Any, **settings: Any) -> None:
        s = self.Settings(**settings)
        super().__init__(space, objectives, seed=s.seed, budget=s.budget)
        self._rng = random.Random(s.seed)
        self._seeds: list[dict[str, Any]] = []

    @property
    def planned(self) -> int:
        return self.budget if self.budget is not None else 20

    def _ask(self, n: int) -> list[Trial]:
        trials = []
        for _ in range(n):
            if self._seeds:
                trials.append(self._new_trial(self._seeds.pop(0), origin="warm-start"))
            else:
                trials.append(self._new_trial(sample_config(self.space, self._rng)))
        return trials

    def _tell(self, trial: Trial, observation: Observation) -> None:
        pass  # random search learns nothing

    def _warm_start(self, observations: list[Observation]) -> None:
        good = [o for o in observations if o.values is not None]
        good.sort(key=lambda o: self._key(o.values))  # type: ignore[arg-type]
        self._seeds = [dict(o.config) for o in good[: max(1, self.planned // 4)]]
