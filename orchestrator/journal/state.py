"""One fold of the journal into a typed run state: what every reader of a run needs.

The journal stays the truth; :class:`RunState` is what it says, folded once, in
journal order, one event at a time (``apply``), so it costs time linear in the
journal and can be kept up to date by folding only what was appended since
(``fold`` from ``offset``). Readers use it instead of matching event names:

    state = RunState.of(run_dir)                      # snapshot + the journal's tail
    for stage in state.stages.values():
        print(stage.name, stage.state, stage.count("completed"), len(stage.running))

API (``nestor status``, the plots, the resume and the MLflow projector read through it):

- ``RunState()`` then ``apply(event)`` for each typed event (``events.parse``),
  or ``apply_record(record)`` for a raw journal line's dict; ``fold(path)``
  reads the journal file from ``state.offset`` (bytes) to its last complete
  line and applies what it holds, so calling it again folds only new lines.
- ``fold_new(path, limit)``: the same, a part at a time, saying what is new: each
  line's (seq, typed event), parsed whole (the searchers' logs, a stage's summary),
  and whether the journal holds more. The MLflow projector tails the journal so.
- ``RunState.of(run_dir)``: the state of a run directory, from the snapshot
  ``journal.fold.json`` when it still matches the journal (same bytes before
  its offset), folding only the tail, and writing the snapshot again (best
  effort: a read-only copy of a run is read all the same). ``save``/``load``
  do the snapshot alone. ``RunState(trials=False)`` (and ``of(..., trials=False)``,
  snapshot ``journal.fold-stages.json``) folds the stages' heads alone: their
  state, counts and running ids, not a record per trial; a snapshot of a few KiB
  whatever the journal's size, which is what ``nestor status`` and a resume read,
  and what a driver keeps current (``journal.kept``).
  ``RunState(details=True)`` keeps, besides, each trial's config, generation, metrics
  and reason (:class:`TrialDetail`): what the results of an unfinished run list
  (``projections.unfinished``). Never in a snapshot, so what status, the plots and a
  resume fold and keep does not grow with it.
- ``state.workflow`` (name, slots, pid of the last driver, run key, finished,
  interrupted reason, resumes, where the first start's line is), ``state.first_time``/
  ``last_time`` (any event's stamp), ``state.events`` (lines folded),
  ``state.stages[name]``: :class:`StageState` with its ``trials`` (:class:`TrialState`
  by id, each with its :class:`Attempt` list), ``running`` (trial ids started and not
  finished), ``finished`` (TrialFinished counts by status), ``runs`` (every attempt that
  ended, finished or failed-and-retried, in the order they ended: what a search
  paid for), ``plan``/``replans``, ``threshold_at`` and ``removed`` checkpoints,
  ``summary_at`` (where its standing summary's line is) and ``reopened``.
- ``state.timeline()``: every attempt's start and end and every driver restart
  in journal order, for anything that replays slot use.

The resume (``engine.history.JournalSoFar``) takes the stages' heads from here,
then reads the lines of the unfinished stages alone, keeping each stage's typed
events for its runner's restore (the searchers' logs among them), and parses a
finished stage's summary from ``summary_at`` when it is looked up.

Folded, not parsed: the searchers' logs (``SearchLogged``, most of a big
journal) are skipped unparsed by ``fold`` (their stamp is still read), and a
stage's summary (``StageFinished``: every trial again, tens of MiB on a big run)
is not kept, since results.json holds it and ``summary_at`` says where it is.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nestor.orchestrator.journal.events import (
    KINDS,
    CheckpointRemoved,
    Event,
    SearchLogged,
    StageFinished,
    StagePlanned,
    StageReopened,
    StageReplanned,
    StageStarted,
    ThresholdReached,
    TrialAttemptFailed,
    TrialFinished,
    TrialInterrupted,
    TrialStarted,
    UnknownEvent,
    WorkflowFinished,
    WorkflowInterrupted,
    WorkflowResumed,
    WorkflowStarted,
    kinds_of,
    parse,
)
from nestor.orchestrator.journal.journal import JournalError, damaged_line, event_of, unsummed
from nestor.orchestrator.journal.status import StageStatus, TrialStatus

SNAPSHOT = "journal.fold.json"
STAGES_SNAPSHOT = "journal.fold-stages.json"  # the fold without its trials
VERSION = 3  # of the snapshot's layout: another version is folded afresh
CHECK_BYTES = 4096  # the journal's bytes before the offset that a snapshot must match
SKIPPED = kinds_of(SearchLogged)  # lines the fold reads only the stamp of
# The last field of a kind, not kept and so not parsed: the line is cut before it.
UNKEPT = {StageFinished.kind: b',"summary":'}


@dataclass(slots=True)
class Attempt:
    """One attempt of one trial: started (or only ended, in an old journal), maybe ended.
    ``outcome`` is the trial's status for its last attempt, "failed" for an attempt that
    failed and was retried, "interrupted" when a driver restart or a TrialInterrupted
    cut it, None while it runs. ``start_index``/``end_index``: events folded before it."""

    stage: str
    trial: str
    attempt: int
    shape: str | None = None
    started: float | None = None
    start_index: int | None = None
    ended: float | None = None
    end_index: int | None = None
    outcome: str | None = None


@dataclass(slots=True)
class Run:
    """An attempt that ended and trained (TrialFinished or TrialAttemptFailed): what
    a search's runs are counted by. ``status``: the trial's, or "retried"."""

    trial: str
    attempt: int
    status: str
    value: Any


@dataclass(slots=True)
class TrialDetail:
    """What a trial ran with and reported, kept by ``RunState(details=True)`` alone:
    its config and generation (from its first event), the metrics and reason of its
    last TrialFinished."""

    config: dict[str, Any] = field(default_factory=dict)
    generation: Any = 0
    metrics: dict[str, Any] = field(default_factory=dict)
    reason: str | None = None


@dataclass(slots=True)
class TrialState:
    id: str
    attempts: int = 0
    status: str = TrialStatus.RUNNING  # until TrialFinished: completed, pruned or failed
    value: Any = None
    shape: str | None = None
    slot_seconds: float = 0.0
    finished_at: float | None = None
    checkpoint: str | None = None
    history: list[Attempt] = field(default_factory=list)
    detail: TrialDetail | None = None  # with ``RunState(details=True)`` alone


@dataclass(slots=True)
class StageState:
    name: str
    kind: str | None = None
    sources: list[str] = field(default_factory=list)
    state: str = StageStatus.RUNNING  # or finished
    started_at: float | None = None
    finished_at: float | None = None
    trials: dict[str, TrialState] = field(default_factory=dict)
    running: set[str] = field(default_factory=set)
    finished: dict[str, int] = field(default_factory=dict)  # TrialFinished by status
    runs: list[Run] = field(default_factory=list)
    plan: dict[str, Any] | None = None  # the StagePlanned's dp, mp, slots
    replans: list[dict[str, Any]] = field(default_factory=list)
    threshold_at: float | None = None
    removed: set[str] = field(default_factory=set)  # trials whose checkpoint went
    # Where its StageFinished's line starts in the journal, while that summary stands
    # (None again once reopened): a reader parses the summary there if it needs it.
    summary_at: int | None = None
    reopened: bool = False  # a StageReopened named it: its events before then count

    def count(self, status: str) -> int:
        return self.finished.get(status, 0)


@dataclass(slots=True)
class WorkflowState:
    name: str | None = None
    slots: int = 0  # the most any driver had
    pid: int | None = None  # the last driver's
    run_key: str | None = None
    backend: str | None = None
    started_at: float | None = None
    finished: bool = False
    interrupted: str | None = None  # the last WorkflowInterrupted's reason
    resumes: list[tuple[int, float]] = field(default_factory=list)  # (index, time)
    start_offset: int | None = None  # where the first WorkflowStarted's line starts


class RunState:
    """A run as its journal says it: see the module's docstring."""

    def __init__(self, trials: bool = True, details: bool = False) -> None:
        self.trials = trials  # False: the stages' heads alone (counts, running ids)
        self.details = details and trials  # True: each trial's TrialDetail too (no snapshot)
        self.workflow = WorkflowState()
        self.stages: dict[str, StageState] = {}
        self.events = 0  # lines folded (skipped kinds included)
        self.offset = 0  # journal bytes folded
        # The CRC-32 of the journal's bytes before ``_summed_to`` (``offset``, once
        # :meth:`sum_to_offset`): a snapshot holds it, so a byte changed anywhere before
        # its offset is found by a later reader, not only in the last lines it checks.
        self.crc = 0
        self._summed_to = 0
        self.first_time: float | None = None
        self.last_time: float | None = None
        self._open: dict[tuple[str, str, int], Attempt] = {}  # started, not ended

    # -- folding --------------------------------------------------------------------

    def apply(self, event: Event) -> None:
        """Fold one typed event, the next in journal order; ``offset`` is where its line
        starts (as :meth:`fold` and a driver's :class:`~.kept.FoldKeeper` call it)."""
        index = self.events
        self.events += 1
        self._stamp(event.time)
        if isinstance(event, WorkflowStarted | WorkflowResumed):
            self._driver(event, index)
            if isinstance(event, WorkflowStarted) and self.workflow.start_offset is None:
                self.workflow.start_offset = self.offset
            return
        if isinstance(event, WorkflowFinished):
            self.workflow.finished = True
            return
        if isinstance(event, WorkflowInterrupted):
            self.workflow.interrupted = event.reason
            return
        stage = self._stage(event.stage)  # type: ignore[attr-defined]
        if isinstance(event, TrialStarted):
            self._started(stage, event, index)
        elif isinstance(event, TrialFinished | TrialAttemptFailed | TrialInterrupted):
            self._ended(stage, event, index)
        elif isinstance(event, StageStarted):
            stage.kind, stage.sources, stage.started_at = (event.stage_kind,
                                                           list(event.sources or []), event.time)
        elif isinstance(event, StageFinished):
            stage.state, stage.finished_at, stage.running = StageStatus.FINISHED, event.time, set()
            stage.summary_at = self.offset
        elif isinstance(event, StageReopened):  # a resume goes on with it (--budget, --retry)
            stage.state, stage.finished_at, stage.summary_at = StageStatus.RUNNING, None, None
            stage.reopened = True
        elif isinstance(event, StagePlanned):
            stage.plan = {"dp": event.dp, "mp": event.mp, "slots": event.slots}
        elif isinstance(event, StageReplanned):
            stage.replans.append({"dp": event.dp, "mp": event.mp, "left": event.left,
                                  "reason": event.reason})
        elif isinstance(event, ThresholdReached):
            stage.threshold_at = event.time
        elif isinstance(event, CheckpointRemoved):
            stage.removed.add(event.trial)

    def apply_record(self, record: dict[str, Any]) -> None:
        """Fold one journal record (a line's dict); a kind the fold skips is counted."""
        if record.get("event") in SKIPPED:
            self.events += 1
            self._stamp(record.get("time"))
            return
        self.apply(read(record))

    def fold(self, path: str | os.PathLike[str], until: int | None = None) -> int:
        """Fold the journal at ``path`` from ``self.offset`` to its last complete line
        (a torn tail waits for the next call), or to byte ``until`` (a line boundary);
        returns the lines folded."""
        before = self.events
        for line in self._lines(path, until):
            number = self.events + 1  # blank lines aside, which nestor never writes
            size = len(line)
            try:
                line = unsummed(line, path, number)
                kind = _kind(line)
                if kind in SKIPPED:
                    stamp = _time(line)
                else:
                    event = read(json.loads(_head(line, kind)))
            except (ValueError, KeyError, TypeError, AttributeError):
                raise damaged_line(path, number, "is not a journal event") from None
            if kind in SKIPPED:
                self.events += 1
                self._stamp(stamp)
            else:
                self.apply(event)
            self.offset += size
        return self.events - before

    def fold_new(self, path: str | os.PathLike[str], limit: int,
                 damaged: Callable[[JournalError], None] | None = None,
                 ) -> tuple[list[tuple[int, Event | None]], bool]:
        """Fold on from ``self.offset``, about ``limit`` bytes of complete lines (a
        longer line whole), and say what is new: each line's (seq, typed event), every
        field parsed (the searchers' logs and a stage's summary too: a reader that
        shows them, the MLflow projector), and whether the journal holds more.

        An event of a kind this version does not know, or with fields its class lacks,
        is (seq, None): counted, not folded. With ``damaged``, a line that is not as it
        was written is handed to it (as JournalError) and is (its index, None) too;
        without, it raises, as :meth:`fold` does."""
        new: list[tuple[int, Event | None]] = []
        read_bytes = 0
        for line in self._lines(path, None, limit):
            at, size = self.events, len(line)
            read_bytes += size
            try:
                record = event_of(line, path, at + 1)
            except JournalError as exc:
                if damaged is None:
                    raise
                damaged(exc)
                record = None
            if record is None:
                self.events += 1
                new.append((at, None))
            else:
                seq = int(record.get("seq", at))
                try:
                    event: Event | None = parse(record)
                except (UnknownEvent, TypeError):
                    event = None
                if event is None:
                    self.events += 1
                    self._stamp(record.get("time"))
                else:
                    self.apply(event)
                new.append((seq, event))
            self.offset += size
        return new, read_bytes >= limit

    def _lines(self, path: str | os.PathLike[str], until: int | None,
               limit: int | None = None) -> Iterator[bytes]:
        """The journal's complete lines from ``self.offset`` (blank ones passed over),
        to byte ``until`` or about ``limit`` bytes on; the caller moves ``offset`` past
        each line it takes. The CRC-32 of what is read follows ``offset``."""
        if not Path(path).exists():
            return
        with Path(path).open("rb") as handle:
            handle.seek(self.offset)
            start = self.offset
            for line in handle:
                if not line.endswith(b"\n") or (until is not None
                                                 and self.offset + len(line) > until):
                    break  # torn, still being written, or past ``until``
                if limit is not None and self.offset - start >= limit:
                    break
                if self._summed_to == self.offset:
                    self.crc = zlib.crc32(line, self.crc)
                    self._summed_to += len(line)
                if not line.strip():
                    self.offset += len(line)
                    continue
                yield line

    def timeline(self) -> Iterator[tuple[str, Any]]:
        """("start", Attempt), ("end", Attempt) and ("resume", time), in journal order."""
        marks: list[tuple[int, int, str, Any]] = [(i, 0, "resume", t)
                                                  for i, t in self.workflow.resumes]
        for stage in self.stages.values():
            for trial in stage.trials.values():
                for attempt in trial.history:
                    if attempt.start_index is not None:
                        marks.append((attempt.start_index, 1, "start", attempt))
                    if attempt.end_index is not None:
                        marks.append((attempt.end_index, 2, "end", attempt))
        marks.sort(key=lambda m: (m[0], m[1]))
        for _, _, what, item in marks:
            yield what, item

    # -- the parts --------------------------------------------------------------------

    def _stamp(self, time: float | None) -> None:
        if time is None:
            return
        if self.first_time is None:
            self.first_time = time
        self.last_time = time if self.last_time is None else max(self.last_time, time)

    def _driver(self, event: WorkflowStarted | WorkflowResumed, index: int) -> None:
        flow = self.workflow
        flow.pid = event.pid
        flow.slots = max(flow.slots, int(event.slots or 0))
        if isinstance(event, WorkflowStarted):
            flow.name, flow.run_key, flow.backend = event.workflow, event.run_key, event.backend
            flow.started_at = event.time
            return
        flow.resumes.append((index, event.time))
        flow.finished = False  # a finished run resumed goes on (an extended search)
        for attempt in self._open.values():  # a restart ended whatever was running
            attempt.ended, attempt.end_index, attempt.outcome = (event.time, index,
                                                                TrialStatus.INTERRUPTED)
        self._open.clear()

    def _stage(self, name: str) -> StageState:
        stage = self.stages.get(name)
        if stage is None:
            stage = self.stages[name] = StageState(name)
        return stage

    def _trial(self, stage: StageState, trial: dict[str, Any] | str) -> TrialState:
        trial_id = str(trial["id"] if isinstance(trial, dict) else trial)
        record = stage.trials.get(trial_id)
        if record is None:
            record = stage.trials[trial_id] = TrialState(trial_id)
            if self.details:
                trial = trial if isinstance(trial, dict) else {}
                record.detail = TrialDetail(dict(trial.get("config") or {}),
                                            trial.get("generation", 0))
        return record

    def _started(self, stage: StageState, event: TrialStarted, index: int) -> None:
        if not self.trials:
            stage.running.add(str(event.trial["id"]))
            return
        trial = self._trial(stage, event.trial)
        attempt = Attempt(stage.name, trial.id, int(event.attempt or 1), event.shape,
                          event.time, index)
        trial.history.append(attempt)
        trial.attempts = max(trial.attempts, attempt.attempt)
        trial.shape = event.shape or trial.shape
        stage.running.add(trial.id)
        self._open[(stage.name, trial.id, attempt.attempt)] = attempt

    def _ended(self, stage: StageState,
               event: TrialFinished | TrialAttemptFailed | TrialInterrupted, index: int) -> None:
        if not self.trials:
            if isinstance(event, TrialFinished):
                stage.running.discard(str(event.trial["id"]))
                outcome = event.status or TrialStatus.COMPLETED
                stage.finished[outcome] = stage.finished.get(outcome, 0) + 1
            return
        trial = self._trial(stage, event.trial)
        number = int(event.attempt or 1)
        trial.attempts = max(trial.attempts, number)
        if isinstance(event, TrialInterrupted):
            outcome = TrialStatus.INTERRUPTED
        elif isinstance(event, TrialAttemptFailed):
            outcome = TrialStatus.FAILED
            stage.runs.append(Run(trial.id, number, "retried", None))
        else:
            outcome = event.status or TrialStatus.COMPLETED
            stage.runs.append(Run(trial.id, number, outcome, event.value))
            stage.running.discard(trial.id)
            if trial.finished_at is not None:  # a failed trial run again (--retry)
                stage.finished[trial.status] = stage.finished.get(trial.status, 1) - 1
            stage.finished[outcome] = stage.finished.get(outcome, 0) + 1
            trial.status, trial.value, trial.finished_at = outcome, event.value, event.time
            trial.checkpoint = event.checkpoint
            if trial.detail is not None:
                trial.detail.metrics, trial.detail.reason = event.metrics or {}, event.reason
        if not isinstance(event, TrialInterrupted):
            trial.slot_seconds += float(event.slot_seconds or 0.0)
        attempt = self._open.pop((stage.name, trial.id, number), None)
        if attempt is not None:
            attempt.ended, attempt.end_index, attempt.outcome = event.time, index, outcome

    # -- the snapshot -----------------------------------------------------------------

    @classmethod
    def of(cls, run_dir: str | os.PathLike[str], journal: str = "journal.jsonl",
           trials: bool = True, save: bool = True, until: int | None = None,
           details: bool = False) -> RunState:
        """The run's state: its snapshot brought up to date with the journal's tail
        (up to byte ``until``, if given). ``trials=False``: the stages' heads alone,
        with a snapshot of their own (small: what ``nestor status`` reads, and what a
        driver keeps current: ``orchestrator.journal.kept``). ``details=True``: each
        trial's :class:`TrialDetail` too, folded from the journal's start (no snapshot
        holds them)."""
        path = Path(run_dir) / journal
        if details:
            state = cls(trials, details=True)
            state.fold(path, until)
            return state
        snapshot = snapshot_path(run_dir, trials)
        state = cls.load(snapshot, path, trials) or cls(trials)
        if until is not None and state.offset > until:  # ahead of what is asked for
            state = cls(trials)
        if state.fold(path, until) and save:
            with contextlib.suppress(OSError):  # a read-only copy of a run: not cached
                state.save(snapshot, path)
        return state

    def sum_to_offset(self, journal: Path) -> None:
        """Bring :attr:`crc` up to :attr:`offset`, reading the bytes folded from records
        (:meth:`apply_record`: a driver's own events) rather than from the file."""
        if self._summed_to < self.offset:
            self.crc = _crc(journal, self._summed_to, self.offset, self.crc)
            self._summed_to = self.offset

    def save(self, snapshot: Path, journal: Path) -> None:
        """Write the state with the journal offset it covers, and the CRC-32 of the
        journal's bytes before it (atomically)."""
        if self.details:
            raise ValueError("a fold with details=True is not snapshotted: its snapshot"
                             " would be read back without them")
        self.sum_to_offset(journal)
        data = {"version": VERSION, "trials": self.trials, "offset": self.offset,
                "check": _check(journal, self.offset), "crc": self.crc,
                "state": self._encode()}
        tmp = snapshot.with_name(f"{snapshot.name}.{os.getpid()}.tmp")  # two readers at once
        try:
            tmp.write_text(json.dumps(data, separators=(",", ":")))
            tmp.replace(snapshot)
        except OSError:
            tmp.unlink(missing_ok=True)  # a full disk leaves no half-written file
            raise

    @classmethod
    def load(cls, snapshot: Path, journal: Path, trials: bool = True) -> RunState | None:
        """The snapshot's state if it is of this layout and the journal still holds the
        bytes it was folded from; else None (fold from the start)."""
        try:
            data = json.loads(snapshot.read_bytes())
            if data.get("version") != VERSION or data.get("trials") != trials:
                return None
            offset = int(data["offset"])
            if _check(journal, offset) != data["check"]:
                return None
            # Every byte before the offset as it was folded (a whole read of them, at
            # CRC-32's speed, not a fold): else a byte changed there goes unseen.
            if _crc(journal, 0, offset) != data["crc"]:
                return None
            state = cls._decode(data["state"], offset, trials)
            state.crc, state._summed_to = int(data["crc"]), offset
            return state
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def _encode(self) -> dict[str, Any]:
        stages = []
        for stage in self.stages.values():
            head = {f.name: getattr(stage, f.name) for f in dataclasses.fields(StageState)
                    if f.name not in ("trials", "running", "runs", "removed")}
            stages.append({
                **head, "running": sorted(stage.running), "removed": sorted(stage.removed),
                "runs": [[r.trial, r.attempt, r.status, r.value] for r in stage.runs],
                "trials": [[t.id, t.attempts, t.status, t.value, t.shape, t.slot_seconds,
                            t.finished_at, t.checkpoint,
                            [[a.attempt, a.shape, a.started, a.start_index, a.ended,
                              a.end_index, a.outcome] for a in t.history]]
                           for t in stage.trials.values()],
            })
        flow = dataclasses.asdict(self.workflow)
        return {"workflow": flow, "stages": stages, "events": self.events,
                "first_time": self.first_time, "last_time": self.last_time,
                "open": [[a.stage, a.trial, a.attempt] for a in self._open.values()]}

    @classmethod
    def _decode(cls, data: dict[str, Any], offset: int, trials: bool) -> RunState:
        state = cls(trials)
        state.offset, state.events = offset, int(data["events"])
        state.first_time, state.last_time = data["first_time"], data["last_time"]
        flow = data["workflow"]
        state.workflow = WorkflowState(**{**flow, "resumes": [tuple(r) for r in flow["resumes"]]})
        for raw in data["stages"]:
            stage = StageState(**{k: v for k, v in raw.items()
                                  if k not in ("trials", "running", "runs", "removed")})
            stage.running, stage.removed = set(raw["running"]), set(raw["removed"])
            stage.runs = [Run(*r) for r in raw["runs"]]
            for (tid, attempts, status, value, shape, slot_s, at, checkpoint,
                 history) in raw["trials"]:
                stage.trials[tid] = TrialState(
                    tid, attempts, status, value, shape, slot_s, at, checkpoint,
                    [Attempt(stage.name, tid, *a) for a in history])
            state.stages[stage.name] = stage
        for stage_name, tid, number in data["open"]:
            attempt = next(a for a in state.stages[stage_name].trials[tid].history
                           if a.attempt == number and a.end_index is None)
            state._open[(stage_name, tid, number)] = attempt
        return state


def snapshot_path(run_dir: str | os.PathLike[str], trials: bool = True) -> Path:
    """Where a run's fold snapshot is: one per level of detail."""
    return Path(run_dir) / (SNAPSHOT if trials else STAGES_SNAPSHOT)


def fold(records: Iterable[dict[str, Any] | Event]) -> RunState:
    """The state of records (journal lines' dicts) or typed events, folded in order."""
    state = RunState()
    for record in records:
        if isinstance(record, Event):
            state.apply(record)
        else:
            state.apply_record(record)
    return state


def read(record: dict[str, Any]) -> Event:
    """``events.parse``, but a field its class requires that an older writer (or a
    hand-made record) left out reads as None, so an old journal still folds."""
    try:
        return parse(record)
    except TypeError:
        cls = KINDS[record["event"]]
        needed = {f.name: None for f in dataclasses.fields(cls)
                  if f.default is dataclasses.MISSING
                  and f.default_factory is dataclasses.MISSING}
        return parse({**needed, **record})


def _kind(line: bytes) -> str | None:
    """A line's kind from its start, where Journal.append writes it (None: not there)."""
    start = line.find(b'"event":"', 0, 120)
    if start < 0:
        return None
    start += 9
    return line[start:line.find(b'"', start)].decode()


def _head(line: bytes, kind: str | None) -> bytes:
    """The line without the fields the fold does not keep (a stage's summary: every
    trial again, tens of MiB on a big run), cut where Journal.append wrote them last;
    the whole line where they are not found."""
    marker = UNKEPT.get(kind or "")
    if marker is None:
        return line
    at = line.find(marker)
    return line if at < 0 else line[:at] + b"}"


def _time(line: bytes) -> float | None:
    start = line.find(b'"time":', 0, 80)
    if start < 0:
        return None
    start += 7
    try:
        return float(line[start:line.find(b",", start)])
    except ValueError:
        return None


def _crc(journal: Path, start: int, end: int, crc: int = 0) -> int | None:
    """The CRC-32 of the journal's bytes from ``start`` to ``end``, continuing ``crc``
    (None: the journal is shorter)."""
    try:
        with journal.open("rb") as handle:
            handle.seek(start)
            while start < end:
                data = handle.read(min(end - start, 1 << 20))
                if not data:
                    return None
                crc = zlib.crc32(data, crc)
                start += len(data)
    except OSError:
        return None
    return crc


def _check(journal: Path, offset: int) -> str | None:
    """A digest of the journal's bytes just before ``offset`` (None: it is shorter)."""
    try:
        with journal.open("rb") as handle:
            handle.seek(max(0, offset - CHECK_BYTES))
            data = handle.read(min(offset, CHECK_BYTES))
    except OSError:
        return None
    if len(data) != min(offset, CHECK_BYTES):
        return None
    return hashlib.sha1(data).hexdigest() + f":{offset}"
