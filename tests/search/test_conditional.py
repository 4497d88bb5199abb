"""Conditional spaces and constraints: every search asks only valid configurations.

The algorithms come from ``search.ALGORITHMS`` (and each Bayesian sampler from its
setting's declared values), so an algorithm added later is tested here or fails
the coverage check below until it is.
"""

from __future__ import annotations

import math
import typing

import pytest

from nestor.search import ALGORITHMS, Failure, make_searcher
from nestor.search._bayesian import BayesianSettings
from nestor.search._pbt import PBTSettings
from nestor.search._sampling import ConstraintsTooTight
from nestor.search.space import CategoricalParam, FloatParam, IntParam, SearchSpace

SPACE = SearchSpace(
    (
        CategoricalParam("optimizer", ("adam", "sgd", "rmsprop")),
        FloatParam("lr", 1e-4, 1.0, log=True),
        FloatParam("momentum", 0.0, 0.99),
        CategoricalParam("nesterov", (True, False)),
        FloatParam("dampening", 0.0, 0.5),  # three deep: optimizer -> nesterov -> dampening
        IntParam("layers", 1, 4),
        IntParam("width3", 8, 256, log=True),
    ),
    conditions={
        "momentum": {"optimizer": ["sgd", "rmsprop"]},
        "nesterov": {"optimizer": "sgd"},
        "dampening": {"nesterov": False},
        "width3": {"layers": [3, 4]},
    },
    constraints=("lr * layers <= 0.5", "momentum + lr < 1.0",
                 lambda c: c.get("width3", 0) <= 64 * c["layers"]),
)
# lq-CMA-ES searches numbers only: its conditional space hangs on an int.
NUMERIC = SearchSpace(
    (FloatParam("lr", 1e-4, 1.0, log=True), IntParam("layers", 1, 4),
     IntParam("width3", 8, 256, log=True), FloatParam("drop", 0.0, 0.9)),
    conditions={"width3": {"layers": [3, 4]}, "drop": {"layers": 4}},
    constraints=("lr * layers <= 0.5", "drop < lr * 10"),
)

SMALL: dict[str, dict[str, typing.Any]] = {
    "genetic": {"population": 6, "generations": 4},
    "bayesian": {"budget": 16, "startup_trials": 4},
    "random": {"budget": 30},
    "grid": {"points": 3},
    "pbt": {"population": 4, "intervals": 4},
    "asha": {"budget": 20, "max_budget": 9, "sampler": "tpe", "startup_trials": 3},
    "hyperband": {"max_budget": 9, "sampler": "tpe", "startup_trials": 3},
    "auto": {"budget": 16, "parallel": 2},
}


def _variants() -> list[tuple[str, dict[str, typing.Any]]]:
    cases = []
    for algorithm in [*ALGORITHMS, "auto"]:
        cases.append((algorithm, SMALL[algorithm]))
    samplers = typing.get_args(typing.get_type_hints(BayesianSettings)["sampler"])
    for sampler in samplers:
        extra = {"startup_trials": 0} if sampler == "lq-cmaes" else {}
        cases.append(("bayesian", {**SMALL["bayesian"], "sampler": sampler, **extra}))
    for explore in typing.get_args(typing.get_type_hints(PBTSettings)["explore"]):
        cases.append(("pbt", {**SMALL["pbt"], "explore": explore, "intervals": 6}))
    cases.append(("genetic", {**SMALL["genetic"], "schedule": "async"}))
    cases.append(("genetic", {**SMALL["genetic"], "mode": "mu_plus_lambda", "offspring": 3,
                              "crossover": "sbx"}))
    return cases


def test_every_algorithm_is_covered() -> None:
    assert set(SMALL) == {*ALGORITHMS, "auto"}


def objective(config: dict[str, typing.Any]) -> float:
    value = (math.log10(config.get("lr", 0.01)) + 2) ** 2 + 0.1 * config["layers"]
    value += {"adam": 0.3, "sgd": 0.0, "rmsprop": 0.5}.get(config.get("optimizer"), 0.0)
    return value + abs(config.get("momentum", 0.9) - 0.9) + config.get("dampening", 0.0)


def run(space: SearchSpace, algorithm: str, settings: dict[str, typing.Any], seed: int,
        parallel: int = 3) -> tuple[list, typing.Any]:
    searcher = make_searcher(algorithm, space, [("loss", "min")], seed=seed, **settings)
    asked, running = [], []
    while not searcher.done() and len(asked) < 400:
        new = searcher.ask(parallel - len(running)) if len(running) < parallel else []
        asked += new
        running += new
        if not running:
            break
        trial = running.pop(0)
        result = Failure("x") if len(asked) % 7 == 0 else objective(trial.config)
        searcher.tell(trial.id, result)
    return asked, searcher


def _params() -> list[typing.Any]:
    result = []
    for algorithm, settings in _variants():
        kind = settings.get("sampler", settings.get("explore", settings.get(
            "schedule", settings.get("mode", ""))))
        slow = [pytest.mark.slow] if settings.get("sampler") == "gp" else []  # a GP fit a proposal
        result.append(pytest.param(algorithm, settings, id=f"{algorithm}-{kind}", marks=slow))
    return result


@pytest.mark.parametrize(("algorithm", "settings"), _params())
def test_asks_only_valid_configurations(algorithm: str, settings: dict[str, typing.Any]) -> None:
    space = NUMERIC if settings.get("sampler") == "lq-cmaes" else SPACE
    if settings.get("sampler") == "gp":  # a GP fit per proposal: one short search
        settings = {**settings, "budget": 8, "startup_trials": 3}
    for seed in (0, 1)[: 1 if settings.get("sampler") == "gp" else 2]:
        trials, searcher = run(space, algorithm, settings, seed)
        assert len(trials) >= min(10, settings.get("budget", 10))
        for trial in trials:
            config = trial.config
            assert space.contains(config), (trial.origin, config)
            assert set(config) == space.active(config)  # inactive parameters are absent
            assert all(rule.holds(config) for rule in space.constraints)
        if space is SPACE:  # the conditional parameters were really searched
            assert any(set(t.config) != set(space.names) for t in trials)
        # A journalled state restores to the same search.
        again = make_searcher(algorithm, space, [("loss", "min")], seed=seed, **settings)
        again.restore(searcher.state())
        assert [o.config for o in again.observations] == [o.config for o in searcher.observations]


def test_grid_enumerates_each_valid_configuration_once() -> None:
    space = SearchSpace(
        (CategoricalParam("optimizer", ("adam", "sgd")), FloatParam("momentum", 0.0, 0.9),
         IntParam("layers", 1, 3)),
        conditions={"momentum": {"optimizer": "sgd"}}, constraints=("layers != 2",))
    trials, _ = run(space, "grid", {"points": 3}, seed=0)
    configs = [tuple(sorted(t.config.items())) for t in trials]
    # adam: layers 1, 3 (2 refused); sgd: 3 momenta x 2 layers = 8 distinct, no copies.
    assert len(configs) == len(set(configs)) == 8


def test_random_draws_meet_constraints_by_rejection() -> None:
    trials, _ = run(SPACE, "random", {"budget": 200}, seed=3)
    assert all(t.config["lr"] * t.config["layers"] <= 0.5 for t in trials)
    assert {t.config["optimizer"] for t in trials} == {"adam", "sgd", "rmsprop"}


def test_constraints_no_configuration_meets_are_a_clear_error() -> None:
    space = SearchSpace((FloatParam("x", 0.0, 1.0),), constraints=("x > 2",))
    searcher = make_searcher("random", space, [("loss", "min")], budget=3)
    with pytest.raises(ConstraintsTooTight, match=r"constraints \(x > 2\) were not met"):
        searcher.ask(1)


@pytest.mark.parametrize(("conditions", "constraints", "message"), [
    ({"momentum": {"optimiser": "sgd"}}, (), "momentum.when.optimiser: names 'optimiser'"),
    ({"momentum": {"optimizer": "nadam"}}, (), "'nadam' is not a value 'optimizer' takes"),
    ({"optimizer": {"layers": 2}, "layers": {"optimizer": "sgd"}}, (), "cycle"),
    ({"momentum": {"lr": 0.1}}, (), "must name a categorical or int parameter"),
    ({}, ("lr <",), "constraint 'lr <' is not an expression"),
    ({}, ("__import__('os').system('x')",), "uses a call of __import__"),
    ({}, ("lr.real > 0",), "uses 'lr.real'"),
    ({}, ("speed > 1",), "names 'speed', which is no parameter"),
])
def test_bad_conditions_and_constraints_are_refused(conditions, constraints, message) -> None:
    params = (CategoricalParam("optimizer", ("adam", "sgd")), FloatParam("lr", 1e-4, 1.0),
              FloatParam("momentum", 0.0, 0.9), IntParam("layers", 1, 3))
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        SearchSpace(params, conditions=conditions, constraints=constraints)


def test_a_flat_space_keeps_its_repr() -> None:
    """Journals compare the space's repr on restore: flat spaces' must not change."""
    space = SearchSpace((FloatParam("x", 0.0, 1.0),))
    assert repr(space) == ("SearchSpace(params=(FloatParam(name='x', low=0.0, high=1.0,"
                           " log=False),))")
