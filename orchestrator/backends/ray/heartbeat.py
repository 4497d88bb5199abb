"""How the driver learns, without polling the ranks, that a trial still makes progress.

Rank 0 calls ``heartbeat()`` as it trains (each batch, each report, each line
a command prints). The call is throttled in the rank and sent fire-and-forget
to one small actor per driver, the :class:`ProgressBoard`; the driver asks the
board only when an attempt's progress deadline comes (``trial.progress_timeout``
after its last known beat). So a rank stopped by SIGSTOP, a dead NFS mount or a
collective its peer never joins is found even when no ``trial.timeout`` is set,
and a healthy sweep costs one tiny message per rank-0 every few seconds.
"""

from __future__ import annotations

import time
from typing import Any

from nestor.orchestrator.backends.interface import (
    BEAT_EVERY_S,  # a rank sends at most one beat this often
)


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
    """Picklable, self-throttling ``heartbeat()`` for one attempt's rank 0."""

    def __init__(self, board: Any, key: str, every_s: float = BEAT_EVERY_S) -> None:
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
            self.board.beat.remote(self.key)


def start_progress_board() -> Any:
    import ray

    return ray.remote(num_cpus=0)(ProgressBoard).remote()
