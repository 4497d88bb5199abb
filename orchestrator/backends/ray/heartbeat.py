"""How the driver learns, without polling the ranks, that a trial still makes progress.

Rank 0 calls ``heartbeat()`` as it trains (each batch, each report, each line
a command prints). The call is throttled in the rank and sent fire-and-forget
to one small actor per driver, the :class:`ProgressBoard`; the driver asks the
board only when an attempt's progress deadline comes (``trial.progress_timeout``
after its last known beat). So a rank stopped by SIGSTOP, a dead NFS mount or a
collective its peer never joins is found even when no ``trial.timeout`` is set,
and a healthy sweep costs one tiny message per rank-0 every few seconds.

The board is a named actor the driver makes only once some attempt has run half a
beat's interval (:class:`BoardKeeper`), before any rank may send a beat: a sweep of
short trials, none of which ever sends one, does not pay for its worker process
(about 2 s of CPU at the start, where every core is busy). A rank finds it by name.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from typing import Any

from nestor.orchestrator.backends.interface import (
    BEAT_EVERY_S,  # a rank sends at most one beat this often
)

log = logging.getLogger(__name__)


class ProgressBoard:
    """When each running attempt last showed progress (an actor, on the board's clock)."""

    def __init__(self) -> None:
        self.beats: dict[str, float] = {}

    def beat(self, key: str) -> None:
        self.beats[key] = time.monotonic()

    def ages(self, keys: list[str]) -> dict[str, float | None]:
        """Seconds since each attempt's last beat (None: it never beat)."""
        now = time.monotonic()
        return {key: (now - self.beats[key]) if key in self.beats else None for key in keys}

    def forget(self, key: str) -> None:
        self.beats.pop(key, None)


class Beat:
    """Picklable, self-throttling ``heartbeat()`` for one attempt's rank 0: it names
    the driver's board (a string pickles for free; an actor handle costs a
    registration with Ray per trial) and finds it when it first sends."""

    def __init__(self, board: str, key: str, every_s: float = BEAT_EVERY_S) -> None:
        self.board, self.key, self.every_s = board, key, every_s
        self._last: float | None = None  # on this process's clock, once it beat here

    def __call__(self) -> None:
        now = time.monotonic()
        if self._last is None:
            # The first beat is not sent: the driver counts an attempt that never beat
            # as last seen at its start, which came just before, and a message per trial
            # (a short trial beats once) cost every trivial trial an actor call, the
            # board's work and its share of the two cores. The next beat goes out as
            # before, ``every_s`` later: the driver's view is as stale as the throttle
            # already made it, no more.
            self._last = now
        elif now - self._last >= self.every_s:
            self._last = now
            handle = board_named(self.board)
            if handle is not None:  # else the driver has not made it yet: a beat less
                handle.beat.remote(self.key)


_boards: dict[str, Any] = {}  # this process's handles, by board name


def board_named(name: str) -> Any:
    """The progress board called ``name`` (found once a process), or None while the
    driver has not made it."""
    handle = _boards.get(name)
    if handle is None:
        import ray

        try:
            handle = _boards[name] = ray.get_actor(name)
        except ValueError:  # not made yet
            return None
    return handle


class BoardKeeper:
    """The driver's side: makes the board, once, when the first attempt has run for
    half its beat interval (no rank sends a beat before a whole interval has passed
    since its trial's first heartbeat), and tells it to forget an ended attempt only
    where that attempt lived long enough to have sent a beat."""

    def __init__(self) -> None:
        self.name = f"nestor-progress-{uuid.uuid4().hex}"
        self.board: Any = None  # the actor, once made
        self._due: dict[str, tuple[float, float]] = {}  # key -> (launched, every_s)
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._watcher: threading.Thread | None = None

    def launched(self, key: str, every_s: float) -> None:
        with self._lock:
            self._due[key] = (time.monotonic(), every_s)
            if self._watcher is None and self.board is None:
                self._watcher = threading.Thread(target=self._watch, daemon=True,
                                                 name="nestor-progress-board")
                self._watcher.start()

    def ended(self, key: str) -> None:
        with self._lock:
            began = self._due.pop(key, None)
        if self.board is not None and (began is None
                                       or time.monotonic() - began[0] >= began[1]):
            self.board.forget.remote(key)  # it may have beaten: the board forgets it

    def stop(self) -> None:
        self._wake.set()

    def _watch(self) -> None:
        while not self._wake.is_set():
            with self._lock:
                first = min((at + every_s / 2 for at, every_s in self._due.values()),
                            default=None)
            now = time.monotonic()
            if first is not None and now >= first:
                try:
                    self.board = start_progress_board(self.name)
                except Exception as exc:  # Ray going away as the run ends, or broken
                    if not self._wake.is_set():
                        log.warning("could not start the progress board (%s): a trial's"
                                    " beats are not heard, so one that outlives"
                                    " trial.progress_timeout is taken for hung", exc)
                return
            self._wake.wait(0.25 if first is None else min(0.25, first - now))


def start_progress_board(name: str) -> Any:
    import ray

    return ray.remote(num_cpus=0)(ProgressBoard).options(name=name).remote()
