"""A run directory is data: what nestor reads back from it names things, never places.

Run directories live in shared project spaces and are passed between people, so
anything read back from one (the journal, attempt files, the searcher's state,
``ensemble.json``) may have been written by someone else. Two checks keep such
data from being turned against the user who runs ``nestor resume``, ``status``,
``results`` or ``ui`` on it:

- an identifier (a stage's name, a trial's id) must match :data:`ID_PATTERN`:
  no ``/``, no leading ``.``, nothing a path could climb with;
- a path nestor derives from such data, or reads from it, must resolve (links
  followed) inside the run directory before anything is read, copied, served or
  deleted (:func:`inside`).

Either failing raises :class:`UnsafeRunData`, a :class:`JournalError`: the
commands report it as a damaged run directory, in one line, without acting.
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path

from nestor.orchestrator.journal.errors import JournalError

log = logging.getLogger(__name__)

# A stage's name (the spec's NAME_PATTERN is stricter) or a trial's id ("17",
# "warm-3"): a single path component that cannot be "." or ".." or hidden.
ID_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")


class UnsafeRunData(JournalError):
    """Data read from a run directory names a path outside it or an impossible id."""


def check_id(value: object, what: str) -> str:
    """``value`` if it is a valid identifier (:data:`ID_PATTERN`), else UnsafeRunData.

    >>> check_id("17", "trial id")
    '17'
    """
    if not isinstance(value, str) or ID_PATTERN.fullmatch(value) is None:
        raise UnsafeRunData(
            f"the run directory names a {what} {str(value)[:80]!r}, which is not one"
            " nestor writes (letters, digits, '_', '.', '-'; no '/'): it was altered;"
            " nothing was done with it"
        )
    return value


def within(run_dir: str | os.PathLike[str], path: str | os.PathLike[str]) -> Path | None:
    """``path`` (relative to ``run_dir``, or absolute), fully resolved, if it lies
    within ``run_dir`` (resolved too); None if it leads anywhere else, a link out of
    the run directory included, or is not a path at all (a NUL in it, a link loop)."""
    try:
        root = Path(run_dir).resolve()
        text = os.fspath(path)
        if "\0" in text:
            return None
        place = (root / text).resolve()  # an absolute ``text`` replaces ``root``
    except (OSError, TypeError, ValueError, RuntimeError):  # RuntimeError: a link loop
        return None
    return place if place.is_relative_to(root) else None


def inside_or_warn(run_dir: str | os.PathLike[str], path: str | os.PathLike[str],
                   what: str) -> Path | None:
    """:func:`within`, with a warning naming ``what`` was refused: for what is only
    shown (a trial's logs, a stage's checkpoint as an artifact), where a refused path
    means one thing less in MLflow, not a stopped run."""
    place = within(run_dir, path)
    if place is None:
        log.warning("%s %s is not inside the run directory %s: not followed", what,
                    str(path)[:300], run_dir)
    return place


def inside(root: str | os.PathLike[str], *parts: str | os.PathLike[str]) -> Path:
    """``root`` joined with ``parts``, checked to resolve inside ``root`` (symbolic
    links followed, ``..`` and absolute parts included); UnsafeRunData otherwise: for
    what the run acts on (a folder deleted, a result adopted, a checkpoint handed to a
    trainer), where going on without it would be wrong.

    Returns the joined path as given (not resolved), so callers keep their paths'
    shape in messages and journal lines."""
    path = Path(root).joinpath(*parts)
    if within(root, path) is None:
        raise UnsafeRunData(
            f"the run directory names {str(path)[:200]!r}, which lies outside"
            f" {Path(root).resolve()} (an absolute path, '..' or a link out): it was"
            " altered; nothing was read, copied or deleted there"
        )
    return path
