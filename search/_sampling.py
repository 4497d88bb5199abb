"""Drawing configurations at random, shared by random search and the genetic
search's first generation (so both explore the same distribution)."""

from __future__ import annotations

import math
import random

from nestor.search.space import CategoricalParam, FloatParam, IntParam, Param, Scalar, SearchSpace


def sample_value(param: Param, rng: random.Random) -> Scalar:
    """One value of ``param``: uniform, or log-uniform where ``log`` is set."""
    if isinstance(param, FloatParam):
        if param.log:
            value = math.exp(rng.uniform(math.log(param.low), math.log(param.high)))
        else:
            value = rng.uniform(param.low, param.high)
        return min(max(value, param.low), param.high)  # exp(log(x)) may round past x
    if isinstance(param, IntParam):
        if param.log:
            # Half a step beyond each end, as Optuna does, so the end values are as likely
            # as their log-width says.
            value = math.exp(rng.uniform(math.log(param.low - 0.5), math.log(param.high + 0.5)))
            return min(max(round(value), param.low), param.high)
        return rng.randint(param.low, param.high)
    if isinstance(param, CategoricalParam):
        return param.values[rng.randrange(len(param.values))]
    return param.value


MAX_DRAWS = 1000
"""Random draws a search makes for one configuration that meets the constraints
before it gives up: constraints that leave less than about a thousandth of the
space are refused with :class:`ConstraintsTooTight`, not searched for ever."""


class ConstraintsTooTight(ValueError):
    """No configuration of :data:`MAX_DRAWS` random draws met the constraints."""


def sample_config(space: SearchSpace, rng: random.Random) -> dict[str, Scalar]:
    """A configuration of the searched parameters, inactive ones included (constants
    are added, and inactive parameters dropped, by the searcher), that meets the
    space's constraints: drawn again until one does (rejection sampling)."""
    if not space.constraints:  # a flat draw, the same random numbers as always
        return {param.name: sample_value(param, rng) for param in space.searched}
    for _ in range(MAX_DRAWS):
        config = {param.name: sample_value(param, rng) for param in space.searched}
        if valid(space, config):
            return config
    raise too_tight(space)


def valid(space: SearchSpace, config: dict[str, Scalar]) -> bool:
    """True if the whole vector ``config`` projects to a configuration that meets the
    constraints (its inactive values never matter)."""
    return space.satisfies(space.project({**config, **space.constants()}))


def repair(space: SearchSpace, config: dict[str, Scalar], rng: random.Random
           ) -> tuple[dict[str, Scalar], bool]:
    """``config`` (a whole vector) if it meets the constraints, else a random one that
    does; and whether it was replaced. A search whose operator (crossover, mutation, a
    perturbation, CMA-ES's sample) broke a constraint asks the replacement instead."""
    if valid(space, config):
        return config, False
    return sample_config(space, rng), True


def too_tight(space: SearchSpace) -> ConstraintsTooTight:
    rules = "; ".join(c.text for c in space.constraints)
    return ConstraintsTooTight(
        f"constraints ({rules}) were not met by any of {MAX_DRAWS} random configurations:"
        " they leave (almost) nothing of the space; loosen them or narrow the space to"
        " where they hold")
