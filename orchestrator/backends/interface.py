"""What the scheduler needs from a cluster, and the events a cluster sends back.

The scheduler (``orchestrator.engine.trials``, ``orchestrator.engine.workflow``) decides which
trial runs next; a Backend runs it and reports what happened as events. Two
implementations share this surface, as submitit's local and Slurm executors
share one API: :class:`~orchestrator.backends.RayBackend` starts Horovod
gangs on a real Ray cluster, and
:class:`~orchestrator.backends.SimulatedBackend` plays a cluster of any size
on a virtual clock, so the very same scheduler code is measured at 2,048
slots and tested in milliseconds.

Every call the scheduler makes is cheap and returns at once: starting a
gang, waiting on ranks and killing them happen off the scheduling loop, and
their outcomes arrive through :meth:`Backend.wait`, which blocks until the
next event or deadline. The loop never polls.
"""

from __future__ import annotations

import abc
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from nestor.orchestrator.backends.shape import Shape


class ClusterError(Exception):
    """The cluster cannot run the workflow as asked (too few slots, GPU nodes whose
    builds cannot use their GPUs); the message says why and what to do."""


@dataclass(frozen=True)
class Launch:
    """One attempt of one trial, to run on a gang of ``shape``.

    ``key`` names the attempt in every event about it (unique in a run);
    ``request`` is the ``trainers.TrialRequest`` each rank gets; ``hooks``
    are the ``report``/``should_stop`` callables rank 0 is given;
    ``beat_every_s`` how often rank 0 may tell it still makes progress;
    ``gate`` (if any) is called, off the loop, before any rank runs the trial:
    it returns once the journal's events that led to the launch are durable.
    """

    key: str
    shape: Shape
    request: Any
    hooks: dict[str, Any] = field(default_factory=dict)
    beat_every_s: float = 5.0
    gate: Callable[[], Any] | None = None


@dataclass(frozen=True)
class Started:
    """The attempt's gang is up and its ranks are running the trial.

    ``startup_s`` is the time spent starting a new gang for it (0 for a warm
    one): slot time, but not the trial's own.
    """

    key: str
    gang: int
    at: float
    startup_s: float = 0.0


@dataclass(frozen=True)
class Ended:
    """The attempt is over; its gang is back in the pool, or gone.

    ``result`` is the trial's ``TrialResult``: rank 0's, or the first failing
    rank's when another rank failed first. ``failure`` says why there is no
    result (a rank died, the gang could not start, it was cancelled).
    ``started`` is False when the gang never started (then no Started came).
    """

    key: str
    at: float
    result: Any = None
    failure: str | None = None
    started: bool = True


@dataclass(frozen=True)
class TaskDone:
    """A piece of the driver's own work that ran off the loop (``run_task``):
    ``value`` is what it returned, or ``error`` says why it did not."""

    key: str
    at: float
    value: Any = None
    error: str | None = None


Event = Started | Ended | TaskDone

# Rank 0 says it still makes progress at most this often: a backend's heartbeat
# sends no more, and the engine's progress deadlines allow for it (one place for both).
BEAT_EVERY_S = 5.0


class EarlyStopping(abc.ABC):
    """A stage's judge of poor trials (``early_stopping:``), held where the trials run:
    rank 0 reports its metric each epoch and asks whether to stop, without the loop."""

    @abc.abstractmethod
    def begin(self, trial_id: str) -> dict[str, Any]:
        """An attempt of this trial launches: the hooks its rank 0 calls (``report``,
        ``should_stop``). Never blocks the loop."""

    @abc.abstractmethod
    def finish(self, trial_id: str, value: float | None, pruned: bool) -> None:
        """The trial ended for good with ``value`` (None: failed), ``pruned`` or not."""


class Backend(abc.ABC):
    """Runs attempts on gangs of ranks within ``slots``, reporting by events."""

    slots: int
    # Where ``slots`` came from, as a run says it (the width an auto search plans for).
    slots_source: str = "the backend's"
    # Its trials run real code on real machines, so measuring them means something
    # (a planned stage profiles its trainer first); a simulation's do not.
    measurable: bool = True
    # Its clock and trials are played, not run (a simulation): the journal needs no
    # fsync (nothing is lost in a crash), only kinds that need no files on disk can
    # run, and the results report the backend's clock beside the driver's.
    virtual: bool = False

    @abc.abstractmethod
    def now(self) -> float:
        """The backend's clock (monotonic seconds; virtual in a simulation)."""

    @abc.abstractmethod
    def fits(self, shape: Shape) -> bool:
        """Could an attempt of ``shape`` be launched now?"""

    @abc.abstractmethod
    def launch(self, launch: Launch) -> None:
        """Start an attempt; returns at once (``fits`` was checked)."""

    @abc.abstractmethod
    def cancel(self, key: str) -> None:
        """Kill an attempt's gang; its Ended event follows."""

    @abc.abstractmethod
    def wait(self, timeout: float | None) -> list[Event]:
        """Block until at least one event, ``timeout`` seconds of the backend's
        clock, or :meth:`wake`; return the events that arrived, oldest first."""

    @abc.abstractmethod
    def run_task(self, key: str, fn: Any, *args: Any) -> None:
        """Run ``fn(*args)`` off the loop (work a stage does between its trials:
        predictions of an ensemble's members); a TaskDone event follows."""

    @abc.abstractmethod
    def wake(self) -> None:
        """Make a blocked :meth:`wait` return (safe from a signal handler)."""

    @property
    @abc.abstractmethod
    def busy_slots(self) -> int:
        """Slots held by running attempts."""

    def progress_ages(self, keys: list[str]) -> dict[str, float | None]:
        """Seconds since each running attempt last showed progress (None: never).

        Asked only when an attempt's progress deadline comes. A backend that
        cannot tell says every attempt progresses."""
        return dict.fromkeys(keys, 0.0)

    def early_stopping(self, spec: Any, objective: Any) -> EarlyStopping | None:
        """The judge for a stage's ``early_stopping`` spec (None when it sets none).
        A backend that cannot judge its trials' reports refuses the spec."""
        if spec is None:
            return None
        raise ClusterError(f"{type(self).__name__} cannot run early_stopping, but the stage"
                           f" sets {spec!r}")

    def cluster_shortfall(self, shape: Shape) -> int:
        """Slots a new gang lacks because others on a shared cluster hold them."""
        return 0

    def cluster_size(self) -> int:
        """Slots the whole cluster has now (nodes may have left it)."""
        return self.slots

    @abc.abstractmethod
    def shutdown(self) -> None:
        """Kill every gang and free its slots."""
