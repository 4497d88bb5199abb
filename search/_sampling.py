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


def sample_config(space: SearchSpace, rng: random.Random) -> dict[str, Scalar]:
    """A configuration of the searched parameters (constants are added by the searcher)."""
    return {param.name: sample_value(param, rng) for param in space.searched}
