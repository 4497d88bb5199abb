"""A stage's ledger of trials: what it knows of each (its attempts, fate, value,
slot time, checkpoint), kept as trials end and rebuilt from the journal on resume,
and the per-trial rows and totals of the stage's summary."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from nestor.orchestrator.journal.events import (
    Event,
    TrialAttemptFailed,
    TrialFinished,
    TrialStarted,
)
from nestor.orchestrator.journal.status import TrialStatus


@dataclass
class TrialRecord:
    """What the stage knows of a trial, for the summary and results."""

    id: str
    config: dict[str, Any]
    generation: int
    deme: int
    parents: list[str]
    status: str = TrialStatus.RUNNING
    value: float | list[float] | None = None
    metrics: dict[str, Any] = field(default_factory=dict)
    reason: str | None = None
    attempts: int = 0
    slot_seconds: float = 0.0  # the trial's own ranks' busy time
    startup_slot_seconds: float = 0.0  # slot time spent starting gangs for it
    finished_at: float | None = None
    checkpoint: str | None = None
    history: list[dict[str, Any]] = field(default_factory=list)  # per-epoch metrics
    shape: str | None = None  # of its last attempt ("2x1"): a re-plan widens later trials


class TrialRecords(dict[str, TrialRecord]):
    """The stage's trials by id (a dict: kinds look their trials up by id).

    >>> records = TrialRecords()
    >>> records.of({"id": "t1", "config": {"x": 1}}).status
    'running'
    """

    def of(self, trial: dict[str, Any]) -> TrialRecord:
        """The record of ``trial`` (``search.Trial.to_dict()``), made on first sight."""
        if trial["id"] not in self:
            self[trial["id"]] = TrialRecord(
                trial["id"], dict(trial["config"]), trial.get("generation", 0),
                trial.get("deme", 0), list(trial.get("parents", [])),
            )
        return self[trial["id"]]

    def apply(self, event: Event) -> None:
        """What a journalled trial event says of its trial (resume replays them)."""
        if isinstance(event, TrialStarted):
            record = self.of(event.trial)
            record.attempts = max(record.attempts, event.attempt)
            record.shape = event.shape or record.shape
        elif isinstance(event, TrialFinished | TrialAttemptFailed):
            record = self.of(event.trial)
            record.attempts = max(record.attempts, event.attempt)
            record.slot_seconds += event.slot_seconds
            record.startup_slot_seconds += event.startup_slot_seconds
            if isinstance(event, TrialFinished):
                record.status = event.status
                record.value = event.value
                record.metrics = event.metrics
                record.reason = event.reason
                record.checkpoint = event.checkpoint
                record.history = event.history
                record.finished_at = event.time

    def rows(self, extra: Callable[[TrialRecord], dict[str, Any]]) -> list[dict[str, Any]]:
        """Every trial as a row of the summary, with ``extra(record)`` added."""
        return [
            {
                "id": r.id, "status": r.status, "value": r.value, "config": r.config,
                "checkpoint": r.checkpoint,
                "generation": r.generation, "deme": r.deme, "parents": r.parents,
                "attempts": r.attempts, "slot_seconds": round(r.slot_seconds, 3),
                "startup_slot_seconds": round(r.startup_slot_seconds, 3),
                "reason": r.reason, "metrics": r.metrics, "shape": r.shape,
                **extra(r),
            }
            for r in self.values()
        ]

    def totals(self) -> dict[str, Any]:
        """The summary's counts and slot time over every trial."""
        finished = [r for r in self.values() if r.status != TrialStatus.RUNNING]
        stopped = sum(1 for r in finished if r.status == TrialStatus.STOPPED)  # at a wall budget
        return {
            "n_trials": len(self),
            "n_runs": sum(r.attempts for r in self.values()),
            "n_failed": sum(1 for r in finished if r.status == TrialStatus.FAILED),
            "n_pruned": sum(1 for r in finished if r.status == TrialStatus.PRUNED),
            "slot_seconds": round(sum(r.slot_seconds for r in self.values()), 3),
            "startup_slot_seconds": round(sum(r.startup_slot_seconds for r in self.values()), 3),
            **({"n_stopped": stopped} if stopped else {}),
        }
