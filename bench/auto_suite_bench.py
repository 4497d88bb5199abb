"""The numeric choices ``algorithm: auto`` weighs, on problems other than sine-fit.

``search/_auto.py`` picks lq-CMA-ES for a few numbers at up to 4 trials at
once; this is the evidence beyond sine-fit (``bench/auto_bench.py``): shifted
sphere, ellipsoid (conditioning 1e6), Rosenbrock, Rastrigin and Ackley in 4-5-D,
Branin, two of them with noise, and an HPO-like noisy validation loss over
lr, weight decay, momentum and batch size (log-scaled, an integer, a
divergence cliff). Each cell: the median [lower, upper quartile] over seeds of
the *noise-free* value at the trial the search itself reports as best (lower
is better), trials ``--parallel`` at once, results oldest first.

    .venv/bin/python bench/auto_suite_bench.py --budget 130 --parallel 2
    .venv/bin/python bench/auto_suite_bench.py --budget 100 --parallel 8 --seeds 10
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
from collections.abc import Callable, Mapping
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.search_bench import run
from nestor.search import make_searcher
from nestor.search.space import FloatParam, IntParam, SearchSpace

SHIFT = (0.37, -1.21, 2.05, -0.66, 1.48)


def _box(dims: int, low: float, high: float) -> SearchSpace:
    return SearchSpace(tuple(FloatParam(f"x{i}", low, high) for i in range(dims)))


def _xs(config: Mapping[str, Any]) -> list[float]:
    return [config[f"x{i}"] for i in range(len(config))]


def sphere(c: Mapping[str, Any]) -> float:
    return sum((v - s) ** 2 for v, s in zip(_xs(c), SHIFT, strict=False))


def ellipsoid(c: Mapping[str, Any]) -> float:
    v = _xs(c)
    return sum(10 ** (6 * i / (len(v) - 1)) * (x - s) ** 2
               for i, (x, s) in enumerate(zip(v, SHIFT, strict=False)))  # fmt: skip


def rosenbrock(c: Mapping[str, Any]) -> float:
    v = _xs(c)
    return sum(100 * (v[i + 1] - v[i] ** 2) ** 2 + (1 - v[i]) ** 2 for i in range(len(v) - 1))


def rastrigin(c: Mapping[str, Any]) -> float:
    return sum(10 + (v - s) ** 2 - 10 * math.cos(2 * math.pi * (v - s))
               for v, s in zip(_xs(c), SHIFT, strict=False))  # fmt: skip


def ackley(c: Mapping[str, Any]) -> float:
    v = [x - s for x, s in zip(_xs(c), SHIFT, strict=False)]
    n = len(v)
    return (-20 * math.exp(-0.2 * math.sqrt(sum(x * x for x in v) / n))
            - math.exp(sum(math.cos(2 * math.pi * x) for x in v) / n) + 20 + math.e)  # fmt: skip


def branin(c: Mapping[str, Any]) -> float:
    x1, x2 = c["x0"], c["x1"]
    b, cc, t = 5.1 / (4 * math.pi**2), 5 / math.pi, 1 / (8 * math.pi)
    return (x2 - b * x1 * x1 + cc * x1 - 6) ** 2 + 10 * (1 - t) * math.cos(x1) + 10


def hpo_loss(c: Mapping[str, Any]) -> float:
    """A validation loss: best at an effective step lr * 1/(1-momentum) / sqrt(batch/64)
    of about 10^-1.5, mild in weight decay, and diverged (2.3) past a cliff."""
    lr, wd, momentum, batch = math.log10(c["x0"]), math.log10(c["x1"]), c["x2"], c["x3"]
    step = lr + 0.5 * math.log10(1 / (1 - momentum + 1e-3)) - 0.5 * math.log10(batch / 64)
    if step > 0.3:
        return 2.3
    return 0.05 + 0.3 * min((step + 1.5) ** 2, 4) + 0.05 * (wd + 4) ** 2 / 4


HPO_SPACE = SearchSpace((FloatParam("x0", 1e-5, 1.0, log=True),
                         FloatParam("x1", 1e-6, 1e-1, log=True), FloatParam("x2", 0.0, 0.99),
                         IntParam("x3", 16, 512, log=True)))  # fmt: skip


class Noisy:
    """``function`` plus Gaussian noise of ``sd``, the same for the same point."""

    def __init__(self, function: Callable[[Mapping[str, Any]], float], sd: float) -> None:
        self.function, self.sd = function, sd

    def __call__(self, c: Mapping[str, Any]) -> float:
        rng = random.Random(repr(sorted(c.items())))
        return self.function(c) + self.sd * rng.gauss(0, 1)


PROBLEMS: dict[str, tuple[SearchSpace, Callable[[Mapping[str, Any]], float]]] = {
    "sphere5": (_box(5, -5, 5), sphere),
    "ellipsoid5": (_box(5, -5, 5), ellipsoid),
    "rosenbrock5": (_box(5, -5, 5), rosenbrock),
    "rastrigin4": (_box(4, -5.12, 5.12), rastrigin),
    "ackley5": (_box(5, -5, 5), ackley),
    "branin": (SearchSpace((FloatParam("x0", -5, 10), FloatParam("x1", 0, 15))), branin),
    "noisy-sphere5": (_box(5, -5, 5), Noisy(sphere, 0.5)),
    "noisy-rosenbrock5": (_box(5, -5, 5), Noisy(rosenbrock, 10.0)),
    "hpo4": (HPO_SPACE, Noisy(hpo_loss, 0.02)),
}
ALGORITHMS: dict[str, tuple[str, dict[str, Any]]] = {
    "lq-cmaes": ("bayesian", {"sampler": "lq-cmaes"}),
    "cmaes": ("bayesian", {"sampler": "cmaes"}),
    "genetic-async": ("genetic", {"population": 10, "schedule": "async"}),
    "tpe": ("bayesian", {"sampler": "tpe"}),
}


def one_run(problem: str, algorithm: str, seed: int, budget: int, parallel: int) -> float:
    space, function = PROBLEMS[problem]
    name, settings = ALGORITHMS[algorithm]
    searcher = make_searcher(name, space, [("value", "min")], seed=seed, budget=budget,
                             **settings)  # fmt: skip
    run(searcher, function, parallel)
    best = searcher.best()
    clean = function.function if isinstance(function, Noisy) else function
    return clean(best.config) if best is not None else math.inf


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=int, default=130)
    parser.add_argument("--parallel", type=int, default=2)
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args(argv)
    print(f"{args.budget} trials, {args.parallel} at once, {args.seeds} seeds: median"
          " [quartiles] of the noise-free value at each search's best (lower is better)")
    print("| problem | " + " | ".join(ALGORITHMS) + " |")
    print("|---" * (len(ALGORITHMS) + 1) + "|")
    with ProcessPoolExecutor(args.jobs) as pool:
        for problem in PROBLEMS:
            cells = []
            for algorithm in ALGORITHMS:
                values = list(pool.map(one_run, *zip(*[
                    (problem, algorithm, s, args.budget, args.parallel)
                    for s in range(args.seeds)], strict=True)))  # fmt: skip
                q1, _, q3 = statistics.quantiles(values, n=4)
                cells.append(f"{statistics.median(values):.3g} [{q1:.3g}, {q3:.3g}]")
            print(f"| {problem} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
