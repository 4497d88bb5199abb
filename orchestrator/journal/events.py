"""Every kind of event the journal holds, with its fields: the one list of them.

The driver writes these and nothing else (``Journal.record``); the readers
(resume, the MLflow projector, ``nestor status``, the plots, results) read
the same names. An event is a plain JSON object on disk, so older journals
stay readable: a field added later is optional here.

    journal.record(TrialStarted(stage="tune", trial=trial.to_dict(), attempt=1,
                                gang=3, shape="2x1", startup_s=1.8))
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, ClassVar

from nestor.orchestrator.journal.safe import check_id


@dataclass(frozen=True, kw_only=True)
class Event:
    kind: ClassVar[str]
    # When the journal appended it (seconds since the epoch); set on events read
    # back by :func:`parse`, not written by the caller (the journal stamps it).
    time: float = field(default=0.0, compare=False, metadata={"stamp": True})

    def fields(self) -> dict[str, Any]:
        """The event's fields as written: optional ones left out while unset."""
        out = {}
        for name, optional in _written(type(self)):
            value = getattr(self, name)
            if optional and value in (None, False):
                continue
            out[name] = value
        return out


@functools.cache
def _written(cls: type[Event]) -> tuple[tuple[str, bool], ...]:
    """(name, optional) of the fields an event of ``cls`` writes, worked out once per
    class: ``dataclasses.fields`` per event was a tenth of the journal's cost."""
    return tuple((f.name, bool(f.metadata.get("optional"))) for f in dataclasses.fields(cls)
                 if not f.metadata.get("stamp"))


def _optional(default: Any = None) -> Any:
    return field(default=default, metadata={"optional": True})


@dataclass(frozen=True, kw_only=True)
class WorkflowStarted(Event):
    kind: ClassVar[str] = "workflow_started"
    workflow: str
    slots: int
    pid: int
    run_key: str  # names the run's MLflow runs for good (see tracking.derived_key)
    backend: str | None = _optional()  # a simulation's backend; a real run's is Ray
    # The spec as the run started with it (its spec.yaml then): a resume compares the
    # run's spec.yaml with it, accepting an edit it can honour and refusing the others.
    spec: str | None = _optional()


@dataclass(frozen=True, kw_only=True)
class WorkflowResumed(Event):
    kind: ClassVar[str] = "workflow_resumed"
    slots: int
    pid: int


@dataclass(frozen=True, kw_only=True)
class WorkflowFinished(Event):
    kind: ClassVar[str] = "workflow_finished"


@dataclass(frozen=True, kw_only=True)
class WorkflowInterrupted(Event):
    kind: ClassVar[str] = "workflow_interrupted"
    reason: str


@dataclass(frozen=True, kw_only=True)
class StageStarted(Event):
    kind: ClassVar[str] = "stage_started"
    stage: str
    stage_kind: str
    sources: list[str]


@dataclass(frozen=True, kw_only=True)
class StageFinished(Event):
    kind: ClassVar[str] = "stage_finished"
    stage: str
    summary: dict[str, Any]


@dataclass(frozen=True, kw_only=True)
class StageReopened(Event):
    """A resumed driver goes on with a stage that had finished, or with more of one
    that had not (``nestor resume --budget``, ``--retry``): its summary so far no
    longer stands, and its trials and search are restored from the journal as for
    an interrupted stage. ``budget``: its search's new trial budget; ``retry``: its
    failed planned trials run again."""

    kind: ClassVar[str] = "stage_reopened"
    stage: str
    budget: int | None = _optional()
    retry: bool = _optional(False)


@dataclass(frozen=True, kw_only=True)
class TrialStarted(Event):
    """An attempt's gang is up and its ranks run the trial."""

    kind: ClassVar[str] = "trial_started"
    stage: str
    trial: dict[str, Any]  # search.Trial.to_dict()
    attempt: int
    gang: int | None
    shape: str
    startup_s: float = 0.0  # starting a new gang for it: slot time, not the trial's
    adopted: bool = _optional(False)  # journalled by a resumed driver that found its result
    comm: str = _optional("horovod")  # what its ranks communicate over: horovod or torch
    # A stage under a wall budget: its seconds so far (orchestrator.engine.wall), which a
    # resumed driver goes on from.
    elapsed_s: float | None = _optional()


@dataclass(frozen=True, kw_only=True)
class TrialAttemptFailed(Event):
    """An attempt failed and the trial will run again."""

    kind: ClassVar[str] = "trial_attempt_failed"
    stage: str
    trial: dict[str, Any]
    attempt: int
    reason: str
    slot_seconds: float
    startup_slot_seconds: float = 0.0
    logs: dict[str, str] = field(default_factory=dict)
    adopted: bool = _optional(False)


@dataclass(frozen=True, kw_only=True)
class TrialFinished(Event):
    """A trial's last word: completed, pruned or failed for good, or stopped by its
    stage's wall budget (``status: stopped``, never retried)."""

    kind: ClassVar[str] = "trial_finished"
    stage: str
    trial: dict[str, Any]
    attempt: int
    status: str
    value: Any
    metrics: dict[str, Any]
    reason: str | None
    slot_seconds: float
    startup_slot_seconds: float = 0.0
    checkpoint: str | None = None
    history: list[dict[str, Any]] = field(default_factory=list)
    logs: dict[str, str] = field(default_factory=dict)
    adopted: bool = _optional(False)
    # What the trainer logged for its MLflow run (trainers.logged): {"metrics": {name:
    # [[step, value, time], ...]}, "tags": {...}, "artifacts": [{"name": its place in
    # the run, "path": the file, relative to the run directory, "sha256", "bytes"}],
    # "problems": [...]}; left out when it logged nothing (and in older journals).
    logged: dict[str, Any] | None = field(default=None, metadata={"optional": True})
    # A stage under a wall budget: its seconds so far (orchestrator.engine.wall), which a
    # resumed driver goes on from.
    elapsed_s: float | None = _optional()


@dataclass(frozen=True, kw_only=True)
class TrialInterrupted(Event):
    kind: ClassVar[str] = "trial_interrupted"
    stage: str
    trial: dict[str, Any]
    attempt: int
    reason: str
    # A stage under a wall budget: its seconds so far (orchestrator.engine.wall), which a
    # resumed driver goes on from.
    elapsed_s: float | None = _optional()


@dataclass(frozen=True, kw_only=True)
class CheckpointRemoved(Event):
    """A finished trial's checkpoint removed under ``keep_checkpoints``: journalled
    before the files go, so a resumed driver never offers it to a later trial."""

    kind: ClassVar[str] = "checkpoint_removed"
    stage: str
    trial: str
    path: str


@dataclass(frozen=True, kw_only=True)
class ThresholdReached(Event):
    kind: ClassVar[str] = "threshold_reached"
    stage: str
    trial: str


@dataclass(frozen=True, kw_only=True)
class SearchLogged(Event):
    """Entries the stage's searcher added to its log (its state is their replay)."""

    kind: ClassVar[str] = "search"
    stage: str
    start: int
    entries: list[dict[str, Any]]


@dataclass(frozen=True, kw_only=True)
class PlanState(Event):
    """A fixed plan's whole state (its few trials, asked and told), journalled when it
    changes: a resumed driver restores the stage's plan from the last one."""

    kind: ClassVar[str] = "plan_state"
    stage: str
    state: dict[str, Any]


@dataclass(frozen=True, kw_only=True)
class StagePlanned(Event):
    """The shape a ``parallel: auto`` stage's trials take, chosen on the slots it
    has; a resumed driver reads it back rather than choosing again."""

    kind: ClassVar[str] = "stage_planned"
    stage: str
    dp: int
    mp: int
    slots: int
    plan: dict[str, Any]  # Plan.to_record(): prediction, goal, why
    measured: bool  # from a measured profile (else the prior)
    # Profile.to_record(), if measured: a resumed driver neither measures nor plans again
    profile: dict[str, Any] | None = field(default=None, metadata={"optional": True})


@dataclass(frozen=True, kw_only=True)
class StageReplanned(Event):
    """The shape of the stage's trials from now on (running ones keep theirs)."""

    kind: ClassVar[str] = "stage_replanned"
    stage: str
    dp: int
    mp: int
    left: int  # trials not yet started when it re-planned
    running: int
    reason: str


@dataclass(frozen=True, kw_only=True)
class SearchSized(Event):
    """The trials at once a stage's search was built for (``algorithm: auto`` picks by
    it), where that came from and what it picked; journalled before its first ask. A
    resumed driver builds the search at the width journalled first, whatever its own
    slots, and journals it again with ``resumed_at``: the trials its slots run at once."""

    kind: ClassVar[str] = "search_sized"
    stage: str
    width: int
    source: str  # "search.parallel", or "64 slots (resources.slots) / 1 rank a trial"
    pick: str  # the search it built (auto's pick at that width: AutoChoice.label())
    why: str = ""  # why auto picked it (AutoChoice.reason)
    resumed_at: int | None = _optional()  # a resumed driver's trials at once


KINDS: dict[str, type[Event]] = {
    cls.kind: cls for cls in (
        WorkflowStarted, WorkflowResumed, WorkflowFinished, WorkflowInterrupted,
        StageStarted, StageFinished, StageReopened, TrialStarted, TrialAttemptFailed, TrialFinished,
        TrialInterrupted, CheckpointRemoved, ThresholdReached, SearchLogged, StagePlanned,
        StageReplanned, PlanState, SearchSized,
    )
}


class UnknownEvent(ValueError):
    """A journal line whose kind this version of nestor does not know."""


def parse(record: dict[str, Any]) -> Event:
    """One journal record (a line's JSON object) as its typed event.

    Readers match on the class (``isinstance(e, TrialFinished)``), never on the
    kind's name: the names live here only. Fields a newer writer added and this
    class lacks are dropped; fields an older writer left out take their defaults
    (every field added after a release is optional)."""
    try:
        cls = KINDS[record["event"]]
    except KeyError:
        raise UnknownEvent(
            f"journal event must be one of {', '.join(KINDS)}, but got {record.get('event')!r}"
        ) from None
    known = _FIELD_NAMES[cls]
    _check_names(record)
    return cls(**{k: v for k, v in record.items() if k in known})


def _check_names(record: dict[str, Any]) -> None:
    """The stage and trial ids an event read back names, checked before any reader
    joins them into a path (a run directory is data: ids with ``/`` or ``..`` mean it
    was altered; see :mod:`orchestrator.journal.safe`)."""
    stage = record.get("stage")
    if stage is not None:
        check_id(stage, "stage name")
    trial = record.get("trial")
    if isinstance(trial, dict):
        check_id(str(trial.get("id")), "trial id")
        if trial.get("continue_from") is not None:
            check_id(str(trial["continue_from"]), "trial id")
    elif trial is not None:
        check_id(trial, "trial id")


def kinds_of(*classes: type[Event]) -> frozenset[str]:
    """The kind names of these classes: for :func:`journal.iter_events`'s filter."""
    return frozenset(cls.kind for cls in classes)


_FIELD_NAMES: dict[type[Event], frozenset[str]] = {
    cls: frozenset(f.name for f in dataclasses.fields(cls)) for cls in KINDS.values()
}


def select(records: Iterable[dict[str, Any]], *classes: type[Event]) -> Iterator[Event]:
    """The records of these classes, parsed, in order; the others are skipped unparsed
    (a reader that wants two kinds from a million-event journal parses only those).

    >>> [type(e).__name__ for e in select([{"event": "workflow_finished"}], WorkflowFinished)]
    ['WorkflowFinished']
    """
    names = kinds_of(*classes)
    for record in records:
        if record.get("event") in names:
            yield parse(record)
