"""What a resumed driver needs of the journal so far: the run's fold, and each stage's
events.

A million-event journal is hundreds of MiB of dicts when read all at once, and
every stage's runner then scanned all of it again for its own events. Instead
the run's stages are read from the journal's one fold (``journal.state.RunState``,
their heads: which started, finished, where each summary lies, which were reopened;
from the snapshot the driver keeps, folding only the journal after it), and then
the lines of the stages that have not finished are read, each parsed once into its
typed event (``events.parse``) and kept by stage (its runner's restore), while the
lines of finished stages are skipped unparsed: the scheduler never builds their
runners again. A finished stage's summary is parsed from its line when looked up.
"""

from __future__ import annotations

import contextlib
import gc
import json
from collections.abc import Iterable, Iterator, MutableMapping
from pathlib import Path
from typing import Any

from nestor.orchestrator.journal.events import (
    KINDS,
    Event,
    StageFinished,
    StageReopened,
    WorkflowStarted,
    parse,
)
from nestor.orchestrator.journal.journal import damaged_line, event_of, iter_events
from nestor.orchestrator.journal.state import RunState
from nestor.orchestrator.journal.status import StageStatus

__all__ = ["JournalSoFar", "Summaries", "paused_gc", "sparse_gc"]

# The young generation's threshold while a driver's loop runs (Python's default: 700).
SPARSE_GC_THRESHOLD = 50_000

# A line's seq, time and kind come before its stage: its name lies within this many bytes.
STAGE_WITHIN = 160


# Objects made with the collector paused past which they are frozen, not scanned.
FREEZE_AFTER = 100_000


@contextlib.contextmanager
def paused_gc() -> Iterator[None]:
    """Python's cyclic garbage collector paused (a context, or a decorator).

    Resume makes millions of objects that live on (a stage's typed events, its
    searcher's replayed trials and population), and the collector's full passes
    over a heap that keeps growing cost about a third of the resume's CPU. They
    are made here with it paused; reference counting still frees what dies.

    Once it is done, if it made many objects (``FREEZE_AFTER``: a long journal), what
    is alive is frozen (``gc.freeze``) before the collector runs again: else its first
    pass, the youngest generation's, scans every object made while it was paused
    (millions: a sixth of a million-event resume's time). Frozen objects are still
    freed by their reference counts; only a cycle among them that dies later is left
    to the process's end. A fresh run's or a short journal's are left as they were."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            if gc.get_count()[0] >= FREEZE_AFTER:
                gc.freeze()
            gc.enable()


class Summaries(MutableMapping[str, dict[str, Any]]):
    """Finished stages' summaries by name, in the order they finished; one read back
    from the journal is parsed from its line only when first looked up.

    A stage's summary lists every trial it ran: tens of MiB of JSON a stage at a
    million events, which a resumed driver needs only for a stage that takes it as
    a source, and for the run's summary at its end (the journal only grows, so the
    line is still where it was)."""

    def __init__(self) -> None:
        self._loaded: dict[str, dict[str, Any]] = {}
        self._lines: dict[str, tuple[Path, int]] = {}  # not parsed yet: (journal, offset)
        self._order: dict[str, None] = {}

    def found(self, stage: str, path: Path, offset: int) -> None:
        """``stage``'s StageFinished is the line at ``offset`` of ``path``."""
        self._loaded.pop(stage, None)
        self._lines[stage] = (path, offset)
        self._order.pop(stage, None)
        self._order[stage] = None

    def __getitem__(self, stage: str) -> dict[str, Any]:
        if stage not in self._loaded:
            path, offset = self._lines[stage]
            with path.open("rb") as handle:
                handle.seek(offset)
                line = handle.readline()
            where = f"at byte {offset}"
            try:
                event = parse(event_of(line, path, where))
            except (ValueError, KeyError, TypeError):
                event = None
            if not isinstance(event, StageFinished) or event.stage != stage:
                raise damaged_line(path, where, f"is not stage {stage!r}'s end")
            self._loaded[stage] = event.summary
            del self._lines[stage]
        return self._loaded[stage]

    def __setitem__(self, stage: str, summary: dict[str, Any]) -> None:
        self._lines.pop(stage, None)
        self._loaded[stage] = summary
        self._order.pop(stage, None)
        self._order[stage] = None

    def __delitem__(self, stage: str) -> None:
        del self._order[stage]
        self._loaded.pop(stage, None)
        self._lines.pop(stage, None)

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._order))

    def __len__(self) -> int:
        return len(self._order)

    def __contains__(self, stage: object) -> bool:
        return stage in self._order

    def copy(self) -> Summaries:
        """Another mapping of the same summaries (those parsed, shared; the rest not
        parsed by either until looked up)."""
        other = Summaries()
        other._loaded, other._lines = dict(self._loaded), dict(self._lines)
        other._order = dict(self._order)
        return other

    def __repr__(self) -> str:
        return f"Summaries({list(self._order)})"


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
    """The journal's events as a resumed run uses them, typed and kept by stage.

    The run's fold (:class:`RunState`, its stages' heads: ``heads``) says which stages
    started, finished (where each summary's line is) or were reopened, and where the
    run's start is; this keeps, beside it, each stage's own events, in journal order,
    for its runner's restore."""

    def __init__(self, records: Iterable[dict[str, Any]] = (), *,
                 finished: bool = True) -> None:
        """``records``: journal lines' dicts in journal order (a fresh run: none);
        ``finished``: keep the events of finished stages too (a report that rebuilds
        a finished stage's runner needs them; a resumed scheduler does not)."""
        self.finished = finished
        self.heads = RunState(trials=False)  # the one fold of the journal's events
        self.started: WorkflowStarted | None = None
        self.summaries = Summaries()  # finished stages, by name
        self.stages_started: set[str] = set()
        self._mine: dict[str, list[Event]] = {}  # each stage's events, typed
        # Stages a StageReopened names: their events before an earlier StageFinished
        # are kept, a resumed runner restores from them.
        self.reopened: set[str] = set()
        for record in records:
            self.add(parse(record))

    @classmethod
    @paused_gc()
    def read(cls, path: Path) -> JournalSoFar:
        """The journal file at ``path`` (none yet: empty), streamed: never a list of
        every line's dict at once. The stages' heads come first, from the run's fold
        (its snapshot, which the driver keeps, and the journal after it), so the lines
        of finished stages' trials and searches (most of a long run's journal) are not
        even parsed by the pass that keeps each stage's events."""
        so_far = cls(finished=False)
        heads = so_far.heads = RunState.of(path.parent, path.name, trials=False)
        if heads.workflow.start_offset is not None:
            started = parse(_line_at(path, heads.workflow.start_offset))
            so_far.started = started if isinstance(started, WorkflowStarted) else None
        ends = sorted((stage.summary_at, name) for name, stage in heads.stages.items()
                      if stage.state == StageStatus.FINISHED and stage.summary_at is not None)
        for offset, name in ends:  # in the order they finished; summaries parsed if needed
            so_far.summaries.found(name, path, offset)
        so_far.stages_started = {name for name, stage in heads.stages.items()
                                 if stage.started_at is not None or stage.summary_at is not None}
        so_far.reopened = {name for name, stage in heads.stages.items() if stage.reopened}
        # The second pass reads every line of an unfinished stage: a reopened stage's
        # summary is taken again and dropped again, in journal order. Journal.append
        # writes a stage event's stage first, after its kind: the line's first "stage"
        # key (a trial's config may hold another, further on).
        names = {json.dumps(name).encode() + b"," for name in so_far.summaries}

        def finished_stage(line: bytes) -> bool:
            at = line.find(b'"stage":', 0, STAGE_WITHIN)
            if at < 0:
                return False
            at += len(b'"stage":')
            return line[at:line.find(b",", at) + 1] in names

        for record in iter_events(path, skip=finished_stage if names else None):
            so_far.keep(_parsed(record, path))
        return so_far

    @classmethod
    def of(cls, events: JournalSoFar | Iterable[dict[str, Any]] | None) -> JournalSoFar:
        """``events`` as a JournalSoFar (callers may still hand over a list of records)."""
        return events if isinstance(events, JournalSoFar) else cls(events or ())

    def add(self, event: Event) -> None:
        """Fold the next event into the heads, and keep it."""
        self.heads.apply(event)
        stage = self.heads.stages.get(getattr(event, "stage", None) or "")
        if stage is not None:
            if stage.started_at is not None or stage.summary_at is not None:
                self.stages_started.add(stage.name)
            if stage.reopened:
                self.reopened.add(stage.name)
        self.keep(event)

    def keep(self, event: Event) -> None:
        """Keep the next event where resume uses it (the heads have folded it)."""
        if isinstance(event, WorkflowStarted):
            if self.started is None:
                self.started = event
            return
        stage = getattr(event, "stage", None)
        if stage is None:
            return
        if isinstance(event, StageFinished):
            self.summaries[event.stage] = event.summary
            if not self.finished and event.stage not in self.reopened:
                self._mine.pop(event.stage, None)
            return
        if isinstance(event, StageReopened):
            self.summaries.pop(event.stage, None)  # its summary so far no longer stands
        if self.finished or event.stage not in self.summaries:
            self._mine.setdefault(event.stage, []).append(event)

    def of_stage(self, stage: str, *classes: type[Event]) -> list[Event]:
        """This stage's events of these classes (all, by default), in order."""
        mine = self._mine.get(stage, [])
        if not classes or set(classes) >= set(KINDS.values()):
            return list(mine)
        return [e for e in mine if isinstance(e, classes)]


def _line_at(path: Path, offset: int) -> dict[str, Any]:
    """The journal line that starts at byte ``offset``, parsed."""
    with path.open("rb") as handle:
        handle.seek(offset)
        return event_of(handle.readline(), path, f"at byte {offset}")


def _parsed(record: dict[str, Any], path: Path) -> Event:
    """A journal line's record as its typed event; JournalError (naming its seq) where
    its kind or fields are not an event's."""
    try:
        return parse(record)
    except (ValueError, TypeError, KeyError):
        raise damaged_line(path, f"with seq {record.get('seq')!r}",
                           f"({record.get('event')!r}) is not a journal event") from None
