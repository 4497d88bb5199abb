"""Paths read back from a run directory, kept inside it.

A run directory is data: run directories sit in shared project spaces and are
passed between people, so a journal, an attempt file or a summary may have been
written by someone else. A path read from one (a command trainer's log files, a
checkpoint) is followed only if it resolves, links and ``..`` included, to a
place inside the run directory; anything else is refused, never read, copied or
served (``nestor ui`` copies logs into the artifacts its server serves).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

log = logging.getLogger(__name__)


def inside(run_dir: Path | str, path: Path | str) -> Path | None:
    """``path`` (relative to ``run_dir``, or absolute), fully resolved, if it lies
    within ``run_dir`` (resolved too); None if it leads anywhere else, a link out of
    the run directory included, or is not a path at all (a NUL in it)."""
    try:
        root = Path(run_dir).resolve()
        text = os.fspath(path)
        if "\0" in text:
            return None
        place = (root / text).resolve()  # an absolute ``text`` replaces ``root``
    except (OSError, TypeError, ValueError, RuntimeError):  # RuntimeError: a link loop
        return None
    return place if place.is_relative_to(root) else None


def inside_or_warn(run_dir: Path | str, path: Path | str, what: str) -> Path | None:
    """:func:`inside`, with a warning naming ``what`` was refused and why."""
    place = inside(run_dir, path)
    if place is None:
        log.warning("%s %s is not inside the run directory %s: not followed", what,
                    str(path)[:300], run_dir)
    return place
