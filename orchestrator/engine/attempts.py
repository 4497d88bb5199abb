"""The attempt policy of a stage: when a failed trial runs again, when the stage
backs off after gangs failed to start, and when a running attempt is killed.

A trial that fails in a way a rerun may mend (a dead or killed rank, a lost node, a
NaN, its timeout, a hang) is retried up to ``trial.retries`` times. One that would
fail the same way again (a usage error, a missing file, module or program, a syntax
error, no metric reported: ``outcome``'s ``repeats``) is not, unless the stage's
``trial.retry_on`` is ``any``: a retry would only spend its slots again. After a gang fails to start
(placement timed out, a worker lost on start-up), the stage waits before starting
another: 1, 2, 4, ... s, at most a minute, so a cluster that cannot place gangs is
not hammered with placement groups. An attempt is killed past ``trial.timeout``, or
when it shows no progress for ``trial.progress_timeout``; its Ended event follows.
"""

from __future__ import annotations

import heapq
import itertools
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from nestor.orchestrator.backends.interface import BEAT_EVERY_S, Backend, Ended
from nestor.orchestrator.backends.shape import Shape
from nestor.orchestrator.journal.status import TrialStatus

log = logging.getLogger(__name__)

BACKOFF_FIRST_S, BACKOFF_MAX_S = 1.0, 60.0
_DEADLINE, _PROGRESS = 0, 1  # the two kinds of entry in the policy's heap
_order = itertools.count()  # attempts in the order the runner adds them to its running


@dataclass
class Attempt:
    """One run of one trial on one gang, from launch to its Ended event."""

    trial: Any  # search.Trial
    number: int
    key: str
    launched: float  # backend clock
    started: float | None = None  # once its gang runs it (None while the gang starts)
    startup_s: float = 0.0
    # its gang's shape: a re-plan changes only the shape of trials started later
    shape: Shape = field(default_factory=lambda: Shape(1, 1))
    deadline: float | None = None
    progress_due: float | None = None  # when to ask whether it still makes progress
    cancelled: str | None = None  # why the driver killed it (a timeout, no progress)
    stopped: bool = False  # killed at its stage's wall budget: stopped, not failed
    # created just before the runner adds it to ``running``: deadlines that fall due
    # together are acted on in that order, as a scan of ``running`` would
    order: int = field(default_factory=lambda: next(_order))


class AttemptPolicy:
    """Retries, backoff and deadlines for one stage's attempts (``trial:`` of its spec).

    >>> policy = AttemptPolicy("tune", trial_spec, backend)            # doctest: +SKIP
    >>> policy.started(attempt, at=10.0)   # its deadlines start now   # doctest: +SKIP
    >>> policy.check(runner.running)       # kills those past them     # doctest: +SKIP
    """

    def __init__(self, stage: str, trial: Any, backend: Backend) -> None:
        self.stage = stage
        self.timeout: float | None = trial.timeout
        self.progress_timeout: float | None = trial.progress_timeout
        self.retries: int = trial.retries
        self.retry_on: str = trial.retry_on
        self.backend = backend
        # (due, order, kind, seq, attempt) for each deadline set: a look costs O(log n) per
        # deadline due, not a scan of every running attempt. Entries of attempts that
        # ended, were cancelled or whose progress deadline moved are dropped when they
        # come up. The top is exact after each look; one that ends only leaves it early.
        self._heap: list[tuple[float, int, int, int, Attempt]] = []
        self._seq = itertools.count()
        self._start_failures = 0  # gangs that failed to start in a row
        self._hold_until: float | None = None  # no new attempt before (backoff)

    # -- retries ----------------------------------------------------------------------

    def retries_after(self, outcome: dict[str, Any], number: int) -> bool:
        """Does a trial whose attempt ``number`` ended so (:func:`outcome.outcome`) run
        again? A failure while retries last, unless it would repeat (and the stage
        retries only what may pass)."""
        return (outcome["status"] == TrialStatus.FAILED and number <= self.retries
                and not self.not_retried(outcome))

    def not_retried(self, outcome: dict[str, Any]) -> bool:
        """A failure that a rerun would meet again, which this stage does not retry."""
        return bool(outcome.get("repeats")) and self.retry_on != "any"

    # -- backoff ----------------------------------------------------------------------

    @property
    def holding(self) -> bool:
        """Backing off after gangs failed to start: nothing new starts for now."""
        return self._hold_until is not None and self.backend.now() < self._hold_until

    def ended(self, ended: Ended, attempt: Attempt) -> None:
        """An attempt ended: a gang that never started lengthens the backoff, any other
        end clears it."""
        if ended.started or attempt.cancelled is not None:
            self._start_failures, self._hold_until = 0, None
            return
        self._start_failures += 1
        delay = min(BACKOFF_MAX_S, BACKOFF_FIRST_S * 2 ** (self._start_failures - 1))
        self._hold_until = ended.at + delay
        log.warning("stage %s: %d gang start(s) failed in a row (%s); waiting %.0f s before"
                    " the next", self.stage, self._start_failures, ended.failure, delay)

    # -- deadlines --------------------------------------------------------------------

    @property
    def beat_every_s(self) -> float:
        """How often rank 0 may say it still makes progress: BEAT_EVERY_S, or a quarter of
        the progress timeout when that is shorter, so a healthy trial is never taken for
        a hung one."""
        return min(BEAT_EVERY_S, (self.progress_timeout or 60.0) / 4)

    def started(self, attempt: Attempt, at: float) -> None:
        """The attempt's ranks run from ``at``: its timeouts count from then."""
        if self.timeout:
            attempt.deadline = at + self.timeout
            self._push(attempt.deadline, _DEADLINE, attempt)
        if self.progress_timeout:
            attempt.progress_due = at + self.progress_timeout
            self._push(attempt.progress_due, _PROGRESS, attempt)

    def _push(self, due: float, kind: int, attempt: Attempt) -> None:
        heapq.heappush(self._heap, (due, attempt.order, kind, next(self._seq), attempt))

    def next_deadline(self) -> float | None:
        """The backend time the stage next needs a look: a deadline, or the backoff's end."""
        deadlines = [self._heap[0][0]] if self._heap else []
        if self.holding:
            deadlines.append(self._hold_until)  # type: ignore[arg-type]
        return min(deadlines, default=None)

    def check(self, running: Mapping[str, Attempt]) -> None:
        """Kill the attempts past their timeout, or silent past their progress
        timeout; their Ended events follow. ``running``: the runner's, by trial id."""
        if len(self._heap) > 4 * len(running) + 64:
            self._compact(running)
        now = self.backend.now()
        if not self._heap or now < self._heap[0][0]:  # none due: not a look at any trial
            return
        timed: dict[int, Attempt] = {}  # by order: each once, in the order of running
        silent: dict[int, Attempt] = {}
        while self._heap and self._heap[0][0] <= now:
            due, order, kind, _, attempt = heapq.heappop(self._heap)
            if self._current(due, kind, attempt, running):
                (timed if kind == _DEADLINE else silent)[order] = attempt
        timed, silent = dict(sorted(timed.items())), dict(sorted(silent.items()))
        try:
            self._act(list(timed.values()), list(silent.values()), now)
        finally:
            for attempt in {**timed, **silent}.values():  # the look raised: it stays due
                if attempt.cancelled is None and running.get(attempt.trial.id) is attempt:
                    for kind, due in ((_DEADLINE, attempt.deadline),
                                      (_PROGRESS, attempt.progress_due)):
                        if due is not None and due <= now:
                            self._push(due, kind, attempt)
            while self._heap:  # the top exact again: no look before a live deadline
                due, _, kind, _, attempt = self._heap[0]
                if self._current(due, kind, attempt, running):
                    break
                heapq.heappop(self._heap)

    def _compact(self, running: Mapping[str, Attempt]) -> None:
        """Drop the entries of attempts that ended long before their deadlines (a long
        ``trial.timeout`` would keep every attempt of the last hours), so the heap stays
        a few entries per running attempt. The top stays: the next look is not moved."""
        top = self._heap[0]
        self._heap = [e for e in self._heap
                      if e is top or self._current(e[0], e[2], e[4], running)]
        heapq.heapify(self._heap)

    @staticmethod
    def _current(due: float, kind: int, attempt: Attempt,
                 running: Mapping[str, Attempt]) -> bool:
        """Is this heap entry one of a live attempt's deadlines as they stand now?"""
        if attempt.cancelled is not None or running.get(attempt.trial.id) is not attempt:
            return False
        return due == (attempt.deadline if kind == _DEADLINE else attempt.progress_due)

    def _act(self, timed: list[Attempt], silent: list[Attempt], now: float) -> None:
        for attempt in timed:
            self.cancel(attempt, f"timeout after {self.timeout:g} s")
        due = [a for a in silent if a.cancelled is None]
        if not due:
            return
        limit = self.progress_timeout
        assert limit is not None  # only attempts with a progress timeout have progress_due
        ages = self.backend.progress_ages([a.key for a in due])
        for attempt in due:
            age = ages.get(attempt.key)
            started = now if attempt.started is None else attempt.started  # 0.0 is a time
            last = started if age is None else max(started, now - age)
            if now - last >= limit:
                self.cancel(attempt, f"no progress for {now - last:.0f} s"
                            f" (trial.progress_timeout {limit:g} s): hung")
            else:
                attempt.progress_due = last + limit
                self._push(attempt.progress_due, _PROGRESS, attempt)

    def cancel(self, attempt: Attempt, reason: str) -> None:
        """Kill the attempt's gang, saying why (its Ended event then fails the attempt)."""
        attempt.cancelled = reason
        self.backend.cancel(attempt.key)
