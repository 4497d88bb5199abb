"""A running stage's shape: chosen when it starts, on the slots the allocation
really has, and chosen again in its tail.

`nestor validate` plans on ``resources.slots`` or the CPUs of the machine it
runs on; a stage on a Ray cluster plans on the cluster's slots instead. Late
in a stage, fewer trials are left than run at once, and slots would idle:
then the trials not yet started are re-planned with the running ones holding
their slots, so each of the last trials gets wider. A switch must beat the
warm shape by the planner's hysteresis after paying for new gangs
(:func:`~orchestrator.planning.replan`), so small gains never throw warm
gangs away.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ._planner import Plan, Replan, Shape, choose, replan
from ._profile import Profile
from ._profiler import default_shapes
from ._stage import Workflow, stage_inputs, stage_model, stage_profile


class StagePlanner:
    """The planner of one stage with ``parallel: auto``, on ``slots`` slots, from the
    cached profile of its trainer on this machine (the prior when none)."""

    def __init__(self, workflow: Workflow, name: str, slots: int,
                 places: Sequence[Path] = ()) -> None:
        self.slots = slots
        self.inputs = stage_inputs(workflow, name, slots)
        self.profile = stage_profile(self.inputs, places)
        self.model = stage_model(self.inputs, self.profile)
        self._last: tuple[int, int, Shape] | None = None

    @property
    def measured(self) -> bool:
        return self.profile is not None

    def use_profile(self, profile: Profile) -> None:
        """Plan from this profile from now on (measured at the stage's start, or the
        one a resumed driver finds journalled)."""
        self.profile = profile
        self.model = stage_model(self.inputs, profile)

    def profile_job(self) -> tuple[Any, ...]:
        """``(fn, *args)``: profile the stage's trainer where it runs, a Ray task's worth
        (a few training steps at the fewest shapes that identify the cost model)."""
        shapes = default_shapes(min(self.slots, 2), self.inputs.size.max_model_parallel())
        return (measure_profile, self.inputs.trainer, dict(self.inputs.options), shapes,
                self.inputs.backend)

    def first(self) -> Plan:
        """The shape for the whole stage, as at its start."""
        return choose(self.model, self.inputs.limits, self.inputs.goal)

    def tail(self, *, left: int, running: int, current: Shape,
             warm: Sequence[Shape] = ()) -> Replan | None:
        """Re-plan the ``left`` trials not yet started once they are fewer than one
        wave at ``current`` (the last wave would leave slots idle), with the
        ``running`` ones keeping their slots; None before that, or when nothing
        changed since the last call."""
        at_once = self.slots // current.ranks
        if left <= 0 or left >= at_once:
            return None
        if self._last == (left, running, current):
            return None
        self._last = (left, running, current)
        goal = dataclasses.replace(self.inputs.goal, runs=left, generation=None)
        return replan(self.model, self.inputs.limits, goal, current=current, running=running,
                      warm=warm)


def measure_profile(trainer: str, options: dict[str, Any], shapes: list[tuple[int, int]],
                    backend: str = "horovod") -> dict[str, Any]:
    """Profile ``trainer`` on the machine this runs on (cached there), as a record."""
    from ._profiler import profile

    return profile(trainer, options, shapes=shapes, backend=backend).to_record()


def shape_of(record: dict[str, Any]) -> Shape:
    """The shape a journalled stage_planned or stage_replanned event names."""
    return Shape(int(record["dp"]), int(record["mp"]))
