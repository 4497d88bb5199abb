"""Backends the scheduler runs attempts on: a real Ray cluster, or a simulated one."""

from nestor.orchestrator.backends._base import (
    Backend,
    ClusterError,
    Ended,
    Event,
    Launch,
    Started,
    TaskDone,
)
from nestor.orchestrator.backends.ray.backend import RayBackend
from nestor.orchestrator.backends.simulated.backend import (
    Draw,
    SimulatedBackend,
    SimulationError,
    fixed_trials,
    lognormal_trials,
)

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
