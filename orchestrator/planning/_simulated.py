"""Simulated trials that last what the cost model predicts for their shape.

The simulated backend asks a trial model how long an attempt runs. This one
asks the calibrated cost model: ``epochs`` x its predicted epoch at the
trial's dp x mp and per-rank batch, with ``busy`` ranks computing on a node
(the trial's own and its neighbours', as the planner counts them). A search
that tunes ``epochs`` or ``batch_size`` gets each trial's own from its config.
An optional lognormal ``sigma`` spreads the runs around the prediction (a
shared machine is never exactly on time); the draw comes from the
simulator's per-attempt RNG, so a run is reproducible.

>>> trials = cost_model_trials(model, Shape(4, 1), per_rank_batch=100, epochs=5)  # doctest: +SKIP
>>> SimulatedBackend(128, 2, trials, startup_s=GANG_START_S)                      # doctest: +SKIP
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from ._cost import CostModel
from ._planner import Shape

if TYPE_CHECKING:
    from nestor.orchestrator.backends import Draw


def predicted_run_s(model: CostModel, shape: Shape, per_rank_batch: int, epochs: int,
                    busy: int | None = None) -> float:
    """Seconds of one run: ``epochs`` x the predicted epoch at ``shape``."""
    return epochs * model.epoch(shape.dp, shape.mp, per_rank_batch, busy)


def cost_model_trials(model: CostModel, shape: Shape, per_rank_batch: int, epochs: int, *,
                      busy: int | None = None, sigma: float = 0.0,
                      value: Callable[[Mapping[str, Any]], float] | float = 0.5,
                      metric: str = "val_accuracy"
                      ) -> Callable[[Mapping[str, Any], random.Random], Draw]:
    """A ``TrialModel`` for :class:`~orchestrator.backends.SimulatedBackend` whose
    attempts at ``shape`` run the cost model's predicted time and report
    ``metric`` = ``value`` (a number, or a function of the config).

    ``epochs`` and ``per_rank_batch`` are the defaults; a config's own
    ``epochs`` / ``batch_size`` win. ``busy``: ranks computing at once on a
    node (default: the trial's own, as :meth:`CostModel.step` counts them).
    """
    for name, number in (("per_rank_batch", per_rank_batch), ("epochs", epochs)):
        if isinstance(number, bool) or not isinstance(number, int) or number < 1:
            raise ValueError(f"{name} must be an integer of at least 1, but got {number!r}")
    if not (isinstance(sigma, int | float) and sigma >= 0):
        raise ValueError(f"sigma must be at least 0, but got {sigma!r}")
    cache: dict[tuple[int, int], float] = {}

    def draw(config: Mapping[str, Any], rng: random.Random) -> Draw:
        from nestor.orchestrator.backends import Draw

        e = int(config.get("epochs", epochs))
        b = int(config.get("batch_size", per_rank_batch))
        if (e, b) not in cache:
            cache[(e, b)] = predicted_run_s(model, shape, b, e, busy)
        seconds = cache[(e, b)]
        if sigma:
            seconds *= math.exp(rng.gauss(-sigma * sigma / 2, sigma))  # mean 1
        got = value(config) if callable(value) else value
        return Draw(seconds, {metric: float(got)})

    return draw
