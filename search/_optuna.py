"""How a nestor space meets Optuna: distributions, encoding, quiet logging, seeds.

Shared by the Bayesian search and the BOHB-style proposals of successive
halving, so both hand Optuna the same distributions and read its parameters
back the same way. Optuna is imported by the caller (lazily), never here.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any

from nestor.search.space import CategoricalParam, FloatParam, IntParam, Scalar, SearchSpace


def import_optuna(what: str) -> Any:
    """Optuna, or an ImportError that names the package and what needed it."""
    try:
        import optuna
    except ImportError as exc:  # pragma: no cover - optuna is a dependency
        raise ImportError(f"{what} needs the optuna package") from exc
    return optuna


@contextlib.contextmanager
def quiet(optuna: Any) -> Iterator[None]:
    """Keep Optuna's per-trial INFO lines out of nestor's output."""
    verbosity = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        yield
    finally:
        optuna.logging.set_verbosity(verbosity)


def distributions(optuna: Any, space: SearchSpace) -> dict[str, Any]:
    """Optuna distributions of the searched parameters.

    Categoricals become indices: Optuna compares choices with ==, which would
    confuse 1, 1.0 and True (distinct choices in a nestor space).
    """
    dist = optuna.distributions
    result: dict[str, Any] = {}
    for param in space.searched:
        if isinstance(param, FloatParam):
            d: Any = dist.FloatDistribution(param.low, param.high, log=param.log)
        elif isinstance(param, IntParam):
            d = dist.IntDistribution(param.low, param.high, log=param.log)
        else:
            assert isinstance(param, CategoricalParam)
            d = dist.CategoricalDistribution(tuple(range(len(param.values))))
        result[param.name] = d
    return result


def encode(space: SearchSpace, config: Mapping[str, Scalar]) -> dict[str, Any]:
    """Optuna parameters of a configuration (categoricals as indices); a parameter the
    configuration lacks (inactive in a conditional space) is left out, as Optuna's
    define-by-run leaves out what a trial never suggested."""
    params = {}
    for param in space.searched:
        if param.name not in config:
            continue
        value = config[param.name]
        if isinstance(param, CategoricalParam):
            value = next(
                i for i, v in enumerate(param.values) if type(v) is type(value) and v == value
            )
        params[param.name] = value
    return params


def decode(space: SearchSpace, params: Mapping[str, Any]) -> dict[str, Scalar]:
    """The configuration of Optuna parameters, floats clipped into their range."""
    config: dict[str, Scalar] = {}
    for param in space.searched:
        if param.name not in params:
            continue
        value = params[param.name]
        if isinstance(param, CategoricalParam):
            value = param.values[value]
        elif isinstance(param, FloatParam):
            value = min(max(float(value), param.low), param.high)
        config[param.name] = value
    return config


def of(distributions: Mapping[str, Any], params: Mapping[str, Any]) -> dict[str, Any]:
    """The distributions of the parameters a trial has (all of them in a flat space)."""
    return {name: distributions[name] for name in params}


def suggest(space: SearchSpace, trial: Any, distributions: Mapping[str, Any]) -> dict[str, Any]:
    """Define-by-run: suggest the parameters of a conditional space parents first,
    each only where its condition holds on the values suggested so far, so Optuna's
    samplers see a trial with exactly its active parameters (TPE models each
    parameter on the trials that have it). Returns the Optuna parameters."""
    config: dict[str, Scalar] = dict(space.constants())
    active: set[str] = set()
    for name in space.order:
        if not space.is_active(name, config, active):
            continue
        active.add(name)
        if name in config:  # a constant
            continue
        param, dist = space[name], distributions[name]
        if isinstance(param, CategoricalParam):
            index = trial.suggest_categorical(name, dist.choices)
            config[name] = param.values[index]
        elif isinstance(param, IntParam):
            config[name] = trial.suggest_int(name, param.low, param.high, log=param.log)
        else:
            config[name] = trial.suggest_float(name, param.low, param.high, log=param.log)
    return dict(trial.params)


def sampler_seed(seed: int, index: int, retry: int = 0) -> int:
    """The seed of the sampler for proposal ``index``: a function of (seed, index)
    only, so a restored search proposes what an uninterrupted one would have;
    ``retry`` counts the proposals for it that broke a constraint."""
    import numpy as np

    key = [seed, index] + ([retry] if retry else [])
    return int(np.random.SeedSequence(key).generate_state(1)[0])
