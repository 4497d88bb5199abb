"""A trial's metric history, bounded by design.

A trial reports its metrics as often as it likes: a function trainer per
``ctx.report``, a command trainer per ``FoM:`` line it prints. Kept whole, one
chatty trial (a command printing a million result lines) took the driver to
gigabytes, wrote one journal line of tens of megabytes and hundreds of
megabytes of MLflow points. So a history keeps at most ``MAX_HISTORY`` rows:
beyond that it is thinned evenly (every other row dropped, then every fourth,
... each row keeping its own ``step``) and its last row is always the latest.
Memory, the journal's line and MLflow's points then grow with ``MAX_HISTORY``,
never with the trial's output.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

MAX_HISTORY = 1000  # rows a trial's history keeps (README: "Bounded by design")


class BoundedHistory(list[dict[str, Any]]):
    """A list of metric rows that keeps at most ``limit`` (+1: the latest) of them.

    Rows are kept at a stride that doubles each time the list fills (0, s, 2s, ...
    of the rows appended), and the latest row is always last. ``seen`` counts every
    row appended; ``append`` says whether the row is kept for good (on the stride),
    which is what a caller forwards (a pruner's reports) so that it too is bounded."""

    def __init__(self, rows: Iterable[dict[str, Any]] = (), limit: int = MAX_HISTORY) -> None:
        super().__init__()
        self.limit = max(2, int(limit))
        self.seen = 0
        self.stride = 1
        self._tail = False  # the last row is the latest, kept off the stride
        for row in rows:
            self.append(row)

    def append(self, row: dict[str, Any]) -> bool:  # type: ignore[override]
        if self._tail:
            super().pop()
            self._tail = False
        index, self.seen = self.seen, self.seen + 1
        if index % self.stride:
            super().append(row)
            self._tail = True
            return False
        super().append(row)
        if len(self) > self.limit:  # rows 0, s, 2s, ...: keep 0, 2s, 4s, ...
            del self[1::2]
            self.stride *= 2
            if index % self.stride:  # the latest fell off the new stride: last all the same
                super().append(row)
                self._tail = True
                return False
        return True

    def extend(self, rows: Iterable[dict[str, Any]]) -> None:  # type: ignore[override]
        for row in rows:
            self.append(row)

    def __reduce__(self) -> Any:  # pickled (sent by Ray) as the plain list it holds
        return (list, (list(self),))


def bounded(rows: Iterable[dict[str, Any]], limit: int = MAX_HISTORY) -> list[dict[str, Any]]:
    """``rows`` thinned to at most ``limit`` (+1) rows, evenly, the last one kept (a
    history bounded already, as trainers send it, is returned as it is)."""
    rows = list(rows)
    return rows if len(rows) <= limit + 1 else list(BoundedHistory(rows, limit))
