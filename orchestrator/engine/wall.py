"""A stage's wall-clock budget (``search.budget: {wall: 2h}``): when to stop asking,
and when to stop.

The limit counts on the backend's clock (real seconds on Ray, virtual ones in a
simulation) from the stage's first start. A resumed stage goes on from the time
it had already spent, not from a fresh limit: each trial event of a stage under
a wall budget journals the stage's elapsed seconds (``elapsed_s``), and a new
driver starts from the largest of them. (What ran after the last journalled
event of a killed driver is not counted: at most the time since its last trial
started or ended.)

No trial starts that could not finish by the limit: a trial is expected to take
the median wall seconds of the stage's trials finished so far (completed or
pruned, from launch to end, gang start included). Before any has finished the
stage keeps asking, since nothing says how long a trial takes. At the limit the
running trials are stopped, journalled as ``stopped`` (not failed, never
retried), and the stage ends with its reason; the next stage of the workflow
runs (the budget is the stage's).

>>> wall = WallBudget(limit_s=10.0, spent_s=0.0, clock=0.0)
>>> wall.may_start(0.0), wall.finished(4.0), wall.may_start(5.0), wall.may_start(7.0)
(True, None, True, False)
>>> wall.reason
'wall budget 10s: the next trial (median 4 s) could not finish by it'
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from typing import Any

from nestor.orchestrator.journal.events import (
    Event,
    TrialFinished,
    TrialInterrupted,
    TrialStarted,
)
from nestor.orchestrator.journal.status import SCORED
from nestor.orchestrator.spec.budget import describe_wall


class WallBudget:
    """A stage's wall-clock limit, on the backend's clock from ``clock`` on, with
    ``spent_s`` seconds already spent by earlier drivers."""

    def __init__(self, limit_s: float, spent_s: float, clock: float) -> None:
        self.limit_s = limit_s
        self.spent_s = spent_s
        self.clock = clock  # the backend's time when this driver took the stage on
        self.durations: list[float] = []  # finished trials' wall seconds
        self.reason: str | None = None  # why the stage stopped asking, once it did

    @classmethod
    def of(cls, stage: Any, mine: Iterable[Event], now: float) -> WallBudget | None:
        """The stage's wall budget (None without one), resumed from its journal."""
        limit = getattr(getattr(stage, "search", None), "wall_s", None)
        if limit is None:
            return None
        spent = 0.0
        begun: dict[tuple[str, int], float] = {}
        wall = cls(limit, 0.0, now)
        for event in mine:
            if not isinstance(event, TrialStarted | TrialFinished | TrialInterrupted):
                continue
            elapsed = event.elapsed_s or 0.0  # 0.0 is left out as written
            spent = max(spent, elapsed)
            key = (str(event.trial.get("id")), event.attempt)
            if isinstance(event, TrialStarted):
                begun[key] = elapsed
            elif (isinstance(event, TrialFinished) and key in begun
                  and event.status in SCORED):
                wall.durations.append(elapsed - begun[key])
        wall.spent_s = spent
        return wall

    @property
    def label(self) -> str:
        return f"wall budget {describe_wall(self.limit_s)}"

    def elapsed(self, now: float) -> float:
        """The stage's seconds so far, earlier drivers' included."""
        return self.spent_s + max(0.0, now - self.clock)

    def deadline(self) -> float:
        """When the limit falls, on the backend's clock."""
        return self.clock + self.limit_s - self.spent_s

    def finished(self, seconds: float) -> None:
        """A trial finished (completed or pruned) after ``seconds``: the estimate learns."""
        self.durations.append(max(0.0, seconds))

    def reached(self, now: float) -> bool:
        if self.elapsed(now) >= self.limit_s - 1e-9:  # the deadline itself, to rounding
            self.reason = f"{self.label} reached"
            return True
        return False

    def may_start(self, now: float) -> bool:
        """Whether a new trial could finish by the limit (so far as the median says);
        when not, ``reason`` says why."""
        if self.reached(now):
            return False
        if not self.durations:
            return True
        median = statistics.median(self.durations)
        if self.elapsed(now) + median > self.limit_s:
            self.reason = (f"{self.label}: the next trial (median {median:.3g} s) could not"
                           " finish by it")
            return False
        return True

