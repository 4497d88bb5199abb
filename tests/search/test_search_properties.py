"""Property-based tests: whatever the space, asks lie inside it with the right types."""

from __future__ import annotations

import json
import math

from _search_helpers import drive
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nestor.search import Objective, make_searcher
from nestor.search.space import (
    CategoricalParam,
    ConstantParam,
    FloatParam,
    IntParam,
    SearchSpace,
)

finite = st.floats(-1e6, 1e6, allow_nan=False, allow_infinity=False)
# A NUL is refused in a value (search/space.py): Hypothesis would draw one now and then.
no_nul = st.text(st.characters(exclude_characters="\x00"), max_size=3)
scalars = st.one_of(st.booleans(), st.integers(-5, 5), finite, no_nul)


@st.composite
def float_params(draw, name: str) -> FloatParam:
    if draw(st.booleans()):
        low = draw(st.floats(1e-6, 1e3))
        return FloatParam(name, low, low * draw(st.floats(1.01, 1e4)), log=True)
    low = draw(finite)
    return FloatParam(name, low, low + draw(st.floats(1e-3, 1e6)))


@st.composite
def int_params(draw, name: str) -> IntParam:
    log = draw(st.booleans())
    low = draw(st.integers(1, 100)) if log else draw(st.integers(-100, 100))
    return IntParam(name, low, low + draw(st.integers(1, 1000)), log=log)


@st.composite
def categorical_params(draw, name: str) -> CategoricalParam:
    values = draw(st.lists(scalars, min_size=1, max_size=5))
    distinct: list = []
    for v in values:
        if not any(type(v) is type(d) and v == d for d in distinct):
            distinct.append(v)
    return CategoricalParam(name, tuple(distinct))


@st.composite
def spaces(draw) -> SearchSpace:
    kinds = draw(st.lists(st.sampled_from("fick"), min_size=1, max_size=5))
    if all(k == "k" for k in kinds):
        kinds.append("f")
    params = []
    for i, kind in enumerate(kinds):
        name = f"p{i}"
        if kind == "f":
            params.append(draw(float_params(name)))
        elif kind == "i":
            params.append(draw(int_params(name)))
        elif kind == "c":
            params.append(draw(categorical_params(name)))
        else:
            params.append(ConstantParam(name, draw(scalars)))
    return SearchSpace(tuple(params))


SETTINGS = {
    "random": {"budget": 10},
    "grid": {"budget": 10, "points": 2},
    "genetic": {"population": 4, "generations": 3, "crossover": "sbx"},
    "genetic-async": {"population": 4, "generations": 3, "schedule": "async", "demes": 2},
    "genetic-mu+lambda": {"population": 4, "generations": 3, "mode": "mu_plus_lambda"},
    "bayesian": {"budget": 6, "startup_trials": 2},
    "cmaes": {"budget": 6, "startup_trials": 2, "sampler": "cmaes"},
}


def _pseudo_value(config: dict) -> float:
    """A deterministic, finite value of any configuration."""
    return float(sum(hash(json.dumps(v)) % 1000 for v in config.values()))


def _types_match(space: SearchSpace, config: dict) -> bool:
    for param in space:
        value = config[param.name]
        if isinstance(param, FloatParam) and type(value) is not float:
            return False
        if isinstance(param, IntParam) and type(value) is not int:
            return False
    return True


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(space=spaces(), name=st.sampled_from(sorted(SETTINGS)), seed=st.integers(0, 2**31))
def test_every_ask_lies_in_the_space(space: SearchSpace, name: str, seed: int) -> None:
    algorithm = name.split("-")[0] if name != "cmaes" else "bayesian"
    searcher = make_searcher(algorithm, space, [Objective("y", "min")], seed=seed, **SETTINGS[name])
    trials = drive(searcher, _pseudo_value, parallel=3, fail=lambda i: i == 1)
    assert trials and searcher.done()
    for trial in trials:
        assert space.contains(trial.config), (trial.config, space)
        assert _types_match(space, trial.config)
        assert all(not isinstance(v, float) or math.isfinite(v) for v in trial.config.values())
    if len(trials) > 1:  # the second result was a failure, recorded as such
        assert searcher.observations[1].failure == "injected"
