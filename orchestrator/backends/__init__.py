"""Backends the scheduler runs attempts on: a real Ray cluster, or a simulated one."""

from orchestrator.backends._base import Backend, Ended, Event, Launch, Started
from orchestrator.backends._ray import RayBackend

__all__ = ["Backend", "Ended", "Event", "Launch", "RayBackend", "Started"]
