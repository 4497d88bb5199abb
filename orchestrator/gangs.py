"""Warm Horovod gangs on Ray, reused by trials of the same shape.

Starting a 2-rank ``horovod.ray.RayExecutor`` costs about 1.8 s here and a
placement group about 0.5 s, while running one more function on a warm gang
costs milliseconds (DESIGN.md). So a gang, once started, is kept and handed
to the next trial of the same data x model shape. Each gang's ranks sit in
one PACK placement group (Horovod's own PGStrategy), and the pool never
holds more ranks than it has slots unless told to oversubscribe: an idle gang
of another shape is shut down to make room.

A gang whose rank died, or that ran past a trial's timeout, is discarded
(its actors killed, its placement group removed) rather than reused, so the
next trial gets fresh processes.

Hangs are caught twice. A rank that stops answering (SIGSTOP, a dead NFS
mount) leaves the trial past its timeout: the gang is killed. A collective
that some rank never joins is also caught by Horovod itself: its ranks run
with ``HOROVOD_STALL_CHECK_TIME_SECONDS`` (warn) and
``HOROVOD_STALL_SHUTDOWN_TIME_SECONDS`` (shut Horovod down) set, so the
waiting ranks fail with an error instead of waiting for the trial timeout, and
a gang in which any rank's Horovod failed is discarded too: its ranks no
longer agree on what is initialised.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger(__name__)
# How long Horovod waits for Ray to place a new gang's ranks before the attempt fails.
PLACEMENT_TIMEOUT_S = int(os.environ.get("NESTOR_PLACEMENT_TIMEOUT_S", "100"))


def slot_resource() -> str:
    """What one slot is on the connected Ray cluster: a GPU where it has any, else a CPU."""
    import ray

    return "GPU" if ray.cluster_resources().get("GPU") else "CPU"


def cluster_slot_counts(resource: str) -> tuple[int, int]:
    """The connected Ray cluster's ``resource`` slots now: (all, free)."""
    import ray

    return (int(ray.cluster_resources().get(resource, 0)),
            int(ray.available_resources().get(resource, 0)))


@dataclass(frozen=True, order=True)
class Shape:
    """The ranks of one trial: data-parallel x model-parallel."""

    data: int = 1
    model: int = 1

    def __post_init__(self) -> None:
        for name in ("data", "model"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, but got {value!r}")

    @property
    def ranks(self) -> int:
        return self.data * self.model

    def __str__(self) -> str:
        return f"{self.data}x{self.model}"


# Horovod's stall checks for gang ranks (seconds); the driver's environment, or
# the pool's ``env``, may set others. Horovod's own defaults are 60 s and never.
# The shutdown is generous: a rank may legitimately work alone (rank 0 testing
# a model) while the others wait in a collective.
STALL_ENV = {
    "HOROVOD_STALL_CHECK_TIME_SECONDS": "60",
    "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS": "300",
}
# Rank failures after which the gang's Horovod state is not to be trusted.
HOROVOD_BROKE = ("HorovodInternalError", "Horovod has been shut down")


def stall_env(env: dict[str, str] | None = None) -> dict[str, str]:
    """The ranks' environment: ``env`` over this process's settings over STALL_ENV."""
    merged = {key: os.environ.get(key, value) for key, value in STALL_ENV.items()}
    merged.update(env or {})
    return merged


def horovod_broke(result: Any) -> bool:
    """Did this rank's trial fail inside Horovod (a stall shutdown, a lost peer)?"""
    text = f"{getattr(result, 'reason', '') or ''}\n{getattr(result, 'details', '') or ''}"
    return getattr(result, "status", None) == "failed" and any(w in text for w in HOROVOD_BROKE)


class GangFailure(RuntimeError):
    """A rank of the gang died or stopped answering; the gang is unusable."""


class GangTimeout(GangFailure):
    """The function ran past its deadline; the gang was killed."""


class GangStartError(RuntimeError):
    """Ray could not place or start the ranks (a placement group never ready, a
    worker lost while starting): the trial's attempt fails and is retried, the
    driver goes on."""


@dataclass
class Gang:
    """One started RayExecutor of ``shape.ranks`` Horovod ranks."""

    id: int
    shape: Shape
    executor: Any
    started_s: float
    trials_run: int = 0
    busy: bool = False
    broken: bool = False
    pending: list[Any] = field(default_factory=list)
    killed: bool = False
    _kill_lock: threading.Lock = field(default_factory=threading.Lock, repr=False,
                                       compare=False)

    def submit(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> list[Any]:
        """Start ``fn(*args, **kwargs)`` on every rank; returns one ObjectRef per rank."""
        if self.broken:
            raise GangFailure(f"gang {self.id} is broken and cannot run anything")
        self.pending = self.executor.run_remote(fn, args=list(args), kwargs=kwargs)
        self.trials_run += 1
        return self.pending

    def collect(self, timeout_s: float | None = None) -> list[Any]:
        """Wait for the submitted function on all ranks and return their results.

        A rank that died raises GangFailure; a deadline that passes raises
        GangTimeout. Either marks the gang broken: the pool discards it. Ranks
        that already ended are read first, so a dead rank is reported at once
        rather than after waiting on the ranks it left stuck in a collective.
        """
        import ray
        from ray.exceptions import GetTimeoutError, RayActorError, RayError

        ready, _ = ray.wait(self.pending, num_returns=len(self.pending), timeout=0)
        try:
            for ref in ready:
                ray.get(ref)
            results = ray.get(self.pending, timeout=timeout_s)
            if any(horovod_broke(r) for r in results):
                self.broken = True  # the trial's failure is reported; the gang is not reused
                log.warning("gang %s: Horovod failed in a rank; the gang will be rebuilt", self.id)
            return results
        except GetTimeoutError:
            self.broken = True
            raise GangTimeout(f"gang {self.id} ran past its {timeout_s:g} s deadline") from None
        except RayActorError as exc:
            self.broken = True
            raise GangFailure(f"a rank of gang {self.id} died: {first_line(exc)}") from None
        except RayError as exc:  # anything else Ray could not deliver: the gang is suspect
            self.broken = True
            raise GangFailure(f"a rank of gang {self.id} failed: {first_line(exc)}") from None
        finally:
            self.pending = []

    def pids(self) -> list[int]:
        """Process ids of the ranks, in rank order (for tests and chaos drivers)."""
        import os

        return self.executor.run(os.getpid)

    def kill(self) -> None:
        """Kill the ranks and remove the placement group; safe to call again, from
        any thread (a cancel and the attempt's own end may both do it)."""
        import ray

        with self._kill_lock:
            if self.executor is None or self.killed:  # never started, or done already
                return
            self.killed = True
            adapter = getattr(self.executor, "adapter", None)
            for worker in getattr(adapter, "workers", None) or []:
                try:
                    ray.kill(worker, no_restart=True)
                except Exception:  # already dead; nothing else to clean
                    log.debug("rank of gang %s already gone", self.id)
            try:
                self.executor.shutdown()
            except Exception:
                log.debug("shutdown of gang %s raised; its placement group may be gone",
                          self.id)


def first_line(exc: BaseException) -> str:
    """An exception in one line, for a journal reason or a log (its type if it is silent)."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


class GangPool:
    """Hands out warm gangs by shape, within a fixed number of slots.

    >>> pool = GangPool(slots=2)                          # doctest: +SKIP
    >>> gang = pool.acquire(Shape(data=2))                # doctest: +SKIP
    >>> gang.submit(train, config); gang.collect()        # doctest: +SKIP
    >>> pool.release(gang)                                # kept warm for the next 2x1 trial
    """

    def __init__(
        self,
        slots: int,
        *,
        oversubscribe: bool = False,
        use_gpu: bool = False,
        rendezvous_timeout_s: int = 60,
        placement_timeout_s: int = PLACEMENT_TIMEOUT_S,
        env: dict[str, str] | None = None,
        executor_factory: Callable[[Shape], Any] | None = None,
        shared: bool = False,
    ) -> None:
        if slots < 1:
            raise ValueError(f"slots must be at least 1, but got {slots}")
        self.slots = slots
        self.oversubscribe = oversubscribe
        self.use_gpu = use_gpu
        self.rendezvous_timeout_s = rendezvous_timeout_s
        self.placement_timeout_s = placement_timeout_s
        # On a cluster other drivers use, this pool's own count is not enough: a new
        # gang also needs the cluster's free slots, or Horovod waits for them until
        # its placement timeout.
        self.shared = shared
        self.env = stall_env(env)
        self._factory = executor_factory or self._start_executor
        self._gangs: list[Gang] = []
        self._ids = itertools.count(1)
        # Held around every change to the gangs; a backend that starts gangs in
        # threads holds it too while it books, releases and counts.
        self.lock = threading.RLock()
        self.started = 0  # gangs started over the pool's life, for reports and tests

    # -- accounting -------------------------------------------------------------------

    @property
    def gangs(self) -> Sequence[Gang]:
        return tuple(self._gangs)

    @property
    def used_slots(self) -> int:
        return sum(g.shape.ranks for g in self._gangs)

    @property
    def busy_slots(self) -> int:
        return sum(g.shape.ranks for g in self._gangs if g.busy)

    def fits(self, shape: Shape) -> bool:
        """Could a trial of this shape start now (reusing or evicting idle gangs)?"""
        if any(not g.busy and not g.broken and g.shape == shape for g in self._gangs):
            return True
        return self._room(shape) and not self.cluster_shortfall(shape)

    def _room(self, shape: Shape) -> bool:
        """By this pool's own count (what other drivers hold can change under it)."""
        return self.oversubscribe or self.busy_slots + shape.ranks <= self.slots

    def cluster_shortfall(self, shape: Shape) -> int:
        """Slots a new gang of ``shape`` lacks because other drivers hold them (0 when
        the cluster is this pool's alone). Idle gangs of this pool count as free:
        ``acquire`` shuts them down to make room."""
        free = self._cluster_free()
        if free is None:
            return 0
        idle = sum(g.shape.ranks for g in self._gangs if not g.busy)
        return max(0, shape.ranks - free - idle)

    def cluster_size(self) -> int:
        """The slots the whole Ray cluster has now (nodes may have left it)."""
        return cluster_slot_counts(self._slot_resource)[0]

    def _cluster_free(self) -> int | None:
        if not self.shared:
            return None
        return cluster_slot_counts(self._slot_resource)[1]

    @property
    def _slot_resource(self) -> str:
        return "GPU" if self.use_gpu else "CPU"

    # -- life cycle -------------------------------------------------------------------

    def acquire(self, shape: Shape) -> Gang:
        """A warm idle gang of ``shape``, or a new one if the slots allow, started.

        Raises RuntimeError when the busy gangs leave too few slots; callers
        check ``fits`` first. The scheduler uses ``reserve`` and ``start``
        instead, so that a slow start-up runs off its loop.
        """
        gang, evicted = self.reserve(shape)
        for old in evicted:
            old.kill()
        if gang.executor is None:
            self.start(gang)
        return gang

    def reserve(self, shape: Shape) -> tuple[Gang, list[Gang]]:
        """Book a gang of ``shape`` at once: a warm idle one, or the slots for a new
        one (``executor`` None until ``start``). Returns it and the idle gangs of
        other shapes evicted to make room; the caller kills those (slowly, off
        the scheduling loop). Cheap: no Ray call but, on a shared cluster, one
        look at its free slots."""
        if shape.ranks > self.slots and not self.oversubscribe:
            raise ValueError(
                f"a trial of {shape} needs {shape.ranks} slots but the pool has {self.slots}"
            )
        for gang in self._gangs:
            if not gang.busy and not gang.broken and gang.shape == shape:
                gang.busy = True
                return gang, []
        if not self._room(shape):
            raise RuntimeError(
                f"no room for a {shape} gang: {self.busy_slots} of {self.slots} slots are busy"
            )
        # Make room: evict idle gangs of other shapes, oldest first, until both
        # this pool and (when shared) the cluster have the slots.
        free, freed, evicted = self._cluster_free(), 0, []
        for gang in sorted((g for g in self._gangs if not g.busy), key=lambda g: g.started_s):
            room_here = self.used_slots + shape.ranks <= self.slots
            room_there = free is None or free + freed >= shape.ranks
            if self.oversubscribe or (room_here and room_there):
                break
            freed += gang.shape.ranks
            self._gangs.remove(gang)
            evicted.append(gang)
        gang = Gang(next(self._ids), shape, None, started_s=time.monotonic(), busy=True)
        self._gangs.append(gang)
        return gang, evicted

    def start(self, gang: Gang) -> None:
        """Start a reserved gang's ranks (seconds: placement, rendezvous, imports).

        Safe to call from a thread other than the one that reserved the gang.
        A gang that cannot start leaves the pool and raises GangStartError."""
        start = time.monotonic()
        try:
            executor = self._factory(gang.shape)
        except Exception as exc:
            self.forget(gang)
            raise GangStartError(
                f"could not start a {gang.shape} gang: {first_line(exc)}") from exc
        with self.lock:
            gang.executor = executor
            gang.started_s = time.monotonic()
            self.started += 1
        log.info("started gang %s (%s) in %.2f s", gang.id, gang.shape,
                 time.monotonic() - start)

    def release(self, gang: Gang) -> None:
        """Return a gang after a trial: kept warm if healthy, discarded if broken."""
        gang.busy = False
        if gang.broken:
            self.discard(gang)

    def discard(self, gang: Gang) -> None:
        """Kill a gang's ranks and free its slots."""
        self.forget(gang)
        gang.kill()

    def forget(self, gang: Gang) -> None:
        """Free a gang's slots without killing it (the caller kills it, or it is dead)."""
        with self.lock:
            if gang in self._gangs:
                self._gangs.remove(gang)

    def shutdown(self) -> None:
        for gang in list(self._gangs):
            self.discard(gang)

    def __enter__(self) -> GangPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    def _start_executor(self, shape: Shape) -> Any:
        import ray
        from horovod.ray import RayExecutor

        settings = RayExecutor.create_settings(
            timeout_s=self.rendezvous_timeout_s,
            placement_group_timeout_s=self.placement_timeout_s)
        groups_before = set(ray.util.placement_group_table())
        executor = RayExecutor(
            settings,
            num_workers=shape.ranks,
            cpus_per_worker=1,  # oversubscribing is Ray's logical CPU count, not this
            use_gpu=self.use_gpu,
            gpus_per_worker=1 if self.use_gpu else None,
            use_current_placement_group=False,
        )
        try:
            executor.start(extra_env_vars=self.env)
        except BaseException:
            with contextlib.suppress(Exception):
                executor.shutdown()
            _remove_pending_groups(groups_before)
            raise
        return executor


def _remove_pending_groups(before: set[str]) -> None:
    """Remove this driver's placement groups made since ``before`` and never placed.

    Horovod's RayExecutor leaves the group it was waiting for when placement
    times out; still pending, it would take slots the moment they free up and
    hold them for the rest of the run. A group's id ends with its job's id."""
    import ray
    from ray._raylet import PlacementGroupID
    from ray.util.placement_group import PlacementGroup, remove_placement_group

    job = ray.get_runtime_context().get_job_id()
    for group_id, info in ray.util.placement_group_table().items():
        if group_id in before or not group_id.endswith(job) or info["state"] != "PENDING":
            continue
        with contextlib.suppress(Exception):
            remove_placement_group(PlacementGroup(PlacementGroupID(bytes.fromhex(group_id))))
            log.info("removed placement group %s that never got its slots", group_id)
