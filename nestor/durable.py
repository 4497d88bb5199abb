"""Files a killed process never leaves half-written: a checkpoint, a trial's result.

The new content goes to a temporary file beside the final one, is fsynced,
then renamed over it, and the directory is fsynced: a reader, or a driver
resumed after a kill, sees the old file or the new one, never a torn mix.

It lies below the three packages, at the namespace's root, because both ends use
it: the ranks (``nestor.trainers``: checkpoints, results), which may not import
the orchestrator, and the journal, the orchestrator's bottom layer (its cursor and
snapshot files), which should not borrow a trainer's helper. It imports the
standard library alone (a contract in pyproject.toml says so).
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any


def replace_durably(final: str | os.PathLike[str], write: Callable[[IO[bytes]], None]) -> Path:
    """Write ``final`` through ``write(handle)`` all at once; returns its path."""
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{final.name}.", suffix=".tmp", dir=final.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, final)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    with contextlib.suppress(OSError):  # some file systems refuse a directory fsync
        dir_fd = os.open(final.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    return final


def write_json_durably(final: str | os.PathLike[str], data: Any) -> Path:
    payload = json.dumps(data, allow_nan=True, default=str).encode()
    return replace_durably(final, lambda handle: handle.write(payload))
