"""Many trials at once (issue 29 item 5): what ``auto`` picks at 16+ pending must
search well there. Each claim runs the search on a virtual clock: ``width`` slots,
a trial takes a time drawn from its seed, a freed slot asks at once."""

from __future__ import annotations

import heapq
import math
import random
import statistics
from typing import Any

from nestor.search import Objective, make_searcher
from nestor.search._genetic import GeneticSearch
from nestor.search._genetic_step import DEControl
from nestor.search.space import FloatParam, SearchSpace

MIN = [Objective("y", "min")]
BOX6 = SearchSpace(tuple(FloatParam(f"x{i}", -4.0, 4.0) for i in range(6)))


def ellipsoid(config: dict[str, Any]) -> float:
    """A shifted ellipsoid, condition 100, with a coupling term (none of the bench's)."""
    x = [float(config[f"x{i}"]) - 0.6 for i in range(6)]
    return sum(10 ** (2 * i / 5) * v * v for i, v in enumerate(x)) + 3 * x[0] * x[1]


def drive(searcher: Any, width: int, trials: int, seed: int) -> float:
    """The best value after ``trials`` results, ``width`` pending at once."""
    rng = random.Random(seed)
    clock, asked, best, order = 0.0, 0, math.inf, 0
    running: list[tuple[float, int, Any]] = []
    while asked < trials or running:
        free = min(width - len(running), trials - asked)
        for trial in searcher.ask(free) if free > 0 else []:
            order += 1
            heapq.heappush(running, (clock + rng.uniform(0.5, 2.0), order, trial))
            asked += 1
        clock, _, trial = heapq.heappop(running)
        value = ellipsoid(trial.config)
        best = min(best, value)
        searcher.tell(trial.id, value)
    return best


def test_auto_at_64_at_once_beats_a_population_of_the_width() -> None:
    """auto's pick at 64 at once (a population of 16: the best 16 of all results breed)
    ends below the population of 64 in 4 demes it picked before, over 3 seeds; 6 rounds
    leave a population of the width 6 generations."""
    width, trials = 64, 6 * 64
    new = [drive(make_searcher("auto", BOX6, MIN, seed=s, budget=trials, parallel=width),
                 width, trials, s) for s in range(3)]  # fmt: skip
    old = [drive(GeneticSearch(BOX6, MIN, seed=s, budget=trials, population=width, demes=4,
                               schedule="async"), width, trials, s) for s in range(3)]
    assert statistics.median(new) < 0.5 * statistics.median(old), (new, old)


def test_differential_evolution_beats_blend_at_256_at_once() -> None:
    """crossover "de" (JADE's current-to-pbest/1/bin, auto's from 256 at once) ends
    below blend crossover with the adapted Gaussian step, same population, 3 seeds."""
    width, trials = 256, 6 * 256
    def run(crossover: str, seed: int) -> float:
        return drive(GeneticSearch(BOX6, MIN, seed=seed, budget=trials, population=16,
                                   schedule="async", crossover=crossover), width, trials, seed)
    de = [run("de", s) for s in range(3)]
    blend = [run("blend", s) for s in range(3)]
    assert statistics.median(de) < statistics.median(blend), (de, blend)


def test_jade_adapts_f_and_cr_towards_the_successful_children() -> None:
    """mu_F moves a tenth of the way to the Lehmer mean of the winners' F, mu_CR to the
    mean of their CR; a child worse than its target leaves no trace."""
    control = DEControl()

    class Fit:
        def __init__(self, v: float) -> None:
            self.v, self.valid = v, True

        def __lt__(self, other: Fit) -> bool:  # DEAP: "<" is "worse" (maximized weights)
            return self.v > other.v

    class Ind:
        def __init__(self, v: float, target: Any = None, de: Any = None) -> None:
            self.fitness, self.target, self.de, self.failed = Fit(v), target, de, False

    target = Ind(1.0)
    control.score(Ind(0.5, target, (0.9, 0.8)))  # better: kept
    control.score(Ind(0.2, target, (0.6, 0.2)))  # better: kept
    control.score(Ind(2.0, target, (0.1, 0.1)))  # worse: not kept
    control.adapt()
    lehmer = (0.81 + 0.36) / (0.9 + 0.6)
    assert math.isclose(control.mu_f, 0.9 * 0.5 + 0.1 * lehmer)
    assert math.isclose(control.mu_cr, 0.9 * 0.5 + 0.1 * 0.5)
    control.adapt()  # nothing told since: unchanged
    assert math.isclose(control.mu_f, 0.9 * 0.5 + 0.1 * lehmer)
