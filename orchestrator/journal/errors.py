"""The run directory's damage errors, apart from the journal that raises most of them,
so that the path checks (``safe``) and the events can raise them without importing the
journal (which imports the events: a circle, before)."""

from __future__ import annotations

import errno
import os

# A full disk and an exceeded quota: the machine's want of space, which waiting never mends.
FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
# How either reads in text (Python's OSError, SQLite's own word, a command's output).
DISK_FULL_WORDS = (*(os.strerror(number) for number in FULL_ERRNOS),
                   "[Errno 28]", "[Errno 122]", "database or disk is full")


def out_of_space(failure: BaseException | str | None) -> bool:
    """Whether a failure (an exception, or a trial's reason as text) is a full disk or
    quota: the journal's, MLflow's store's or a trial's. The one test the journal, the
    projector and the engine share.

    >>> out_of_space(OSError(errno.EDQUOT, "Disk quota exceeded"))
    True
    >>> out_of_space("sqlite3.OperationalError: database or disk is full")
    True
    >>> out_of_space(ConnectionError("connection refused"))
    False
    """
    if failure is None:
        return False
    if isinstance(failure, OSError) and failure.errno in FULL_ERRNOS:
        return True
    text = str(failure)
    return any(words in text for words in DISK_FULL_WORDS)


class DamagedRun(RuntimeError):
    """A file of the run directory (its journal, an attempt's result) does not read as
    nestor wrote it; the message names the file and what to do."""


class JournalError(DamagedRun):
    """The journal cannot be read as a sequence of events (not just a torn tail)."""
