"""How far the MLflow projector got in a run's journal: the count of events it has
written, kept in the run directory. The projector moves it; the store's node-local copy
reads it to know what the run directory's store already holds."""

from __future__ import annotations

from pathlib import Path

CURSOR_FILE = "mlflow-projected"


def read_cursor(run_dir: Path) -> int | None:
    """The projector's count of written events, None if it keeps none here."""
    try:
        return int((run_dir / CURSOR_FILE).read_text().strip() or 0)
    except (FileNotFoundError, ValueError):
        return None
