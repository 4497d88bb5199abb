"""What a resumed driver needs of the journal so far, read in one streamed pass.

A million-event journal is hundreds of MiB of dicts when read all at once, and
every stage's runner then scanned all of it again for its own events. Instead
the journal is read line by line, each line parsed once into its typed event
(``events.parse``) and kept only where resume uses it: the run's start, each
finished stage's summary (its dependants' sources), which stages started, and
the events of every stage (its runner's restore). Read for a resumed driver
(:meth:`JournalSoFar.read`), a finished stage's events are let go as soon as
its ``StageFinished`` is read: the scheduler never builds its runner again.
"""

from __future__ import annotations

import contextlib
import gc
import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from orchestrator.journal.events import (
    KINDS,
    Event,
    StageFinished,
    StageStarted,
    WorkflowStarted,
    kinds_of,
    parse,
)
from orchestrator.journal.journal import iter_events

__all__ = ["JournalSoFar", "paused_gc", "sparse_gc"]

# The young generation's threshold while a driver's loop runs (Python's default: 700).
SPARSE_GC_THRESHOLD = 50_000

# A line's seq, time and kind come before its stage: its name lies within this many bytes.
STAGE_WITHIN = 160


@contextlib.contextmanager
def paused_gc() -> Iterator[None]:
    """Python's cyclic garbage collector paused (a context, or a decorator).

    Resume makes millions of objects that live on (a stage's typed events, its
    searcher's replayed trials and population), and the collector's full passes
    over a heap that keeps growing cost about a third of the resume's CPU. They
    are made here with it paused; reference counting still frees what dies."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()



@contextlib.contextmanager
def sparse_gc(threshold: int = SPARSE_GC_THRESHOLD) -> Iterator[None]:
    """Python's cyclic collector run rarely: a young collection every ``threshold``
    allocations instead of 700 (the older generations' thresholds unchanged).

    A driver's loop allocates an event's dicts, records and requests per event, nearly
    all freed by reference counting, and keeps a ledger that grows with the run; it
    makes almost no cycles (about 1,000 collectable objects in 116,000 events at
    32,768 simulated slots). At the default threshold the collector's passes over
    what survived were a fifth of the driver's CPU per event (11 of 57 CPU seconds)
    and found next to nothing; at 50,000 they cost 2.5 s. Cycles are still collected,
    later; the thresholds are restored when the loop ends."""
    was = gc.get_threshold()
    gc.set_threshold(max(threshold, was[0]), *was[1:])
    try:
        yield
    finally:
        gc.set_threshold(*was)

class JournalSoFar:
    """The journal's events as a resumed run uses them, typed and kept by stage."""

    def __init__(self, records: Iterable[dict[str, Any]] = (), *,
                 finished: bool = True) -> None:
        """``records``: journal lines' dicts in journal order (a fresh run: none);
        ``finished``: keep the events of finished stages too (a report that rebuilds
        a finished stage's runner needs them; a resumed scheduler does not)."""
        self.finished = finished
        self.started: WorkflowStarted | None = None
        self.summaries: dict[str, dict[str, Any]] = {}  # finished stages, by name
        self.stages_started: set[str] = set()
        self._mine: dict[str, list[Event]] = {}  # each stage's events, typed
        for record in records:
            self.add(parse(record))

    @classmethod
    @paused_gc()
    def read(cls, path: Path) -> JournalSoFar:
        """The journal file at ``path`` (none yet: empty), streamed: never a list of
        every line's dict at once. The finished stages are found first, so the lines
        of their trials and searches (most of a long run's journal) are not parsed."""
        so_far = cls(iter_events(path, kinds_of(WorkflowStarted, StageFinished)),
                     finished=False)
        # Journal.append writes a stage event's stage first, after its kind: the line's
        # first "stage" key (a trial's config may hold another, further on).
        names = {json.dumps(name).encode() + b"," for name in so_far.summaries}

        def finished_stage(line: bytes) -> bool:
            at = line.find(b'"stage":', 0, STAGE_WITHIN)
            if at < 0:
                return False
            at += len(b'"stage":')
            return line[at:line.find(b",", at) + 1] in names

        for record in iter_events(path, skip=finished_stage if names else None):
            so_far.add(parse(record))
        return so_far

    @classmethod
    def of(cls, events: JournalSoFar | Iterable[dict[str, Any]] | None) -> JournalSoFar:
        """``events`` as a JournalSoFar (callers may still hand over a list of records)."""
        return events if isinstance(events, JournalSoFar) else cls(events or ())

    def add(self, event: Event) -> None:
        """Take the next event (an event seen again, as read takes its first pass's
        ``WorkflowStarted`` and ``StageFinished``, changes nothing)."""
        if isinstance(event, WorkflowStarted):
            if self.started is None:
                self.started = event
            return
        stage = getattr(event, "stage", None)
        if stage is None:
            return
        if isinstance(event, StageFinished):
            self.summaries[event.stage] = event.summary
            self.stages_started.add(event.stage)  # its start may go unread (read skips it)
            if not self.finished:
                self._mine.pop(event.stage, None)
            return
        if isinstance(event, StageStarted):
            self.stages_started.add(event.stage)
        if self.finished or event.stage not in self.summaries:
            self._mine.setdefault(event.stage, []).append(event)

    def of_stage(self, stage: str, *classes: type[Event]) -> list[Event]:
        """This stage's events of these classes (all, by default), in order."""
        mine = self._mine.get(stage, [])
        if not classes or set(classes) >= set(KINDS.values()):
            return list(mine)
        return [e for e in mine if isinstance(e, classes)]
