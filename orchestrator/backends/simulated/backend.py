"""A simulated cluster on a virtual clock, for the very same scheduler code.

The scheduler (``StageScheduler``, ``TrialRunner``) only books slots through
:meth:`Backend.fits` and :meth:`Backend.launch`, reads time from
:meth:`Backend.now` and blocks in :meth:`Backend.wait`. So a backend that
keeps its own clock and jumps it to the next thing that happens runs a
10-hour sweep on 2,048 slots in seconds, with nothing of the scheduler
copied or stubbed: what is measured here is what runs on Ray.

What is modelled, as the real backend does it:

- ``nodes`` x ``slots_per_node`` slots. A gang of dp x mp ranks is dp
  model-parallel groups of mp consecutive ranks, and a group never straddles
  two nodes (its ranks talk on every layer); groups are packed best-fit, onto
  the fullest node that still holds one, so that whole nodes stay free for
  the widest groups.
- Warm gangs: a gang that ends its trial stays up, and the next trial of the
  same shape takes it with no start-up; a new gang takes ``startup_s`` (its
  slots are held, not busy) and evicts idle gangs of other shapes, oldest
  first, until it can be placed. A gang whose rank failed or died is thrown
  away, never reused.
- Trials: ``trial_model(config, rng)`` says how long an attempt runs and what
  it reports (a :class:`Draw`); :func:`lognormal_trials` draws heavy-tailed
  durations. The event carries a real ``trainers.TrialResult``, so the
  scheduler judges it exactly as it judges one from Ray.
- Faults: a rank failure (random, ``rank_failure_p`` per attempt, or scripted
  by attempt key in ``fail_keys``) ends its attempt with the failing rank's
  result, as the real backend does; a node failure (random, at ``node_mtbf_s``
  per node, or scripted in ``node_failures``) ends every attempt with a rank
  on that node as a dead rank, throws its gangs away and takes the node's
  slots for ``repair_s``, then gives them back.
- The allocation's end: with ``time_limit_s``, the driver is asked to stop at
  that virtual time, as Slurm's SIGTERM at a job's time limit asks it
  (:func:`orchestrator.backends.stopping.request_stop`); the scheduler kills what
  runs and stops, resumable.

Deterministic: every draw comes from an RNG seeded by ``seed`` and the
attempt's key (or, for node failures, by ``seed`` alone), so the same
scheduler decisions give the same run.

The backend also keeps a ledger of what each slot did (:attr:`attempts`,
:attr:`outages`) and the CPU time spent inside its own methods
(:attr:`cpu_s`), so that a benchmark can tell the scheduler's cost from the
simulator's.

>>> backend = SimulatedBackend(nodes=4, slots_per_node=8,
...                            trial_model=lognormal_trials(median_s=600), seed=1)
>>> run_workflow(workflow, backend, run_dir)               # doctest: +SKIP
"""

from __future__ import annotations

import bisect
import functools
import hashlib
import heapq
import itertools
import math
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from nestor.orchestrator.backends import stopping
from nestor.orchestrator.backends.interface import Backend, Ended, Event, Launch, Started, TaskDone
from nestor.orchestrator.backends.shape import Shape

DEFAULT_STARTUP_S = 30.0  # a new gang: placement, rendezvous, importing torch in each rank
DEFAULT_REPAIR_S = 4 * 3600.0  # a failed node: drained, rebooted or replaced, back in the pool

F = TypeVar("F", bound=Callable[..., Any])


class SimulationError(RuntimeError):
    """The simulation cannot go on: the scheduler asked for something that could
    never happen on a real cluster (such as waiting forever with nothing running)."""


@dataclass(frozen=True)
class Draw:
    """What one attempt does in the simulation: runs ``seconds`` of virtual time,
    then reports ``metrics``, or fails with ``failure`` (the trainer's own error:
    an exception, a diverged loss), as a trainer's result would say."""

    seconds: float
    metrics: dict[str, float] = field(default_factory=dict)
    failure: str | None = None

    def __post_init__(self) -> None:
        if not (isinstance(self.seconds, int | float) and math.isfinite(self.seconds)
                and self.seconds >= 0):
            raise ValueError(f"seconds must be a finite number >= 0, but got {self.seconds!r}")


TrialModel = Callable[[Mapping[str, Any], random.Random], Draw]
"""``(config, rng) -> Draw``: what an attempt of a trial with ``config`` does."""


def lognormal_trials(median_s: float, sigma: float = 1.0, *, metric: str = "val_accuracy",
                     noise: float = 0.01) -> TrialModel:
    """Durations drawn from a lognormal (``median_s``, shape ``sigma``: at 1.0 one
    trial in a hundred runs 10x the median), and a ``metric`` that a search can
    climb: 1 / (1 + the squared distance of the config's numbers from 0.3),
    plus a little noise. Categorical values do not matter to it.

    >>> model = lognormal_trials(600.0, sigma=1.0)
    >>> draw = model({"lr": 0.3}, random.Random(0))
    >>> round(draw.metrics["val_accuracy"], 1)
    1.0
    """
    if not median_s > 0:
        raise ValueError(f"median_s must be positive, but got {median_s!r}")
    if not sigma >= 0:
        raise ValueError(f"sigma must be at least 0, but got {sigma!r}")
    mu = math.log(median_s)

    def draw(config: Mapping[str, Any], rng: random.Random) -> Draw:
        seconds = rng.lognormvariate(mu, sigma) if sigma else median_s
        numbers = [float(v) for v in config.values()
                   if isinstance(v, int | float) and not isinstance(v, bool)]
        value = 1.0 / (1.0 + sum((v - 0.3) ** 2 for v in numbers)) + rng.gauss(0.0, noise)
        return Draw(seconds, {metric: value})

    return draw


def fixed_trials(seconds: float, value: Callable[[Mapping[str, Any]], float] | float = 0.5,
                 *, metric: str = "val_accuracy") -> TrialModel:
    """A scripted model: every attempt runs ``seconds`` and reports ``value`` (a
    number, or a function of the config)."""

    def draw(config: Mapping[str, Any], rng: random.Random) -> Draw:
        got = value(config) if callable(value) else value
        return Draw(seconds, {metric: float(got)})

    return draw


def _timed(method: F) -> F:
    """Count the CPU time spent in a public method as the simulator's own."""

    @functools.wraps(method)
    def wrapper(self: SimulatedBackend, *args: Any, **kwargs: Any) -> Any:
        if self._in_call:
            return method(self, *args, **kwargs)
        self._in_call = True
        begun = time.process_time()
        try:
            return method(self, *args, **kwargs)
        finally:
            self.cpu_s += time.process_time() - begun
            self._in_call = False

    return wrapper  # type: ignore[return-value]


@dataclass(eq=False)
class _Gang:
    id: int
    shape: Shape
    where: list[tuple[int, int]]  # (node, ranks there), in rank order
    busy: bool = True
    since: float = 0.0  # when it started or last became idle: eviction is oldest first
    attempt: SimAttempt | None = None

    def rank_on(self, node: int) -> int:
        """The first rank of this gang on ``node`` (-1 if none)."""
        rank = 0
        for where, count in self.where:
            if where == node:
                return rank
            rank += count
        return -1


@dataclass(eq=False)
class SimAttempt:
    """The ledger's record of one attempt: when it was launched, when its gang ran
    it (None if it never did), when it ended and how."""

    key: str
    shape: Shape
    gang: int
    launched: float
    startup_s: float = 0.0
    started: float | None = None
    ended: float | None = None
    outcome: str = "running"  # ok, failed (the trainer), rank_failed, node_lost, cancelled
    where: tuple[tuple[int, int], ...] = ()  # (node, ranks there), in rank order

    @property
    def nodes(self) -> tuple[int, ...]:
        return tuple(node for node, _ in self.where)

    @property
    def ranks(self) -> int:
        return self.shape.ranks


@dataclass(frozen=True)
class Outage:
    """A node out of the cluster from ``start`` until its repair at ``end`` (which
    may lie past the end of the run)."""

    node: int
    start: float
    end: float


class SimulatedBackend(Backend):
    """``nodes`` x ``slots_per_node`` slots on a virtual clock (see the module)."""

    measurable = False  # nothing real runs: a planned stage plans from what is cached
    virtual = True

    def __init__(
        self,
        nodes: int,
        slots_per_node: int,
        trial_model: TrialModel,
        *,
        seed: int = 0,
        startup_s: float | Callable[[Shape, random.Random], float] = DEFAULT_STARTUP_S,
        rank_failure_p: float = 0.0,
        fail_keys: Mapping[str, float] | None = None,
        node_mtbf_s: float | None = None,
        node_failures: Sequence[tuple[float, int]] = (),
        repair_s: float = DEFAULT_REPAIR_S,
        time_limit_s: float | None = None,
    ) -> None:
        if not isinstance(nodes, int) or nodes < 1:
            raise ValueError(f"nodes must be a positive integer, but got {nodes!r}")
        if not isinstance(slots_per_node, int) or slots_per_node < 1:
            raise ValueError(
                f"slots_per_node must be a positive integer, but got {slots_per_node!r}")
        if not 0.0 <= rank_failure_p <= 1.0:
            raise ValueError(f"rank_failure_p must be between 0 and 1, but got {rank_failure_p!r}")
        if node_mtbf_s is not None and not node_mtbf_s > 0:
            raise ValueError(f"node_mtbf_s must be positive or None, but got {node_mtbf_s!r}")
        if not repair_s > 0:
            raise ValueError(f"repair_s must be positive, but got {repair_s!r}")
        if time_limit_s is not None and not time_limit_s > 0:
            raise ValueError(f"time_limit_s must be positive or None, but got {time_limit_s!r}")
        for at, node in node_failures:
            if not 0 <= node < nodes:
                raise ValueError(f"node_failures: node must be in 0..{nodes - 1}, but got {node}")
            if not at >= 0:
                raise ValueError(f"node_failures: time must be >= 0, but got {at}")
        for key, fraction in (fail_keys or {}).items():
            if not 0.0 <= fraction <= 1.0:
                raise ValueError(f"fail_keys[{key!r}] must be a fraction of the attempt's"
                                 f" duration between 0 and 1, but got {fraction!r}")
        self.nodes = nodes
        self.slots_per_node = slots_per_node
        self.slots = nodes * slots_per_node
        self.slots_source = f"a simulated cluster of {nodes} x {slots_per_node}"
        self.trial_model = trial_model
        self.seed = seed
        self.startup_s = startup_s
        self.rank_failure_p = rank_failure_p
        self.fail_keys = dict(fail_keys or {})
        self.node_mtbf_s = node_mtbf_s
        self.repair_s = repair_s
        self.time_limit_s = time_limit_s
        self.stopped_at_limit = False  # the time limit was reached and a stop requested

        self._now = 0.0
        self._heap: list[tuple[float, int, str, Any]] = []
        self._order = itertools.count()
        self._ready: list[Event] = []  # events due now, delivered by the next wait
        self._woken = False
        self._in_call = False
        self._gang_ids = itertools.count(1)
        self._node_rng = random.Random(_seed(seed, "nodes"))
        # Per node: slots no gang holds (0 while the node is down), slots idle gangs hold.
        self._free = [slots_per_node] * nodes
        self._idle = [0] * nodes
        self._up = [True] * nodes
        # Nodes counted by free, and by free + idle slots: fits() in O(slots_per_node).
        self._by_free = [0] * (slots_per_node + 1)
        self._by_avail = [0] * (slots_per_node + 1)
        self._by_free[slots_per_node] = self._by_avail[slots_per_node] = nodes
        # And the nodes themselves by free slots, each level in node order: a placement
        # takes the first few of the fullest levels that hold a group, not a sort of
        # 4,096 nodes per gang (gangs.place's order, kept exactly).
        self._nodes_by_free: list[list[int]] = [[] for _ in range(slots_per_node + 1)]
        self._nodes_by_free[slots_per_node] = list(range(nodes))
        self._gangs: dict[int, _Gang] = {}
        self._idle_gangs: dict[Shape, list[_Gang]] = {}
        self._running: dict[str, tuple[SimAttempt, _Gang]] = {}  # by key, starting or running

        # The ledger, for reports and tests.
        self.attempts: list[SimAttempt] = []
        self.outages: list[Outage] = []
        self.cpu_s = 0.0  # CPU time inside this backend's methods
        self.events_delivered = 0
        self.gangs_started = 0
        self.gangs_reused = 0
        self.gangs_evicted = 0
        self.node_failures = 0

        for at, node in node_failures:
            self._schedule(at, "node_fail", node)
        if node_mtbf_s is not None:
            self._schedule(self._next_failure_gap(), "node_fail", None)

    # -- the Backend surface ------------------------------------------------------------

    def now(self) -> float:
        return self._now

    @_timed
    def fits(self, shape: Shape) -> bool:
        if self._idle_gangs.get(shape):
            return True
        mp = shape.model
        return sum(count * (k // mp) for k, count in enumerate(self._by_avail)
                   if k >= mp) >= shape.data

    @property
    def busy_slots(self) -> int:
        return sum(g.shape.ranks for g in self._gangs.values() if g.busy)

    @property
    def down_slots(self) -> int:
        """Slots on nodes out for repair."""
        return self.slots_per_node * sum(1 for up in self._up if not up)

    def cluster_shortfall(self, shape: Shape) -> int:
        """Slots a gang of ``shape`` lacks only because nodes are out for repair:
        they come back, so the scheduler waits for them rather than giving up."""
        if self.fits(shape) or not self.down_slots:
            return 0
        return min(self.down_slots, shape.ranks)

    def cluster_size(self) -> int:
        """Every node's slots, those under repair included: they come back."""
        return self.slots

    @_timed
    def launch(self, launch: Launch) -> None:
        if launch.key in self._running:
            raise ValueError(f"an attempt with key {launch.key!r} is already running")
        shape = launch.shape
        idle = self._idle_gangs.get(shape)
        if idle:
            gang = idle.pop(0)
            self._take_idle(gang)
            startup = 0.0
            self.gangs_reused += 1
        else:
            where = self._make_room(shape)
            if where is None:
                record = SimAttempt(launch.key, shape, 0, self._now, ended=self._now,
                                    outcome="unplaced")
                self.attempts.append(record)
                self._ready.append(Ended(launch.key, self._now, failure=(
                    f"could not place a {shape} gang: {self._free_summary()}"), started=False))
                return
            gang = _Gang(next(self._gang_ids), shape, where, since=self._now)
            for node, count in where:
                self._set(node, free=self._free[node] - count)
            self._gangs[gang.id] = gang
            rng = self._rng(launch.key, "startup")
            startup = (self.startup_s(shape, rng) if callable(self.startup_s)
                       else float(self.startup_s))
            self.gangs_started += 1
        record = SimAttempt(launch.key, shape, gang.id, self._now, startup_s=startup,
                            where=tuple(gang.where))
        self.attempts.append(record)
        gang.attempt = record
        self._running[launch.key] = (record, gang)
        self._schedule(self._now + startup, "start", (record, launch))

    @_timed
    def cancel(self, key: str) -> None:
        if key not in self._running:
            return
        record, gang = self._running[key]
        started = record.started is not None
        self._close(record, gang, "cancelled", keep_gang=False)
        self._ready.append(Ended(key, self._now, failure="cancelled", started=started))

    @_timed
    def wait(self, timeout: float | None) -> list[Event]:
        if self._woken or self._ready:
            self._woken = False
            return self._deliver()
        limit = math.inf if timeout is None else self._now + max(timeout, 0.0)
        at_limit = (self.time_limit_s is not None and not self.stopped_at_limit
                    and limit >= self.time_limit_s)
        if at_limit:
            limit = self.time_limit_s  # type: ignore[assignment]
        while self._heap and self._heap[0][0] <= limit:
            if limit == math.inf and not self._running:
                break  # only node failures and repairs are left: nothing to wait for
            at = self._heap[0][0]
            self._now = max(self._now, at)
            while self._heap and self._heap[0][0] == at:
                _, _, kind, payload = heapq.heappop(self._heap)
                getattr(self, f"_on_{kind}")(payload)
            if self._ready:
                return self._deliver()
        if at_limit:
            self._now = max(self._now, limit)
            self.stopped_at_limit = True
            stopping.request_stop("SIGTERM")  # what Slurm sends at the job's time limit
            return []
        if limit == math.inf:
            raise SimulationError(
                "the scheduler waits for an event with no attempt starting or running:"
                " on a real cluster it would block forever")
        self._now = max(self._now, limit)
        return []

    def run_task(self, key: str, fn: Any, *args: Any) -> None:
        """Runs at once, in no virtual time (a simulation's stages need no predictions)."""
        try:
            self._ready.append(TaskDone(key, self._now, fn(*args)))
        except Exception as exc:
            self._ready.append(TaskDone(key, self._now, error=f"{type(exc).__name__}: {exc}"))

    def wake(self) -> None:
        self._woken = True

    @_timed
    def shutdown(self) -> None:
        """Kill what runs; withdraw the stop request this backend's time limit made."""
        if self.stopped_at_limit:
            stopping.clear()
        for key in list(self._running):
            record, gang = self._running[key]
            self._close(record, gang, "cancelled", keep_gang=False)
        for gang in list(self._gangs.values()):
            self._drop(gang)
        self._ready.clear()

    # -- what happens, at its virtual time ------------------------------------------------

    def _on_start(self, payload: tuple[SimAttempt, Launch]) -> None:
        record, launch = payload
        if record.ended is not None:
            return  # cancelled or lost while its gang started
        record.started = self._now
        # launch.gate is not waited on: a simulated rank acts on nothing outside the
        # driver (a real one waits for it in its attempt thread, off the loop).
        rng = self._rng(launch.key, "trial")
        draw = self.trial_model(getattr(launch.request, "config", {}) or {}, rng)
        fraction = self.fail_keys.get(launch.key)
        if fraction is None and self.rank_failure_p and rng.random() < self.rank_failure_p:
            fraction = rng.random()
        if fraction is not None:
            rank = rng.randrange(launch.shape.ranks)
            self._schedule(self._now + fraction * draw.seconds, "rank_fail",
                           (record, launch, rank))
        else:
            self._schedule(self._now + draw.seconds, "end", (record, launch, draw))
        self._ready.append(Started(launch.key, record.gang, self._now, record.startup_s))

    def _on_end(self, payload: tuple[SimAttempt, Launch, Draw]) -> None:
        record, launch, draw = payload
        if record.ended is not None:
            return
        from nestor.trainers import ResultStatus, TrialResult

        result = TrialResult(
            trial_id=_trial_id(launch),
            status=ResultStatus.FAILED if draw.failure else ResultStatus.OK,
            reason=draw.failure, metrics={**draw.metrics, "wall_time": draw.seconds},
            # where a real trial leaves its checkpoint: later trials may carry on from it
            checkpoint=None if draw.failure else getattr(launch.request, "checkpoint_dir", None))
        _, gang = self._running[launch.key]
        self._close(record, gang, "failed" if draw.failure else "ok", keep_gang=True)
        self._ready.append(Ended(launch.key, self._now, result))

    def _on_rank_fail(self, payload: tuple[SimAttempt, Launch, int]) -> None:
        record, launch, rank = payload
        if record.ended is not None:
            return
        from nestor.trainers import ResultStatus, TrialResult

        # As the real backend reports it: the failing rank's result, its peers killed,
        # the gang thrown away.
        result = TrialResult(trial_id=_trial_id(launch), status=ResultStatus.FAILED,
                             reason=f"rank {rank}: simulated rank failure")
        _, gang = self._running[launch.key]
        self._close(record, gang, "rank_failed", keep_gang=False)
        self._ready.append(Ended(launch.key, self._now, result))

    def _on_node_fail(self, node: int | None) -> None:
        if node is None:  # the random failure process: pick an up node, plan the next
            up = [n for n, ok in enumerate(self._up) if ok]
            if self.node_mtbf_s is not None:
                self._schedule(self._now + self._next_failure_gap(), "node_fail", None)
            if not up:
                return
            node = self._node_rng.choice(up)
        if not self._up[node]:
            return
        self.node_failures += 1
        for gang in [g for g in self._gangs.values() if any(n == node for n, _ in g.where)]:
            record = gang.attempt if gang.busy else None
            if record is not None and record.ended is None:
                started = record.started is not None
                self._close(record, gang, "node_lost", keep_gang=False)
                self._ready.append(Ended(record.key, self._now, failure=(
                    f"rank {gang.rank_on(node)} of gang {gang.id} died: simulated loss of"
                    f" node {node}"), started=started))
            else:
                self._drop(gang)
        self._up[node] = False
        self._set(node, free=0, idle=0)
        self.outages.append(Outage(node, self._now, self._now + self.repair_s))
        self._schedule(self._now + self.repair_s, "node_repair", node)

    def _on_node_repair(self, node: int) -> None:
        self._up[node] = True
        self._set(node, free=self.slots_per_node, idle=0)

    # -- slots and gangs ------------------------------------------------------------------

    def _close(self, record: SimAttempt, gang: _Gang, outcome: str, *, keep_gang: bool) -> None:
        """End an attempt: its gang goes back to the pool warm, or is thrown away."""
        record.ended, record.outcome = self._now, outcome
        self._running.pop(record.key, None)
        gang.attempt = None
        if keep_gang:
            gang.busy, gang.since = False, self._now
            self._idle_gangs.setdefault(gang.shape, []).append(gang)
            for node, count in gang.where:
                self._set(node, idle=self._idle[node] + count)
        else:
            self._drop(gang)

    def _drop(self, gang: _Gang) -> None:
        """Throw a gang away; its slots on nodes that are up become free."""
        if self._gangs.pop(gang.id, None) is None:
            return
        if not gang.busy:
            self._idle_gangs[gang.shape].remove(gang)
        for node, count in gang.where:
            if not self._up[node]:
                continue
            if gang.busy:
                self._set(node, free=self._free[node] + count)
            else:
                self._set(node, free=self._free[node] + count, idle=self._idle[node] - count)

    def _take_idle(self, gang: _Gang) -> None:
        gang.busy = True
        for node, count in gang.where:
            self._set(node, idle=self._idle[node] - count)

    def _make_room(self, shape: Shape) -> list[tuple[int, int]] | None:
        """A placement for a new gang, evicting idle gangs (oldest first) as needed."""
        where = self._place(shape)
        if where is not None:
            return where
        idle = sorted((g for gangs in self._idle_gangs.values() for g in gangs),
                      key=lambda g: (g.since, g.id))
        for gang in idle:
            self._drop(gang)
            self.gangs_evicted += 1
            where = self._place(shape)
            if where is not None:
                return where
        return None

    def _place(self, shape: Shape) -> list[tuple[int, int]] | None:
        """:func:`orchestrator.backends.ray.gangs.place` on the free slots: each mp
        group on one node, best-fit (fewest free slots that hold a group, then the
        lowest node), read off the nodes kept by free slots."""
        mp, groups = shape.model, shape.data
        levels = range(mp, self.slots_per_node + 1)
        if sum(self._by_free[k] * (k // mp) for k in levels) < groups:
            return None
        out = []
        for k in levels:
            per = k // mp
            for node in self._nodes_by_free[k]:
                take = min(per, groups)
                out.append((node, take * mp))
                groups -= take
                if not groups:
                    return out
        raise AssertionError("the free-slot counts and the nodes by free slots disagree")

    def _set(self, node: int, *, free: int | None = None, idle: int | None = None) -> None:
        """Change a node's free and idle slots, keeping the counts fits() reads."""
        old_free, old_idle = self._free[node], self._idle[node]
        new_free = old_free if free is None else free
        new_idle = old_idle if idle is None else idle
        if min(new_free, new_idle) < 0 or new_free + new_idle > self.slots_per_node:
            raise AssertionError(f"node {node}: free {new_free} + idle {new_idle} slots"
                                 f" out of 0..{self.slots_per_node}")
        self._by_free[old_free] -= 1
        self._by_free[new_free] += 1
        if new_free != old_free:
            level = self._nodes_by_free[old_free]
            del level[bisect.bisect_left(level, node)]
            bisect.insort(self._nodes_by_free[new_free], node)
        self._by_avail[old_free + old_idle] -= 1
        self._by_avail[new_free + new_idle] += 1
        self._free[node], self._idle[node] = new_free, new_idle

    def _free_summary(self) -> str:
        up = sum(self._up)
        return (f"{sum(self._free)} free and {sum(self._idle)} idle slots on {up} of"
                f" {self.nodes} nodes")

    # -- clock and randomness -------------------------------------------------------------

    def _schedule(self, at: float, kind: str, payload: Any) -> None:
        heapq.heappush(self._heap, (at, next(self._order), kind, payload))

    def _deliver(self) -> list[Event]:
        out, self._ready = self._ready, []
        self.events_delivered += len(out)
        return out

    def _next_failure_gap(self) -> float:
        assert self.node_mtbf_s is not None
        up = max(sum(self._up), 1)
        return self._node_rng.expovariate(up / self.node_mtbf_s)

    def _rng(self, key: str, purpose: str) -> random.Random:
        return random.Random(_seed(self.seed, f"{purpose}/{key}"))


def _seed(seed: int, text: str) -> int:
    """A stable 64-bit seed from the run's seed and a name (no PYTHONHASHSEED in it)."""
    digest = hashlib.blake2b(f"{seed}/{text}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def _trial_id(launch: Launch) -> str:
    return str(getattr(launch.request, "trial_id", launch.key))
