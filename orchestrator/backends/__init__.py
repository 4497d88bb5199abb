"""Backends the scheduler runs attempts on: a real Ray cluster, or a simulated one.

The interface (``interface``) loads with the package; the two backends load when
named (``backends.RayBackend``, ``backends.SimulatedBackend``, ...), so that code
which only drives a ``Backend`` (the engine) never loads Ray or the simulator.
"""

from __future__ import annotations

import importlib
from typing import Any

from nestor.orchestrator.backends.interface import (
    Backend,
    ClusterError,
    Ended,
    Event,
    Launch,
    Started,
    TaskDone,
)

_CONCRETE = {
    "RayBackend": "nestor.orchestrator.backends.ray.backend",
    "Draw": "nestor.orchestrator.backends.simulated.backend",
    "SimulatedBackend": "nestor.orchestrator.backends.simulated.backend",
    "SimulationError": "nestor.orchestrator.backends.simulated.backend",
    "fixed_trials": "nestor.orchestrator.backends.simulated.backend",
    "lognormal_trials": "nestor.orchestrator.backends.simulated.backend",
}


def __getattr__(name: str) -> Any:
    if name in _CONCRETE:
        return getattr(importlib.import_module(_CONCRETE[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "Backend",
    "ClusterError",
    "Draw",
    "Ended",
    "Event",
    "Launch",
    "RayBackend",
    "SimulatedBackend",
    "SimulationError",
    "Started",
    "TaskDone",
    "fixed_trials",
    "lognormal_trials",
]
