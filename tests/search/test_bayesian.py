"""Bayesian search: Optuna samplers through ask/tell, batches, failures, restore."""

from __future__ import annotations

import itertools
import json
import math
import statistics
import subprocess
import sys
from typing import Any

import pytest
from _search_helpers import MIN, MIXED, drive, loss

from nestor.search import BayesianSearch, Failure, Objective
from nestor.search.problems import PROBLEMS
from nestor.search.space import FloatParam, SearchSpace

BRANIN = PROBLEMS["branin"]


def _spread(configs: list[dict]) -> float:
    """The smallest distance between two configurations, in shares of the range."""
    scale = {"x1": 15.0, "x2": 15.0}
    return min(
        max(abs(a[k] - b[k]) / scale[k] for k in scale)
        for a, b in itertools.combinations(configs, 2)
    )


@pytest.mark.parametrize("sampler", ["tpe", pytest.param("gp", marks=pytest.mark.slow)])
def test_a_parallel_batch_is_not_near_duplicates(sampler: str) -> None:
    searcher = BayesianSearch(
        BRANIN.space, BRANIN.objectives, seed=0, budget=40, sampler=sampler, startup_trials=8
    )
    for trial in searcher.ask(8):
        searcher.tell(trial.id, BRANIN(trial.config))
    batch = searcher.ask(6)
    assert all(t.origin == "model" for t in batch)
    assert _spread([t.config for t in batch]) > 0.01


def test_the_model_beats_its_startup_draws() -> None:
    searcher = BayesianSearch(BRANIN.space, BRANIN.objectives, seed=1, budget=40)
    drive(searcher, BRANIN, parallel=1)
    values = [o.value for o in searcher.observations]
    assert min(values[10:]) < min(values[:10])
    assert searcher.best().value < 1.0


def test_failures_are_told_to_optuna() -> None:
    searcher = BayesianSearch(MIXED, MIN, seed=0, budget=4)
    trials = searcher.ask(2)
    searcher.tell(trials[0].id, Failure("timeout"))
    searcher.tell(trials[1].id, loss(trials[1].config))
    states = [t.state.name for t in searcher.study.trials]
    assert states == ["FAIL", "COMPLETE"]


@pytest.mark.parametrize("sampler", ["tpe", "cmaes", pytest.param("gp", marks=pytest.mark.slow)])
def test_restore_rebuilds_the_study_and_continues_exactly(sampler: str) -> None:
    """Past the startup trials, so the model (and CMA-ES's stored optimizer) is used."""
    budget = 14 if sampler == "gp" else 30

    def make() -> BayesianSearch:
        return BayesianSearch(
            BRANIN.space, BRANIN.objectives, seed=3, budget=budget, sampler=sampler,
            startup_trials=4,
        )  # fmt: skip

    reference = make()
    expected = drive(reference, BRANIN, parallel=2)
    first = make()
    drive(first, BRANIN, parallel=2, steps=budget // 2)
    resumed = make()
    resumed.restore(json.loads(json.dumps(first.state())))
    assert len(resumed.study.trials) == len(first.study.trials)
    running = resumed.pending
    rest = []
    while not resumed.done():
        new = resumed.ask(2 - len(running)) if len(running) < 2 else []
        running += new
        rest += new
        trial = running.pop(0)
        resumed.tell(trial.id, BRANIN(trial.config))
    asked_before = first.n_asked
    assert [t.to_dict() for t in rest] == [t.to_dict() for t in expected[asked_before:]]
    assert any(t.origin == "model" for t in rest)


def test_warm_start_gives_the_model_all_observations() -> None:
    previous = BayesianSearch(BRANIN.space, BRANIN.objectives, seed=0, budget=12)
    drive(previous, BRANIN, fail=lambda i: i == 3)
    searcher = BayesianSearch(BRANIN.space, BRANIN.objectives, seed=1, budget=5)
    assert searcher.warm_start(previous.observations) == 12
    trials = searcher.ask(2)
    assert all(t.origin == "model" for t in trials)  # 11 successes >= 10 startup trials
    assert len(searcher.study.trials) == 14
    assert searcher.best() is None  # warm-start results are not this search's


@pytest.mark.parametrize("objectives", [1, 2])
def test_tpe_models_the_parameters_jointly(objectives: int, monkeypatch: Any) -> None:
    """Multivariate TPE proposes all parameters together (sample_relative); Optuna
    would fall back to one parameter at a time (sample_independent) for several
    objectives unless told multivariate=True."""
    import optuna

    calls: list[int] = []
    original = optuna.samplers.TPESampler.sample_independent

    def counting(self: Any, study: Any, trial: Any, name: str, distribution: Any) -> Any:
        calls.append(trial.number)
        return original(self, study, trial, name, distribution)

    monkeypatch.setattr(optuna.samplers.TPESampler, "sample_independent", counting)
    metrics = [Objective("a", "min"), Objective("b", "min")][:objectives]
    searcher = BayesianSearch(BRANIN.space, metrics, seed=0, budget=12, startup_trials=4)
    drive(
        searcher,
        lambda c: {"a": BRANIN(c), "b": (c["x1"] - 2) ** 2 + c["x2"]},
        parallel=1,
    )
    model = [int(o.trial.id) for o in searcher.observations if o.trial.origin == "model"]
    assert len(model) == 8
    assert not set(calls) & set(model)


@pytest.mark.parametrize("seed", range(5))
def test_cmaes_starts_from_the_better_startup_trials(seed: int) -> None:
    """Optuna's CMA-ES starts at the centre of the space; nestor's starts where
    the random startup trials did best, so they are not wasted."""
    space = SearchSpace((FloatParam("x", 0.0, 10.0), FloatParam("y", 0.0, 10.0)))

    def corner(c: dict) -> float:
        return (c["x"] - 9) ** 2 + (c["y"] - 9) ** 2

    searcher = BayesianSearch(space, MIN, seed=seed, budget=20, sampler="cmaes", startup_trials=6)
    for _ in range(6):
        trial = searcher.ask(1)[0]
        searcher.tell(trial.id, corner(trial.config))
    first_generation = searcher.ask(6)  # CMA-ES's population for 2 parameters
    assert all(t.origin == "model" for t in first_generation)
    start = searcher._cma_start()
    better = sorted(searcher.observations, key=lambda o: o.value)[:3]
    for k in ("x", "y"):
        assert min(o.config[k] for o in better) <= start[k] <= max(o.config[k] for o in better)
    mean = [statistics.mean(t.config[k] for t in first_generation) for k in ("x", "y")]
    assert math.dist(mean, (start["x"], start["y"])) < math.dist(mean, (5.0, 5.0)), (start, mean)
    # The start is journalled, so a restored search starts from the same point.
    for trial in first_generation[:3]:
        searcher.tell(trial.id, 0.0)  # better results must not move the start
    assert searcher._cma_start() == start
    resumed = BayesianSearch(space, MIN, seed=seed, budget=20, sampler="cmaes", startup_trials=6)
    resumed.restore(json.loads(json.dumps(searcher.state())))
    assert resumed._cma_start() == start


def test_settings_are_checked() -> None:
    with pytest.raises(ValueError, match="sampler must be one of tpe, gp, cmaes"):
        BayesianSearch(MIXED, MIN, sampler="smac")
    with pytest.raises(ValueError, match="startup_trials must be at least 0"):
        BayesianSearch(MIXED, MIN, startup_trials=-1)
    with pytest.raises(ValueError, match="sampler must be tpe or gp for several objectives"):
        BayesianSearch(MIXED, [Objective("a", "min"), Objective("b", "max")], sampler="cmaes")


def test_import_search_pulls_in_no_heavy_framework() -> None:
    code = (
        "import sys, nestor.search\n"
        "from nestor.search import BayesianSearch\n"
        "from nestor.search.space import FloatParam, SearchSpace\n"
        "s = BayesianSearch(SearchSpace([FloatParam('x', 0.0, 1.0)]), [('y', 'min')])\n"
        "t = s.ask(2); s.tell(t[0].id, 1.0)\n"
        "heavy = {'torch', 'ray', 'horovod', 'mlflow'} & set(sys.modules)\n"
        "print(sorted(heavy))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
    code = "import sys, nestor.search\nprint('optuna' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
