"""The real backend: attempts on warm Horovod gangs of Ray actors.

Each launched attempt gets a thread that starts its gang when it needs a new
one, submits the trial to every rank and waits on the ranks one at a time, so
the scheduling loop itself only books slots and reads events: 32 gangs start
side by side instead of one after another, and no slow ``RayExecutor.start``
holds up the deadlines of other trials.

A rank that fails ends its gang's attempt at once. Its peers may be waiting
in a collective it will never join (Horovod's stall shutdown does not fire on
the Gloo build), so after a short grace, in which ranks that fail the same
way (a bad option fails every rank) may still return, the gang is killed and
left to the pool to rebuild. A rank that died (its actor gone) does the same.
"""

from __future__ import annotations

import dataclasses
import logging
import queue
import threading
import time
from typing import Any

from nestor.orchestrator.backends import stopping
from nestor.orchestrator.backends.interface import (
    Backend,
    EarlyStopping,
    Ended,
    Event,
    Launch,
    Started,
    TaskDone,
)
from nestor.orchestrator.backends.ray.gangs import (
    Gang,
    GangPool,
    GangStartError,
    Shape,
    horovod_broke,
    how_it_died,
)
from nestor.orchestrator.backends.ray.heartbeat import Beat, BoardKeeper
from nestor.orchestrator.journal.text import first_line

log = logging.getLogger(__name__)

FAILURE_GRACE_S = 2.0  # how long the peers of a failed rank may take to return too
_WAKE = object()


class RayBackend(Backend):
    """Runs attempts on the gangs of a :class:`~orchestrator.backends.ray.gangs.GangPool`.

    >>> backend = RayBackend(GangPool(slots=4))                     # doctest: +SKIP
    >>> backend.launch(Launch("tune/t1#1", Shape(2), request))      # doctest: +SKIP
    >>> backend.wait(None)                                          # doctest: +SKIP
    [Started(key='tune/t1#1', gang=1, ...)]
    """

    def __init__(self, pool: GangPool, *, failure_grace_s: float = FAILURE_GRACE_S) -> None:
        self.pool = pool
        self.slots = pool.slots
        self.failure_grace_s = failure_grace_s
        self._events: queue.SimpleQueue[Any] = queue.SimpleQueue()  # put is signal-safe
        self._gangs: dict[str, Gang] = {}  # running attempt -> its gang
        self._cancelled: set[str] = set()
        self._board = BoardKeeper()  # the ProgressBoard actor, made once one is needed

    def now(self) -> float:
        return time.monotonic()

    def fits(self, shape: Shape) -> bool:
        with self.pool.lock:
            return self.pool.fits(shape)

    @property
    def busy_slots(self) -> int:
        return self.pool.busy_slots

    def cluster_shortfall(self, shape: Shape) -> int:
        return self.pool.cluster_shortfall(shape)

    def cluster_size(self) -> int:
        return self.pool.cluster_size()

    def launch(self, launch: Launch) -> None:
        launch = dataclasses.replace(
            launch, hooks={**launch.hooks,
                           "heartbeat": Beat(self._board.name, launch.key, launch.beat_every_s)})
        self._board.launched(launch.key, launch.beat_every_s)
        with self.pool.lock:
            gang, evicted = self.pool.reserve(launch.shape)
            self._gangs[launch.key] = gang
        threading.Thread(target=self._attempt, args=(launch, gang, evicted), daemon=True,
                         name=f"nestor-attempt-{launch.key}").start()

    def cancel(self, key: str) -> None:
        with self.pool.lock:
            gang = self._gangs.get(key)
            if gang is None:
                return
            self._cancelled.add(key)
            gang.broken = True
        # The ranks' waits in the attempt's thread fail once the actors are gone.
        threading.Thread(target=gang.kill, daemon=True, name=f"nestor-kill-{key}").start()

    def wait(self, timeout: float | None) -> list[Event]:
        try:
            first = self._events.get(timeout=None if timeout is None else max(timeout, 0.0))
        except queue.Empty:
            return []
        arrived = [first]
        while True:
            try:
                arrived.append(self._events.get_nowait())
            except queue.Empty:
                break
        return [event for event in arrived if event is not _WAKE]

    def progress_ages(self, keys: list[str]) -> dict[str, float | None]:
        import ray

        if self._board.board is None or not keys:
            return dict.fromkeys(keys)
        return ray.get(self._board.board.ages.remote(keys))

    def early_stopping(self, spec: Any, objective: Any) -> EarlyStopping | None:
        """A Ray actor judges the reports (:mod:`orchestrator.backends.ray.pruning`)."""
        from nestor.orchestrator.backends.ray.pruning import start_early_stopper

        return start_early_stopper(spec, objective)

    def run_task(self, key: str, fn: Any, *args: Any) -> None:
        """A Ray task that reserves no slot: it is the driver's own work, moved off
        the loop (and off the driver's process), not a trial's."""
        import ray

        ref = ray.remote(num_cpus=0, max_retries=0)(fn).remote(*args)

        def wait() -> None:
            try:
                value = ray.get(ref)
            except Exception as exc:
                self._events.put(TaskDone(key, self.now(), error=first_line(exc)))
                return
            self._events.put(TaskDone(key, self.now(), value))

        threading.Thread(target=wait, daemon=True, name=f"nestor-task-{key}").start()

    def wake(self) -> None:
        self._events.put(_WAKE)

    def shutdown(self) -> None:
        self._board.stop()
        self.pool.shutdown()

    # -- one attempt, in its own thread -----------------------------------------------

    def _attempt(self, launch: Launch, gang: Gang, evicted: list[Gang]) -> None:
        started = False
        try:
            for old in evicted:
                old.kill()
            startup_s = 0.0
            if gang.executor is None:
                begun = time.monotonic()
                try:
                    self.pool.start(gang)
                except GangStartError as exc:
                    self._end(launch.key, None, Ended(launch.key, self.now(), failure=str(exc),
                                                      started=False))
                    return
                startup_s = time.monotonic() - begun
            if launch.key in self._cancelled:
                gang.broken = True
                self._end(launch.key, gang, Ended(launch.key, self.now(), failure="cancelled",
                                                  started=False))
                return
            if launch.gate is not None:  # the journal's group commit, while gangs start
                launch.gate()
            started = True
            self._events.put(Started(launch.key, gang.id, self.now(), startup_s))
            from nestor.trainers import run_trial

            refs = gang.submit(run_trial, launch.request, **launch.hooks)
            result, failure = self._results(gang, refs)
            if launch.key in self._cancelled:
                result, failure = None, "cancelled"
            self._end(launch.key, gang, Ended(launch.key, self.now(), result, failure))
        except BaseException as exc:  # the loop must hear of every attempt's end
            if launch.key in self._cancelled or stopping.stop_requested() is not None:
                # The driver is stopping (SIGTERM, Ctrl-C) or killed this gang: Ray going
                # away under a rank's submit is expected then, and the attempt is journalled
                # as not finished, so resume runs it. No traceback for the user to read.
                log.info("attempt %s ended by the stop: %s: %s", launch.key,
                         type(exc).__name__, exc)
            else:
                log.exception("attempt %s: unexpected error", launch.key)
            gang.broken = True
            self._end(launch.key, gang, Ended(launch.key, self.now(), failure=(
                f"{type(exc).__name__}: {exc}"), started=started))

    def _results(self, gang: Gang, refs: list[Any]) -> tuple[Any, str | None]:
        """Wait on the ranks one at a time; the trial's result, or why there is none.

        The first rank to fail (or die) ends the attempt: its peers get a short
        grace, then the gang is killed."""
        import ray
        from ray.exceptions import RayError

        results: list[Any] = [None] * len(refs)
        rank_of = {ref: rank for rank, ref in enumerate(refs)}
        died: str | None = None
        failed: int | None = None
        remaining = list(refs)
        grace = False
        while remaining:
            ready, remaining = ray.wait(remaining, num_returns=1 if not grace else len(remaining),
                                        timeout=self.failure_grace_s if grace else None)
            for ref in ready:
                rank = rank_of[ref]
                try:
                    results[rank] = ray.get(ref)
                except RayError as exc:
                    died = died or f"rank {rank} of gang {gang.id} died: {how_it_died(exc)}"
                    gang.broken = True
                    continue
                if not results[rank].ok and failed is None:
                    failed = rank
            if remaining and (died or failed is not None):
                if grace:  # the peers did not follow: they wait in a collective
                    gang.broken = True
                    gang.kill()
                    break
                grace = True
        gang.pending = []
        if any(horovod_broke(r) for r in results if r is not None):
            gang.broken = True  # its ranks no longer agree on what is initialised
            log.warning("gang %s: Horovod failed in a rank; the gang will be rebuilt", gang.id)
        if died and (failed is None or horovod_broke(results[failed])):
            # A peer's "Horovod has been shut down" is the symptom; the dead rank the cause.
            return None, died
        if failed is not None:
            result = results[failed]
            if failed != 0:
                result.reason = f"rank {failed}: {result.reason}"
            return result, None
        return results[0], None

    def _end(self, key: str, gang: Gang | None, event: Ended) -> None:
        """Give the gang back (killed if broken), then tell the loop: always, even
        when the kill fails, or the loop would wait for this attempt forever."""
        try:
            kill = None
            with self.pool.lock:
                self._gangs.pop(key, None)
                self._cancelled.discard(key)
                if gang is not None:
                    gang.busy = False
                    if gang.broken:
                        self.pool.forget(gang)
                        kill = gang
            if kill is not None:
                kill.kill()
        finally:
            self._board.ended(key)
            self._events.put(event)
