"""Run one stage's trials, whatever its kind: ask, launch attempts, tell the results.

The workflow's loop keeps every slot busy: whenever a trial ends it tells the
searcher and asks again, so the asynchronous (steady-state) schedule never
waits for a straggler, while the generational schedule waits because its
searcher hands out nothing until the generation is complete. Attempts run on
a :class:`~orchestrator.backends.Backend` (real Ray gangs, or a simulated
cluster) and come back as events; each trial event is journalled before it
counts, so a killed driver resumes without re-running a finished trial.

Faults: a trial that fails (an exception, a NaN or missing metric, a dead
rank, its timeout) is retried up to ``trial.retries`` times, on a fresh gang
if a rank died or it timed out, from its latest checkpoint; after that the
searcher is told it failed and the sweep goes on.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.backends import Backend, Ended, Event, Launch, Started
from orchestrator.backends.ray.heartbeat import BEAT_EVERY_S
from orchestrator.backends.shape import Shape
from orchestrator.journal.events import (
    CheckpointRemoved,
    SearchLogged,
    StagePlanned,
    StageReplanned,
    ThresholdReached,
    TrialAttemptFailed,
    TrialFinished,
    TrialInterrupted,
    TrialStarted,
)
from orchestrator.journal.journal import Journal, write_atomic
from orchestrator.spec import Workflow

log = logging.getLogger(__name__)

# After a gang fails to start (placement timed out, a worker lost on start-up),
# the stage waits before starting another: 1, 2, 4, ... s, at most a minute, so
# a cluster that cannot place gangs is not hammered with placement groups.
BACKOFF_FIRST_S, BACKOFF_MAX_S = 1.0, 60.0

# Searcher log entries between two snapshots of a searcher's whole state, at
# least: the journal holds every entry, a snapshot only shortens the replay.
SNAPSHOT_EVERY = 500


@dataclass
class Attempt:
    """One run of one trial on one gang, from launch to its Ended event."""

    trial: Any  # search.Trial
    number: int
    key: str
    launched: float  # backend clock
    started: float | None = None  # once its gang runs it (None while the gang starts)
    startup_s: float = 0.0
    # its gang's shape: a re-plan changes only the shape of trials started later
    shape: Shape = field(default_factory=lambda: Shape(1, 1))
    deadline: float | None = None
    progress_due: float | None = None  # when to ask whether it still makes progress
    cancelled: str | None = None  # why the driver killed it (a timeout, no progress)


@dataclass
class TrialRecord:
    """What the stage knows of a trial, for the summary and results."""

    id: str
    config: dict[str, Any]
    generation: int
    deme: int
    parents: list[str]
    status: str = "running"
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


class SkipTrial(Exception):
    """A planned trial cannot run (its input failed); it is recorded as failed."""


class TrialRunner:
    """Runs one stage's trials on the shared gang pool, one step at a time.

    Whatever the stage kind, its trials come from an ask/tell source (a
    searcher, or a fixed plan) and run the same way: journalled, retried,
    timed out, tracked. The workflow steps several runners in one loop, so
    independent stages share the allocation's slots.
    """

    kind = "trials"

    def __init__(
        self,
        workflow: Workflow,
        stage: Any,
        *,
        run_dir: Path,
        backend: Backend,
        journal: Journal,
        searcher: Any,
        objectives: list[Any],
        trainer_spec: Any,
        on_progress: Callable[[TrialRunner], None] | None = None,
        events: list[dict[str, Any]] | None = None,
    ) -> None:
        """``events``: the journal so far (a resumed stage's plan is in it)."""
        from trainers import TrainerRef

        self.workflow = workflow
        self.stage = stage
        self.run_dir = run_dir
        self.backend = backend
        self.journal = journal
        self.on_progress = on_progress
        self.objectives = objectives
        self.searcher = searcher
        self.trainer_spec = trainer_spec
        self.settings: dict[str, Any] = dict(trainer_spec.settings)
        self.trainer = TrainerRef.from_spec(trainer_spec, result_metric=objectives[0].metric)
        declared = workflow.declared_parallel(stage.name)
        self.planner: Any = None  # for parallel: auto, on the slots the backend has
        self.planned_shape: str | None = None  # the plan's first shape ("4x1")
        self.replans: list[dict[str, Any]] = []  # the tail's re-plans: dp, mp, left, reason
        # A command trainer's gang is as wide as declared too: its rank 0 runs the
        # command, which starts its own ranks on the slots the others hold.
        if declared.is_auto:
            from orchestrator.planning import StagePlanner

            self.planner = StagePlanner(workflow, stage.name, backend.slots)
            planned = [e for e in events or () if e.get("stage") == stage.name
                       and e["event"] == "stage_planned"]
            if planned and planned[-1].get("profile"):
                from orchestrator.planning import Profile

                self.planner.use_profile(Profile.from_record(planned[-1]["profile"]))
            self._journalled_plan = bool(planned)  # journalled: neither profile nor plan again
            self._choose()
        else:
            self.shape = self._gang_shape(int(declared.data), int(declared.model))
        self.state_path = run_dir / "searcher" / f"{stage.name}.json"
        self.records: dict[str, TrialRecord] = {}
        self.running: dict[str, Attempt] = {}  # by trial id
        self._busy_ranks = 0  # the running attempts' ranks, kept as they come and go
        # No running attempt has a deadline before this (None: none has one). Lowered as
        # attempts start, made exact by each scan; one that ends only leaves it early.
        self._due: float | None = None
        self.keys: dict[str, str] = {}  # attempt key -> trial id
        self.queue: list[tuple[Any, int]] = []  # (trial, attempt number) to start
        self.started_at = time.time()
        self.threshold_at: float | None = None
        self.exhausted = False  # the source has nothing more to give
        self.stopper: Any = None
        self.preparing = False  # waiting for its preparing task before any trial
        self._start_failures = 0  # gangs that failed to start in a row
        self._hold_until: float | None = None  # no new attempt before (backoff)
        self._logged = 0  # searcher log entries journalled so far
        self._snapshot_at = 0  # ... and covered by the snapshot in state_path

    # -- resume -----------------------------------------------------------------------

    def restore(self, events: list[dict[str, Any]]) -> None:
        """Rebuild from the searcher's snapshot and the journal of this stage."""
        mine = [e for e in events if e.get("stage") == self.stage.name]
        self._restore_plan(mine)
        self._restore_searcher(mine)
        for event in mine:
            kind = event["event"]
            if kind == "trial_started":
                record = self._record(event["trial"])
                record.attempts = max(record.attempts, event["attempt"])
                record.shape = event.get("shape") or record.shape
            elif kind in ("trial_finished", "trial_attempt_failed"):
                record = self._record(event["trial"])
                record.attempts = max(record.attempts, event.get("attempt", 0))
                record.slot_seconds += event.get("slot_seconds", 0.0)
                record.startup_slot_seconds += event.get("startup_slot_seconds", 0.0)
                if kind == "trial_finished":
                    record.status = event["status"]
                    record.value = event.get("value")
                    record.metrics = event.get("metrics", {})
                    record.reason = event.get("reason")
                    record.checkpoint = event.get("checkpoint")
                    record.history = event.get("history", [])
                    record.finished_at = event["time"]
            elif kind == "threshold_reached":
                self.threshold_at = event["time"]
            elif kind == "checkpoint_removed":
                self._records_removal(event["trial"])
            elif kind == "stage_started":
                self.started_at = event["time"]
        # A result journalled just before the kill may be missing from the state file.
        pending = {t.id: t for t in self.searcher.pending}
        for record in self.records.values():
            if record.status != "running" and record.id in pending:
                self._tell(pending.pop(record.id), record)
        # Trials that were running when the driver died: a result their rank 0 wrote
        # meanwhile is adopted; the others run again, as new attempts.
        ended = {(e["trial"]["id"], e.get("attempt")) for e in mine
                 if e["event"] in ("trial_finished", "trial_attempt_failed")}
        begun = {(e["trial"]["id"], e.get("attempt")) for e in mine
                 if e["event"] == "trial_started"}
        for trial in list(self.searcher.pending):
            if self._adopt(trial, ended, begun):
                continue
            record = self.records.get(trial.id)
            self.queue.append((trial, (record.attempts if record else 0) + 1))

    def _gang_shape(self, dp: int, mp: int) -> Shape:
        """The gang a dp x mp trial of this stage runs on (the planner's shapes, and the
        spec's, say nothing of the backend)."""
        return Shape(dp, mp, backend=self.workflow.backend_of(self.stage.name))

    def _choose(self) -> None:
        chosen = self.planner.first()
        self.shape = self._gang_shape(chosen.shape.dp, chosen.shape.mp)
        self._plan = chosen

    def _restore_plan(self, mine: list[dict[str, Any]]) -> None:
        """A planned stage keeps the shape journalled for it (a resumed driver may sit
        on other slots, or find another profile cached); a new one journals its plan."""
        if self.planner is None:
            return
        from orchestrator.planning import shape_of

        shaped = [e for e in mine if e["event"] in ("stage_planned", "stage_replanned")]
        self._note_plans(shaped)
        if shaped:
            shape = shape_of(shaped[-1])
            self.shape = self._gang_shape(shape.dp, shape.mp)
            return
        profile = self.planner.profile
        self.journal.record(StagePlanned(
            stage=self.stage.name, dp=self.shape.data, mp=self.shape.model,
            slots=self.planner.slots, plan=self._plan.to_record(),
            measured=self.planner.measured,
            profile=None if profile is None else profile.to_record()))
        log.info("stage %s: %s", self.stage.name, self._plan.why())
        self.planned_shape = str(self.shape)

    def _note_plans(self, shaped: list[dict[str, Any]]) -> None:
        """The journalled plan's first shape and the tail's re-plans since (results say
        which trials a re-plan widened)."""
        if shaped:
            self.planned_shape = f"{shaped[0]['dp']}x{shaped[0]['mp']}"
        self.replans = [{k: e[k] for k in ("dp", "mp", "left", "reason")}
                        for e in shaped if e["event"] == "stage_replanned"]

    def _replan_tail(self) -> None:
        """Fewer trials left than fit at once: the next ones may get wider."""
        from orchestrator.planning import Shape as PlanShape

        left = self.searcher.planned - self.searcher.n_asked
        current = PlanShape(self.shape.data, self.shape.model)
        # Running trials may be of an earlier shape: count the slots they hold.
        running = self.busy_ranks // current.ranks
        decision = self.planner.tail(left=left, running=running, current=current)
        if decision is None or decision.shape == current:
            return
        self.shape = self._gang_shape(decision.shape.dp, decision.shape.mp)
        self.journal.record(StageReplanned(
            stage=self.stage.name, dp=self.shape.data, mp=self.shape.model, left=left,
            running=len(self.running), reason=decision.reason))
        log.info("stage %s: %d trial(s) left, now %s: %s", self.stage.name, left,
                 decision.shape, decision.reason)
        self.replans.append({"dp": decision.shape.dp, "mp": decision.shape.mp, "left": left,
                             "reason": decision.reason})

    def _result_path(self, trial_id: str, number: int) -> Path:
        return self.run_dir / "attempts" / self.stage.name / trial_id / f"{number}.json"

    def _adopt(self, trial: Any, ended: set[tuple[str, Any]],
               begun: set[tuple[str, Any]]) -> bool:
        """Take over an attempt whose result landed while no driver listened.

        Its rank 0 wrote the result before returning it, so training that
        finished is never run again, however the driver was killed."""
        from trainers import TrialResult

        folder = self._result_path(trial.id, 0).parent
        landed = sorted(int(p.stem) for p in folder.glob("*.json") if p.stem.isdigit()) \
            if folder.is_dir() else []
        unheard = [n for n in landed if (trial.id, n) not in ended]
        if not unheard:
            return False
        number = unheard[-1]
        result = TrialResult.from_dict(json.loads(self._result_path(trial.id, number).read_text()))
        record = self._record(trial.to_dict())
        record.attempts = max(record.attempts, number)
        now = self.backend.now()
        key = f"{self.stage.name}/{trial.id}#{number}"
        wall = float(result.metrics.get("wall_time") or 0.0)
        attempt = Attempt(trial, number, key, launched=now - wall, started=now - wall)
        event = Ended(key, now, result)
        log.info("trial %s: adopting the result of attempt %d, which landed while the"
                 " driver was down", trial.id, number)
        if (trial.id, number) not in begun:  # killed before it journalled the start
            self.journal.record(TrialStarted(
                stage=self.stage.name, trial=trial.to_dict(), attempt=number, gang=None,
                shape=str(self.shape), adopted=True, comm=self.shape.backend))
        self._finish_attempt(attempt, self._outcome(attempt, event), event, adopted=True)
        return True

    def _record(self, trial: dict[str, Any]) -> TrialRecord:
        if trial["id"] not in self.records:
            self.records[trial["id"]] = TrialRecord(
                trial["id"], dict(trial["config"]), trial.get("generation", 0),
                trial.get("deme", 0), list(trial.get("parents", [])),
            )
        return self.records[trial["id"]]

    # -- the loop (the workflow's StageScheduler drives it) ---------------------------

    @property
    def finished(self) -> bool:
        return self.exhausted and not self.running and not self.queue and not self.preparing

    def owns(self, key: str) -> bool:
        return key in self.keys

    def on_event(self, event: Event) -> None:
        """A backend event about one of this stage's attempts."""
        trial_id = self.keys[event.key]
        attempt = self.running[trial_id]
        if isinstance(event, Started):
            attempt.started, attempt.startup_s = event.at, event.startup_s
            if self.stage.trial.timeout:
                attempt.deadline = event.at + self.stage.trial.timeout
            if self.stage.trial.progress_timeout:
                attempt.progress_due = event.at + self.stage.trial.progress_timeout
            for due in (attempt.deadline, attempt.progress_due):
                if due is not None and (self._due is None or due < self._due):
                    self._due = due
            self.journal.record(TrialStarted(
                stage=self.stage.name, trial=attempt.trial.to_dict(), attempt=attempt.number,
                gang=event.gang, shape=str(attempt.shape), startup_s=round(event.startup_s, 3),
                comm=attempt.shape.backend))
        elif isinstance(event, Ended):
            del self.running[trial_id]
            self._busy_ranks -= attempt.shape.ranks
            del self.keys[event.key]
            self._backoff(event, attempt)
            self._finish_attempt(attempt, self._outcome(attempt, event), event)
        if self.on_progress:
            self.on_progress(self)

    def next_deadline(self) -> float | None:
        deadlines = [] if self._due is None else [self._due]
        if self.holding:
            deadlines.append(self._hold_until)  # type: ignore[arg-type]
        return min(deadlines, default=None)

    def check_deadlines(self) -> None:
        """Kill the attempts past their timeout, or silent past their progress
        timeout; their Ended events follow."""
        now = self.backend.now()
        if self._due is None or now < self._due:  # none due: not a look at every trial
            return
        try:
            self._scan_deadlines(now)
        finally:
            self._due = min((d for a in self.running.values() if a.cancelled is None
                             for d in (a.deadline, a.progress_due) if d is not None),
                            default=None)

    def _scan_deadlines(self, now: float) -> None:
        live = [a for a in self.running.values() if a.cancelled is None]
        for attempt in live:
            if attempt.deadline is not None and now >= attempt.deadline:
                self._cancel(attempt, f"timeout after {self.stage.trial.timeout:g} s")
        due = [a for a in live if a.cancelled is None and a.progress_due is not None
               and now >= a.progress_due]
        if not due:
            return
        limit = self.stage.trial.progress_timeout
        ages = self.backend.progress_ages([a.key for a in due])
        for attempt in due:
            age = ages.get(attempt.key)
            last = attempt.started if age is None else max(attempt.started or now, now - age)
            if now - last >= limit:
                self._cancel(attempt, f"no progress for {now - last:.0f} s"
                             f" (trial.progress_timeout {limit:g} s): hung")
            else:
                attempt.progress_due = last + limit

    def _cancel(self, attempt: Attempt, reason: str) -> None:
        attempt.cancelled = reason
        self.backend.cancel(attempt.key)

    def abandon(self, reason: str) -> None:
        """Kill the running gangs, journalled; their trials run again on resume."""
        for attempt in self.running.values():
            self.backend.cancel(attempt.key)
            self.journal.record(TrialInterrupted(
                stage=self.stage.name, trial=attempt.trial.to_dict(), attempt=attempt.number,
                reason=reason))
        self.running.clear()
        self._busy_ranks = 0
        self.keys.clear()
        self._journal_search()

    def start_what_fits(self, limit: int | None = None) -> int:
        """Start queued and newly asked trials while the pool has room, at most
        ``limit`` of them; returns how many started."""
        self.exhausted = False
        started = 0
        if self.holding or self.preparing:
            return 0
        while limit is None or started < limit:
            if not self.queue:
                if self.searcher.done():
                    self.exhausted = True
                    break
                if self.planner is not None:
                    self._replan_tail()
                if not self.backend.fits(self.shape):
                    break
                asked = self.searcher.ask(1)
                if not asked:
                    # A generational barrier while trials run; else nothing is left.
                    self.exhausted = not self.running
                    break
                self._journal_search()
                self.queue.extend((trial, 1) for trial in asked)
            if not self.backend.fits(self.shape):
                break
            trial, number = self.queue.pop(0)
            self._start(trial, number)
            started += 1
        return started

    @property
    def holding(self) -> bool:
        """Backing off after gangs failed to start: nothing new starts for now."""
        return self._hold_until is not None and self.backend.now() < self._hold_until

    def _backoff(self, ended: Ended, attempt: Attempt) -> None:
        if ended.started or attempt.cancelled is not None:
            self._start_failures, self._hold_until = 0, None
            return
        self._start_failures += 1
        delay = min(BACKOFF_MAX_S, BACKOFF_FIRST_S * 2 ** (self._start_failures - 1))
        self._hold_until = ended.at + delay
        log.warning("stage %s: %d gang start(s) failed in a row (%s); waiting %.0f s before"
                    " the next", self.stage.name, self._start_failures, ended.failure, delay)

    @property
    def busy_ranks(self) -> int:
        # Asked for every trial started: a sum over 2,000 running gangs each time
        # was most of the loop's CPU at 32,768 slots.
        return self._busy_ranks

    def request_extras(self, trial: Any) -> dict[str, Any]:
        """Per-trial additions to the request: ``settings`` to merge over the
        stage's, and TrialRequest fields such as ``init_from`` and ``freeze``.
        Raise SkipTrial when the trial cannot run."""
        return {}

    def _start(self, trial: Any, number: int) -> None:
        from trainers import TrialRequest

        record = self._record(trial.to_dict())
        record.attempts = number
        record.shape = str(self.shape)
        try:
            extras = dict(self.request_extras(trial))
        except SkipTrial as exc:
            record.attempts = max(number - 1, 0)
            self._skip(trial, record, str(exc))
            return
        settings = {**self.settings, **extras.pop("settings", {})}
        trial_dir = f"{self.stage.name}/{trial.id}"
        request = TrialRequest(
            trial_id=f"{self.stage.name}-{trial.id}",
            trainer=self.trainer,
            settings=settings,
            config=dict(trial.config),
            data_parallel=self.shape.data,
            model_parallel=self.shape.model,
            backend=self.shape.backend,
            checkpoint_dir=str(self.run_dir / "checkpoints" / trial_dir),
            log_dir=str(self.run_dir / "logs" / trial_dir),
            timeout=self.stage.trial.timeout,
            env=self.stage.trial.env_vars(),
            result_path=str(self._result_path(trial.id, number)),
            **extras,
        )
        hooks: dict[str, Any] = {}
        if self.stopper is not None:

            from orchestrator.backends.ray.pruning import AskToStop, ReportTo

            self.stopper.start.remote(trial.id)  # not waited for: the loop never blocks
            hooks = {"report": ReportTo(self.stopper, trial.id),
                     "should_stop": AskToStop(self.stopper, trial.id)}
        key = f"{self.stage.name}/{trial.id}#{number}"
        attempt = Attempt(trial, number, key, launched=self.backend.now(), shape=self.shape)
        self.running[trial.id] = attempt
        self._busy_ranks += attempt.shape.ranks
        self.keys[key] = trial.id
        # Beats often enough that a healthy trial is never taken for a hung one.
        beat_every_s = min(BEAT_EVERY_S, (self.stage.trial.progress_timeout or 60.0) / 4)
        # The trial runs only once what led to it (its ask, its start) is durable:
        # the backend waits on the gate off the loop, so many launches share an fsync.
        self.backend.launch(Launch(key, self.shape, request, hooks, beat_every_s,
                                   gate=self.journal.gate()))

    def _skip(self, trial: Any, record: TrialRecord, reason: str) -> None:
        record.status, record.reason, record.finished_at = "failed", reason, time.time()
        self.journal.record(TrialFinished(
            stage=self.stage.name, trial=trial.to_dict(), attempt=record.attempts,
            status="failed", value=None, metrics={}, reason=reason, slot_seconds=0.0))
        self._tell(trial, record)

    def _outcome(self, attempt: Attempt, ended: Ended) -> dict[str, Any]:
        """The attempt's result as {status, value, metrics, reason, history}."""
        if attempt.cancelled is not None:
            return {"status": "failed", "reason": attempt.cancelled}
        if ended.result is None:
            return {"status": "failed", "reason": ended.failure or "the gang failed"}
        result = ended.result
        files = {"logs": dict(result.logs), "checkpoint": result.checkpoint}
        if not result.ok:
            return {"status": "failed", "reason": result.reason or "the trainer failed",
                    "metrics": dict(result.metrics), "history": list(result.history), **files}
        values = []
        for objective in self.objectives:
            value = result.metrics.get(objective.metric)
            if value is None:
                return {"status": "failed", "metrics": dict(result.metrics),
                        "reason": f"the trainer reported no {objective.metric!r}"
                        f" (it reported: {', '.join(sorted(result.metrics)) or 'nothing'})"}
            if not isinstance(value, int | float) or not math.isfinite(value):
                return {"status": "failed", "metrics": dict(result.metrics),
                        "reason": f"{objective.metric} is {value!r}, not a finite number"}
            values.append(float(value))
        return {
            # A pruned trial keeps the value it had when stopped: the search learns
            # that the configuration was poor, the results show it was cut short.
            "status": "pruned" if result.stopped_early else "completed",
            "value": values[0] if len(values) == 1 else values,
            "metrics": dict(result.metrics),
            "history": list(result.history),
            **files,
        }

    def _finish_attempt(self, attempt: Attempt, outcome: dict[str, Any],
                        ended: Ended, adopted: bool = False) -> None:
        trial = attempt.trial
        record = self.records[trial.id]
        # Busy slot time is the trial's own, from its ranks starting to its end; the
        # time spent starting a new gang (or failing to) is counted apart.
        if attempt.started is not None:
            slot_seconds = (ended.at - attempt.started) * attempt.shape.ranks
            startup_slot_seconds = attempt.startup_s * attempt.shape.ranks
        else:
            slot_seconds = 0.0
            startup_slot_seconds = (ended.at - attempt.launched) * attempt.shape.ranks
        record.slot_seconds += slot_seconds
        record.startup_slot_seconds += startup_slot_seconds
        logs = dict(outcome.get("logs") or {})  # a command trainer's stdout and stderr
        retry = outcome["status"] == "failed" and attempt.number <= self.stage.trial.retries
        if retry:
            self.journal.record(TrialAttemptFailed(
                stage=self.stage.name, trial=trial.to_dict(), attempt=attempt.number,
                reason=outcome["reason"], slot_seconds=slot_seconds,
                startup_slot_seconds=startup_slot_seconds, logs=logs, adopted=adopted))
            log.warning("trial %s attempt %d failed (%s); retrying", trial.id, attempt.number,
                        outcome["reason"])
            self.queue.insert(0, (trial, attempt.number + 1))
            return
        if self.stopper is not None:
            first = outcome.get("value")
            first = first[0] if isinstance(first, list) else first
            self.stopper.finish.remote(trial.id, first, outcome["status"] == "pruned")
        record.status = outcome["status"]
        record.value = outcome.get("value")
        record.metrics = outcome.get("metrics", {})
        record.reason = outcome.get("reason")
        record.checkpoint = outcome.get("checkpoint")
        record.history = list(outcome.get("history", []))
        record.finished_at = time.time()
        self.journal.record(TrialFinished(
            stage=self.stage.name, trial=trial.to_dict(), attempt=attempt.number,
            status=record.status, value=record.value, metrics=record.metrics,
            reason=record.reason, slot_seconds=slot_seconds,
            startup_slot_seconds=startup_slot_seconds, checkpoint=record.checkpoint,
            history=record.history, logs=logs, adopted=adopted))
        self._tell(trial, record)

    def _tell(self, trial: Any, record: TrialRecord) -> None:
        from search import Failure

        # Only a search under a cost budget is told costs (a train stage's Plan is not).
        cost = self._cost(trial, record)
        paid = {} if cost is None else {"cost": cost}
        if record.status in ("completed", "pruned"):
            self.searcher.tell(trial.id, record.value, **paid)
            if (record.status == "completed" and self.threshold_at is None
                    and self._reached(record.value)):
                self.threshold_at = time.time()
                self.journal.record(ThresholdReached(stage=self.stage.name, trial=trial.id))
        else:
            self.searcher.tell(trial.id, Failure(record.reason or "failed"), **paid)
        self._journal_search()
        self._prune_checkpoints()

    def _cost(self, trial: Any, record: TrialRecord) -> float | None:
        """What the trial cost in the unit of the search's cost budget (None without
        one): its slot-seconds (startup included: a budget in slot-hours pays for
        starting gangs too), or the epochs it trained (the trainer's own setting
        for a trial trained in full; a continued trial's span the search knows)."""
        budget = getattr(self.searcher, "cost_budget", None)
        if budget is None:
            return None
        if budget.unit == "slot_seconds":
            return record.slot_seconds + record.startup_slot_seconds
        fidelity = getattr(self.stage.search, "fidelity", None) or "epochs"
        length = self.settings.get(fidelity)
        if length is None and self.trainer_spec.name:
            from trainers.catalog import TRAINERS

            known = TRAINERS.get(self.trainer_spec.name)
            if known is not None and fidelity in known.settings:
                length = known.settings[fidelity].default
        return float(length) if isinstance(length, int | float) else None

    # -- checkpoints ------------------------------------------------------------------

    def _prune_checkpoints(self) -> None:
        """Under ``keep_checkpoints: N``, remove the checkpoints no one needs: not
        the N best trials', not any a later trial of the search may still continue
        from (PBT's donors, successive halving's promotable), not a pending trial's
        source. PBT keeps every interval otherwise: population x intervals models."""
        keep = getattr(self.stage, "keep_checkpoints", None)
        if keep is None:
            return
        needed = set(self.searcher.continuable())
        needed |= {o.trial.id for o in self.searcher.ranked()[:keep]}
        best = self.searcher.best()
        if best is not None:
            needed.add(best.trial.id)
        for trial in self.searcher.pending:  # running, queued or retried, and their sources
            needed |= {trial.id, trial.continue_from}
        for record in self.records.values():
            if record.checkpoint and record.status != "running" and record.id not in needed:
                self.journal.record(CheckpointRemoved(
                    stage=self.stage.name, trial=record.id, path=record.checkpoint))
                self.journal.sync()  # the files go only once the journal says so for good
                self._records_removal(record.id)

    def _records_removal(self, trial_id: str) -> None:
        """Forget a trial's checkpoint and delete its folder (again, on resume: the
        driver may have died between the journal and the files). Only nestor's own
        folder goes: a command trainer's checkpoint elsewhere is the user's."""
        import shutil

        record = self.records.get(trial_id)
        if record is not None:
            record.checkpoint = None
        shutil.rmtree(self.run_dir / "checkpoints" / self.stage.name / trial_id,
                      ignore_errors=True)

    def _reached(self, value: Any) -> bool:
        objective = self.objectives[0]
        if objective.threshold is None or value is None:
            return False
        first = value[0] if isinstance(value, list) else value
        return objective.reached(first)

    def _journal_search(self) -> None:
        """Journal what the searcher logged since last time; snapshot its whole state
        every SNAPSHOT_EVERY entries, so that resume replays a short tail."""
        log_since = getattr(self.searcher, "log_since", None)
        if log_since is None:  # a fixed plan: its whole state is a few trials
            write_atomic(self.state_path, json.dumps(self.searcher.state()))
            return
        entries = log_since(self._logged)
        if not entries:
            return
        self.journal.record(SearchLogged(stage=self.stage.name, start=self._logged,
                                         entries=entries))
        self._logged += len(entries)
        # A snapshot serialises the whole log: take them further apart as it grows
        # (every SNAPSHOT_EVERY entries, or once the log has doubled), so their cost
        # stays linear in the run and a resume replays at most about half of it.
        if self._logged - self._snapshot_at >= max(SNAPSHOT_EVERY, self._snapshot_at):
            self.journal.sync()  # never a snapshot ahead of the journal's durable events
            write_atomic(self.state_path, json.dumps({"covers": self._logged,
                                                      "state": self.searcher.state()}))
            self._snapshot_at = self._logged

    def _restore_searcher(self, mine: list[dict[str, Any]]) -> None:
        """The searcher as the last snapshot and the journalled entries after it left it."""
        saved = json.loads(self.state_path.read_text()) if self.state_path.exists() else None
        if not hasattr(self.searcher, "log_since"):
            if saved is not None:
                self.searcher.restore(saved)
            return
        if saved is None:
            state, covers = self.searcher.state(), 0
        elif "covers" in saved:
            state, covers = saved["state"], saved["covers"]
        else:  # a run directory from before the journal held the searcher's log
            state, covers = saved, len(saved.get("events", []))
        log_entries = list(state.get("events", []))[:covers]
        for event in mine:
            if event["event"] != "search":
                continue
            for index, entry in enumerate(event["entries"], start=event["start"]):
                if index == len(log_entries):
                    log_entries.append(entry)
        if log_entries:
            self.searcher.restore({**state, "events": log_entries})
        self._logged = len(log_entries)
        self._snapshot_at = covers

    # -- reporting --------------------------------------------------------------------

    def preparing_task(self) -> tuple[Any, ...] | None:
        """``(fn, *args)`` to run off the loop before the stage's first trial (while
        ``preparing``), whose TaskDone event ``prepared`` then gets; None: none.

        A planned stage with no profile of its trainer on this kind of machine
        measures one first, in a Ray task on the allocation (cached there, and
        journalled with the plan, so a resumed driver does not measure again)."""
        if (self.planner is None or self.planner.measured or self._journalled_plan
                or not self.backend.measurable):
            return None
        self.preparing = True
        return self.planner.profile_job()

    def prepared(self, done: Any) -> None:
        """The preparing task is done; the stage may plan its trials now."""
        self.preparing = False
        if done.error is not None:
            log.warning("stage %s: profiling its trainer failed (%s); planning from the"
                        " unmeasured prior", self.stage.name, done.error)
            return
        from orchestrator.planning import Profile

        self.planner.use_profile(Profile.from_record(done.value))
        self._choose()

    def finishing_task(self) -> tuple[Any, ...] | None:
        """``(fn, *args)`` to run off the loop once the trials are done, whose
        TaskDone event ``finalize`` then gets; None when the stage needs none."""
        return None

    def finalize(self, done: Any = None) -> dict[str, Any]:
        """The stage's summary once its trials (and its finishing task) are done;
        subclasses add their results."""
        return self.summary()

    def _plan_summary(self) -> dict[str, Any]:
        """A planned stage's first shape and its tail's re-plans, for results."""
        if self.planned_shape is None:
            return {}
        return {"planned_shape": self.planned_shape, "replans": list(self.replans),
                "lr_rule": self.settings.get("lr_scaling")}

    def _batch_of(self, record: TrialRecord) -> dict[str, Any]:
        """The global batch and learning rate a planned stage's trial trained with: they
        follow its data-parallel width (``batch:``, ``lr_rule``), which a re-plan changes."""
        if self.planned_shape is None or record.shape is None or not self.trainer_spec.name:
            return {}
        from orchestrator.planning import trial_batch

        dp = int(record.shape.split("x")[0])
        try:
            batch, lr = trial_batch(self.trainer_spec.name, self.settings, record.config, dp)
        except (ValueError, KeyError):  # a trainer without these options
            return {}
        return {"global_batch": batch, "lr": lr}

    def summary(self) -> dict[str, Any]:
        best = self.searcher.best()
        best_record = self.records.get(best.trial.id) if best else None
        finished = [r for r in self.records.values() if r.status != "running"]
        return {
            "name": self.stage.name,
            "kind": self.stage.kind,
            "objective": {"metric": self.objectives[0].metric, "mode": self.objectives[0].mode},
            "stop_reason": self.searcher.stop_reason,
            "best": None if best_record is None else {
                "id": best_record.id,
                "config": best_record.config,
                "value": best_record.value,
                "test_value": best_record.metrics.get("test_accuracy"),
                "checkpoint": best_record.checkpoint,
            },
            "trials": [
                {
                    "id": r.id, "status": r.status, "value": r.value, "config": r.config,
                    "checkpoint": r.checkpoint,
                    "generation": r.generation, "deme": r.deme, "parents": r.parents,
                    "attempts": r.attempts, "slot_seconds": round(r.slot_seconds, 3),
                    "startup_slot_seconds": round(r.startup_slot_seconds, 3),
                    "reason": r.reason, "metrics": r.metrics, "shape": r.shape,
                    **self._batch_of(r),
                }
                for r in self.records.values()
            ],
            **self._plan_summary(),
            "n_trials": len(self.records),
            "n_runs": sum(r.attempts for r in self.records.values()),
            "n_failed": sum(1 for r in finished if r.status == "failed"),
            "n_pruned": sum(1 for r in finished if r.status == "pruned"),
            "slot_seconds": round(sum(r.slot_seconds for r in self.records.values()), 3),
            "startup_slot_seconds": round(sum(r.startup_slot_seconds
                                              for r in self.records.values()), 3),
            "wall_time_s": round(time.time() - self.started_at, 3),
            "time_to_threshold_s": None if self.threshold_at is None
            else round(self.threshold_at - self.started_at, 3),
        }
