"""lq-CMA-ES (``sampler: lq-cmaes``): the surrogate's savings, its own random
state, parallel steps, restarts, and what it refuses."""

from __future__ import annotations

import json
import math
import random
from collections import Counter

import numpy as np
import pytest
from _search_helpers import MIN, MIXED, drive

from nestor.search import LQCMAESSearch, make_searcher
from nestor.search.space import FloatParam, IntParam, SearchSpace

BOX5 = SearchSpace(tuple(FloatParam(f"x{i}", -5.0, 5.0) for i in range(5)))
SHIFT = (0.37, -1.21, 2.05, -0.66, 1.48)


def ellipsoid(config: dict) -> float:
    """Shifted, ill-conditioned (1 to 1e6) quadratic: CMA-ES needs hundreds of trials."""
    return sum(10 ** (6 * i / 4) * (config[f"x{i}"] - s) ** 2 for i, s in enumerate(SHIFT))


def noise(config: dict) -> float:
    """A value no model can predict: the search must run every candidate."""
    return random.Random(json.dumps(config, sort_keys=True)).random()


def sine_fit(config: dict) -> float:
    """The seed's sine-fit command: 7 coefficients of a polynomial against sin on [-pi, pi]."""
    error = 0.0
    for i in range(100):
        x = (i - 50) / 50 * math.pi
        error += (math.sin(x) - sum(config[f"c{k}"] * x**k for k in range(7))) ** 2
    return error


def test_the_surrogate_finds_a_quadratics_optimum_in_few_trials() -> None:
    for seed in range(3):
        searcher = make_searcher("bayesian", BOX5, MIN, seed=seed, budget=60, sampler="lq-cmaes")
        drive(searcher, ellipsoid, parallel=2)
        assert searcher.best().value < 1e-6, (seed, searcher.best().value)
        # Once the model agrees, a generation runs only the candidates it ranks best.
        sizes = Counter(t.generation for t in searcher.trials.values())
        assert min(sizes.values()) < 8 == searcher._popsize


def test_without_a_model_that_agrees_every_candidate_runs() -> None:
    """On noise no model can agree with the ranking, so generations run whole; now
    and then a chance agreement on a handful of points cuts one short. Which
    generation that hits depends on the seed and on the BLAS kernel (the fit's sums
    in another order: OPENBLAS_CORETYPE=Sandybridge cuts seed 1's 7th, Haswell
    seed 3's 5th and 6th), so the claim is counted over seeds: measured at seeds
    0-5 on the Sandybridge and Haswell kernels, at most 2 of a seed's settled
    generations were cut and 94-97 % of all ran whole. Margins: at most 3 cut in a
    seed, at least 80 % whole (a model that agreed would cut nearly every one)."""
    whole = settled_count = 0
    for seed in range(6):
        searcher = LQCMAESSearch(BOX5, MIN, seed=seed, budget=80)
        drive(searcher, noise, parallel=2)
        sizes = Counter(t.generation for t in searcher.trials.values())
        # the first generations (a handful of points) and the last (cut by the
        # budget) aside
        settled = [g for g in sizes if 2 <= g < max(sizes)]
        cut = [g for g in settled if sizes[g] != searcher._popsize]
        assert len(settled) >= 6 and len(cut) <= 3, (seed, dict(sizes))
        whole += len(settled) - len(cut)
        settled_count += len(settled)
    assert whole >= 0.8 * settled_count, (whole, settled_count)


def least_squares_error() -> float:
    """The sine fit's optimum: the least-squares coefficients (inside the box)."""
    xs = np.array([(i - 50) / 50 * math.pi for i in range(100)])
    coefficients, *_ = np.linalg.lstsq(np.vander(xs, 7, increasing=True), np.sin(xs),
                                       rcond=None)
    assert np.all(np.abs(coefficients) <= 1.0)
    return sine_fit({f"c{k}": c for k, c in enumerate(coefficients)})


@pytest.mark.parametrize("seed", range(3))
def test_sine_fit_at_two_at_once_comes_near_the_least_squares_optimum(seed: int) -> None:
    """Regret (best error found - the least-squares optimum's 0.0018), not improvement
    over the default coefficients: the centre of the box, where CMA-ES starts, alone
    has error 50 (regret 50), 221,567 times better than the default.

    Measured at seeds 0-9 (130 trials, 2 at once): regret 0.035 to 0.123 (median
    0.062), 400 to 1,400 times below the centre's. Margins: regret at most 0.25
    (twice the largest measured) and at most 1/100 of the centre's."""
    space = SearchSpace(tuple(FloatParam(f"c{k}", -1.0, 1.0) for k in range(7)))
    optimum = least_squares_error()
    centre = sine_fit({f"c{k}": 0.0 for k in range(7)}) - optimum
    searcher = make_searcher("auto", space, MIN, seed=seed, budget=130, parallel=2)
    assert searcher.auto_choice.label() == "bayesian lq-cmaes"
    drive(searcher, sine_fit, parallel=2)
    regret = searcher.best().value - optimum
    assert 0 <= regret <= 0.25, regret
    assert regret <= centre / 100, (regret, centre)


def test_the_process_random_state_changes_nothing() -> None:
    """pycma draws from NumPy's global generator; the search swaps in its own, so
    other code drawing between asks (another stage's sampler, a trainer) cannot
    change what it asks, and the search leaves the global state as it found it."""
    reference = [t.config for t in drive(LQCMAESSearch(BOX5, MIN, seed=4, budget=30), ellipsoid)]

    def noisy(config: dict) -> float:
        np.random.seed(len(config))
        np.random.rand(17)
        return ellipsoid(config)

    searcher = LQCMAESSearch(BOX5, MIN, seed=4, budget=30)
    asked = drive(searcher, noisy)
    assert [t.config for t in asked] == reference
    np.random.seed(123)
    before = np.random.get_state()[1].copy()
    LQCMAESSearch(BOX5, MIN, seed=5, budget=10).ask(2)
    assert (np.random.get_state()[1] == before).all()


def test_a_step_runs_what_the_model_needs_and_then_waits() -> None:
    searcher = LQCMAESSearch(BOX5, MIN, seed=0, budget=40)
    first = searcher.ask(2) + searcher.ask(2) + searcher.ask(2)
    assert len(first) == 5  # pycma's first step: 3 / truncation ratio 0.75 points, + 1
    assert searcher.ask(2) == []  # the next step waits for the model
    for trial in first[:4]:
        searcher.tell(trial.id, ellipsoid(trial.config))
    assert searcher.ask(2) == []
    searcher.tell(first[4].id, ellipsoid(first[4].config))
    assert searcher.ask(2)


def test_a_step_fills_the_free_slots() -> None:
    """Where the model agrees, pycma runs one candidate a step; with 3 slots free,
    3 run (the next best the model ranks), so no slot idles while it waits."""
    one = LQCMAESSearch(BOX5, MIN, seed=2, budget=60)
    drive(one, ellipsoid, parallel=1)
    three = LQCMAESSearch(BOX5, MIN, seed=2, budget=60)
    drive(three, ellipsoid, parallel=3)
    sizes_one = Counter(t.generation for t in one.trials.values())
    sizes_three = Counter(t.generation for t in three.trials.values())
    assert min(sizes_one.values()) == 1
    last = max(sizes_three)
    assert all(n >= 3 for g, n in sizes_three.items() if g != last)


def test_a_stopped_strategy_restarts_with_a_larger_population_and_resumes() -> None:
    """A flat objective stops CMA-ES (pycma's tolflatfitness); the budget left buys a
    restart with twice the population (IPOP), journalled like any other ask."""
    space = SearchSpace((FloatParam("x", 0.0, 1.0), IntParam("n", 1, 64, log=True)))
    searcher = LQCMAESSearch(space, MIN, seed=3, budget=120)
    drive(searcher, lambda c: 1.0, parallel=2)
    assert searcher.restarts >= 1
    later = [t for t in searcher.trials.values() if t.deme == searcher.restarts]
    assert later and searcher._popsize >= 2 * (4 + math.floor(3 * math.log(2)))
    resumed = LQCMAESSearch(space, MIN, seed=3, budget=120)
    resumed.restore(json.loads(json.dumps(searcher.state())))
    assert resumed.state() == searcher.state() and resumed.restarts == searcher.restarts


def test_what_it_refuses() -> None:
    with pytest.raises(ValueError, match="categorical parameter\\(s\\) act: use sampler tpe"):
        LQCMAESSearch(MIXED, MIN)
    with pytest.raises(ValueError, match="startup_trials must be 0 for sampler lq-cmaes"):
        make_searcher("bayesian", BOX5, MIN, sampler="lq-cmaes", startup_trials=5)
    with pytest.raises(ValueError, match="lq-CMA-ES optimizes one"):
        LQCMAESSearch(BOX5, [("a", "min"), ("b", "min")])
    with pytest.raises(ValueError, match="population must be an integer of at least 2"):
        LQCMAESSearch(BOX5, MIN, population=1)


def test_population_sets_the_generation() -> None:
    searcher = LQCMAESSearch(BOX5, MIN, seed=0, budget=60, population=12)
    drive(searcher, noise, parallel=4)
    sizes = Counter(t.generation for t in searcher.trials.values())
    assert max(sizes.values()) == 12


def test_async_schedule_resumes_mid_run_and_asks_what_it_would_have() -> None:
    """schedule async (auto's at 16-63 at once): a driver restarted with trials pending,
    between two updates, rebuilds the strategy, the model's optimum to come and the
    results in since the last update, so its next asks are the uninterrupted search's."""
    def make() -> LQCMAESSearch:
        return LQCMAESSearch(BOX5, MIN, seed=6, budget=200, population=8, schedule="async")

    whole = make()
    drive(whole, ellipsoid, parallel=8, steps=45, fail=lambda i: i == 20)
    resumed = make()
    resumed.restore(json.loads(json.dumps(whole.state())))
    assert len(whole.pending) == 7  # drive tells its last result without refilling
    for trial in whole.pending:
        value = ellipsoid(trial.config)
        whole.tell(trial.id, value)
        resumed.tell(trial.id, value)
    assert [t.config for t in resumed.ask(5)] == [t.config for t in whole.ask(5)]


def test_async_schedule_updates_per_population_and_survives_failures() -> None:
    """Each update takes one population of results, failures ranked last: 96 results
    at population 8 make 12 updates (a candidate's generation is the strategy's
    iteration when it was drawn), and the search still closes on the optimum."""
    searcher = LQCMAESSearch(BOX5, MIN, seed=1, budget=96, population=8, schedule="async")
    asked = drive(searcher, ellipsoid, parallel=8, fail=lambda i: i % 10 == 3)
    assert len(asked) == 96
    assert max(t.generation for t in asked) >= 96 // 8 - 2
    best = min(ellipsoid(t.config) for t in asked)
    centre = ellipsoid({f"x{i}": 0.0 for i in range(5)})
    assert best < centre / 100, (best, centre)


def test_schedule_async_is_lq_cmaes_only() -> None:
    with pytest.raises(ValueError, match="schedule async applies to sampler lq-cmaes only"):
        make_searcher("bayesian", BOX5, MIN, sampler="tpe", schedule="async")


def test_async_schedule_runs_a_small_population_one_ask_at_a_time() -> None:
    """pycma mirrors samples of a population under 6 through injections it hands out only
    in asks of 2 or more; the async schedule asks one at a time, so it turns mirrors
    off (with them, the second update raised "Found unused injected direction")."""
    searcher = LQCMAESSearch(BOX5, MIN, seed=0, budget=40, population=4, schedule="async")
    assert len(drive(searcher, ellipsoid, parallel=1)) == 40
