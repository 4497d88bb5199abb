"""The run directory's damage errors, apart from the journal that raises most of them,
so that the path checks (``safe``) and the events can raise them without importing the
journal (which imports the events: a circle, before)."""

from __future__ import annotations


class DamagedRun(RuntimeError):
    """A file of the run directory (its journal, an attempt's result) does not read as
    nestor wrote it; the message names the file and what to do."""


class JournalError(DamagedRun):
    """The journal cannot be read as a sequence of events (not just a torn tail)."""
