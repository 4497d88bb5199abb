"""How far the MLflow projector got in a run's journal: the count of events it has
written, kept in the run directory. The projector moves it; the store's node-local copy
reads it to know what the run directory's store already holds."""

from __future__ import annotations

import threading
from pathlib import Path

CURSOR_FILE = "mlflow-projected"


def read_cursor(run_dir: Path) -> int | None:
    """The projector's count of written events, None if it keeps none here."""
    try:
        return int((run_dir / CURSOR_FILE).read_text().strip() or 0)
    except (FileNotFoundError, ValueError):
        return None


class JournalLines:
    """The journal's complete lines, counted on from where the last count ended: a
    wait every 50 ms costs the bytes appended since, not the whole journal."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._bytes = self._lines = 0

    def count(self) -> int:
        with self._lock:
            try:
                with open(self.path, "rb") as handle:
                    handle.seek(self._bytes)
                    data = handle.read()
            except FileNotFoundError:
                return self._lines
            end = data.rfind(b"\n") + 1
            self._lines += data.count(b"\n", 0, end)
            self._bytes += end
            return self._lines
