"""Dev multi-fidelity problems: where cheap results rank configurations faithfully,
and where they mislead (issue 41).

The held-out suites (``bench/multifidelity_heldout_bench.py``, and one kept apart
from the project) judge nestor's multi-fidelity searches from outside; no dev
bench covered the same ground, so a change that hurt ASHA-TPE where low
fidelities mislead (1ca821a) went unnoticed until the outside suite ran. These
problems are nestor's own, fixed and committed before any search ran on them,
for checking such changes during development. As in the held-out bench, a
configuration x trained t epochs (1 to 100) has the expected loss

    L(x, t) = floor(x) + (3 - floor(x)) * exp(-t / tau(x))

and reports L plus Gaussian noise of ``noise / sqrt(t)``; a trial costs the
epochs it trains (a promotion only its span), so the cost grows with the
fidelity as a learning curve's does.

- ``faithful-ellipsoid-3d``, ``faithful-valley-5d``: tau is the same for every
  configuration, so at any t the expected losses rank configurations as their
  floors do (only the noise, larger at small t, reorders them).
- ``misleading-capacity-6d``: x0 is a model's capacity: more capacity reaches a
  lower floor (best at x0 = 0.85) but learns more slowly, so short trainings
  favour small models.
- ``misleading-decoy-8d``: two basins; the optimum's learns slowly (tau 50), a
  decoy 0.4 worse learns fast (tau 5), so up to about 30 epochs the decoy's
  configurations rank first.

:func:`rank_correlation` measures how faithfully a fidelity ranks configurations
(Spearman's rho of the expected loss at t against the floor, 400 random
configurations) and :func:`pick_regret` what trusting it costs (the floor of the
configuration that looks best at t, above the best floor among them: the
decoy's basin is small, so it misleads the pick while most configurations, far
from both basins, still rank as they should);
``tests/bench/test_multifidelity_dev_bench.py`` checks that the
faithful problems are faithful and the misleading ones mislead, without running
a search. The searches, the budget (30 full trainings = 3,000 epochs, 4 slots
asynchronously on a virtual clock) and the regret at 25, 50 and 100 % of the
budget are the held-out bench's (its ``run`` and ``main``):

    .venv/bin/python bench/multifidelity_dev_bench.py            # 3 seeds
    .venv/bin/python bench/multifidelity_dev_bench.py --seeds 1 --only auto asha "asha tpe"

It writes bench/results/multifidelity_dev.json.
"""

from __future__ import annotations

import math
import random
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.multifidelity_heldout_bench import UNTRAINED, Problem, main
from nestor.search._sampling import sample_config
from nestor.search.space import FloatParam, SearchSpace


def _unit(dims: int) -> SearchSpace:
    return SearchSpace(tuple(FloatParam(f"x{i}", 0.0, 1.0) for i in range(dims)))


def _x(config: dict[str, Any], dims: int) -> list[float]:
    return [float(config[f"x{i}"]) for i in range(dims)]


def _ellipsoid(config: dict[str, Any]) -> float:
    x = _x(config, 3)
    return 4 * (x[0] - 0.3) ** 2 + 2 * (x[1] - 0.6) ** 2 + (x[2] - 0.45) ** 2


def _valley(config: dict[str, Any]) -> float:
    """Rosenbrock's valley on 1.5 x (optimum at x = 2/3), scaled to about [0, 3]."""
    x = [1.5 * v for v in _x(config, 5)]
    return sum(0.1 * (x[i + 1] - x[i] ** 2) ** 2 + 0.1 * (1 - x[i]) ** 2 for i in range(4))


def _capacity(config: dict[str, Any]) -> float:
    x = _x(config, 6)
    return 2 * (x[0] - 0.85) ** 2 + sum((x[i] - 0.2 - 0.1 * i) ** 2 for i in range(1, 6))


DECOY_OPTIMUM = (0.25, 0.7, 0.4, 0.55, 0.3, 0.65, 0.5, 0.35)
DECOY = (0.8, 0.2, 0.85, 0.15, 0.75, 0.25, 0.9, 0.7)


def _decoy_distances(config: dict[str, Any]) -> tuple[float, float]:
    x = _x(config, 8)
    a = sum((v - c) ** 2 for v, c in zip(x, DECOY_OPTIMUM, strict=True)) / 2
    b = 0.4 + sum((v - c) ** 2 for v, c in zip(x, DECOY, strict=True)) / 2
    return a, b


def _decoy_tau(config: dict[str, Any]) -> float:
    a, b = _decoy_distances(config)
    return 50.0 if a < b else 5.0


PROBLEMS: tuple[Problem, ...] = (
    Problem("faithful-ellipsoid-3d", _unit(3), _ellipsoid, lambda c: 15.0, 0.2),
    Problem("faithful-valley-5d", _unit(5), _valley, lambda c: 25.0, 0.3),
    Problem("misleading-capacity-6d", _unit(6), _capacity,
            lambda c: 3.0 + 45.0 * float(c["x0"]) ** 2, 0.2),
    Problem("misleading-decoy-8d", _unit(8), lambda c: min(_decoy_distances(c)), _decoy_tau,
            0.2),
)  # fmt: skip
FAITHFUL = tuple(p for p in PROBLEMS if p.name.startswith("faithful"))
MISLEADING = tuple(p for p in PROBLEMS if p.name.startswith("misleading"))


def expected_loss(problem: Problem, config: dict[str, Any], epochs: float) -> float:
    floor = problem.floor(config)
    return floor + (UNTRAINED - floor) * math.exp(-epochs / problem.tau(config))


def _ranks(values: list[float]) -> list[float]:
    order = sorted(range(len(values)), key=values.__getitem__)
    ranks = [0.0] * len(values)
    for rank, index in enumerate(order):
        ranks[index] = float(rank)
    return ranks


def rank_correlation(problem: Problem, epochs: float, samples: int = 400) -> float:
    """Spearman's rho between the expected loss after ``epochs`` and the floor, over
    ``samples`` random configurations: 1 where that fidelity ranks as the full one."""
    rng = random.Random(0)
    configs = [sample_config(problem.space, rng) for _ in range(samples)]
    low = _ranks([expected_loss(problem, c, epochs) for c in configs])
    top = _ranks([problem.floor(c) for c in configs])
    mean = (samples - 1) / 2
    cov = sum((a - mean) * (b - mean) for a, b in zip(low, top, strict=True))
    var = sum((a - mean) ** 2 for a in low)
    return cov / var


def pick_regret(problem: Problem, epochs: float, samples: int = 400) -> float:
    """How much worse (in floor) the configuration that looks best after ``epochs`` is
    than the best of ``samples`` random ones: 0 where that fidelity picks right."""
    rng = random.Random(0)
    configs = [sample_config(problem.space, rng) for _ in range(samples)]
    pick = min(configs, key=lambda c: expected_loss(problem, c, epochs))
    return problem.floor(pick) - min(problem.floor(c) for c in configs)


if __name__ == "__main__":
    main(problems=PROBLEMS, out="multifidelity_dev", doc=__doc__)
