"""Run one stage's trials, whatever its kind: ask, launch attempts, tell the results.

The workflow's loop keeps every slot busy: whenever a trial ends it tells the
searcher and asks again, so the asynchronous (steady-state) schedule never
waits for a straggler, while the generational schedule waits because its
searcher hands out nothing until the generation is complete. Attempts run on
a :class:`~orchestrator.backends.Backend` (real Ray gangs, or a simulated
cluster) and come back as events; each trial event is journalled before it
counts, so a killed driver resumes without re-running a finished trial.

:class:`TrialRunner` composes the parts that each own one concern, each in its
own module and testable alone:

- :class:`~orchestrator.engine.attempts.AttemptPolicy`: retries, backoff after
  gangs fail to start, deadlines (``trial.timeout``, ``trial.progress_timeout``);
- :class:`~orchestrator.engine.search_log.SearchLog`: the searcher's asks and
  tells journalled, its snapshots, its restore (a fixed plan's state too);
- :class:`~orchestrator.engine.checkpoints.CheckpointKeeper`: ``keep_checkpoints``;
- :class:`~orchestrator.engine.adoption.ResultFiles`: results that landed while no
  driver listened, adopted on resume;
- :class:`~orchestrator.engine.shaping.StageShape`: the trials' gang shape, planned
  for ``parallel: auto`` and journalled;
- :func:`~orchestrator.engine.outcome.outcome`: what an attempt's end means;
- :class:`~orchestrator.engine.wall.WallBudget`: a stage's wall-clock limit
  (``search.budget: {wall: 2h}``): no trial starts that could not finish by it,
  and at it the running trials are stopped and the stage ends.

A kind (``orchestrator.engine.kinds``) supplies its trials (a searcher, or a
fixed plan) and a :class:`KindTrials` that the runner holds: per-trial request
extras, a task before the first trial and after the last, its own summary.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from nestor.orchestrator.backends.interface import (
    Backend,
    EarlyStopping,
    Ended,
    Event,
    Launch,
    Started,
)
from nestor.orchestrator.backends.shape import Shape
from nestor.orchestrator.engine.adoption import ResultFiles, attempts_heard
from nestor.orchestrator.engine.attempts import Attempt, AttemptPolicy
from nestor.orchestrator.engine.checkpoints import CheckpointKeeper
from nestor.orchestrator.engine.history import JournalSoFar, paused_gc
from nestor.orchestrator.engine.outcome import (
    TrialDiskFull,
    disk_full,
    journalled_logs,
    slot_time,
    unmet_need,
)
from nestor.orchestrator.engine.outcome import outcome as attempt_outcome
from nestor.orchestrator.engine.records import TrialRecord, TrialRecords
from nestor.orchestrator.engine.search_log import SearchLog
from nestor.orchestrator.engine.shaping import StageShape
from nestor.orchestrator.engine.shipped import shipped_code
from nestor.orchestrator.engine.source import TrialSource
from nestor.orchestrator.engine.tidy import ARTIFACTS, CHECKPOINTS, remove_empty_trial_folders
from nestor.orchestrator.engine.wall import WallBudget
from nestor.orchestrator.journal.events import (
    CheckpointRemoved,
    StagePlanned,
    StageStarted,
    ThresholdReached,
    TrialAttemptFailed,
    TrialFinished,
    TrialInterrupted,
    TrialStarted,
)
from nestor.orchestrator.journal.events import Event as JournalEvent
from nestor.orchestrator.journal.journal import Journal
from nestor.orchestrator.journal.safe import check_id
from nestor.orchestrator.journal.status import SCORED, TrialStatus
from nestor.orchestrator.spec import EnsembleStage, HpoStage, TrainStage, TransferStage, Workflow
from nestor.orchestrator.spec import Trainer as TrainerSpec

if TYPE_CHECKING:
    from nestor.search import Objective

log = logging.getLogger(__name__)

NOT_RETRIED = "not retried: a rerun would fail the same way (trial.retry_on: any retries it)"

__all__ = ["Attempt", "KindTrials", "SkipTrial", "TrialRecord", "TrialRunner"]

# The stage a runner runs: any kind's model in the spec; a kind's own runner knows
# which (``TrialRunner[TrainStage]``) and reads its own fields.
AnyStage = HpoStage | EnsembleStage | TransferStage | TrainStage
StageT = TypeVar("StageT", bound=AnyStage)


class SkipTrial(Exception):
    """A planned trial cannot run (its input failed); it is recorded as failed."""


def stage_events(events: JournalSoFar | list[dict[str, Any]] | None, stage: str,
                 *classes: type[JournalEvent]) -> list[JournalEvent]:
    """This stage's journal events of these classes (all it knows, by default), typed."""
    return JournalSoFar.of(events).of_stage(stage, *classes)


class KindTrials:
    """What a stage's kind adds to the trials its :class:`TrialRunner` runs; the
    runner holds one and asks it, passing itself (its stage, records, searcher).
    The defaults add nothing: an hpo stage's trials need little more."""

    def request_extras(self, runner: TrialRunner[Any], trial: Any) -> dict[str, Any]:
        """Per-trial additions to the request: ``settings`` to merge over the
        stage's, and TrialRequest fields such as ``init_from`` and ``freeze``.
        Raise SkipTrial when the trial cannot run."""
        return {}

    def restored(self, runner: TrialRunner[Any], mine: list[JournalEvent]) -> None:
        """The searcher and the trial records are restored from ``mine`` (none: a new
        stage), before any trial is queued: a reopened plan's failed trials are asked
        again (``nestor resume --retry``: :mod:`orchestrator.engine.reopen`)."""
        from nestor.orchestrator.engine.reopen import retry_plan

        retry_plan(runner, mine)

    def restoring(self, runner: TrialRunner[Any], mine: list[JournalEvent]) -> None:
        """The runner is about to restore its searcher from ``mine`` (this stage's
        events; none for a new stage), its trials' shape planned: the last moment to
        change the searcher before its first ask (an hpo stage's is built for the
        trials that shape runs at once)."""

    def preparing_task(self, runner: TrialRunner[Any]) -> tuple[Any, ...] | None:
        """``(fn, *args)`` to run off the loop before the stage's first trial, whose
        TaskDone event ``prepared`` then gets; None: none (a planned stage measures
        its trainer first: :class:`StageShape`)."""
        return runner.shaping.preparing_task()

    def prepared(self, runner: TrialRunner[Any], done: Any) -> None:
        """The preparing task is done; the stage may plan its trials now."""
        runner.shaping.prepared(done)

    def finishing_task(self, runner: TrialRunner[Any]) -> tuple[Any, ...] | None:
        """``(fn, *args)`` to run off the loop once the trials are done, whose
        TaskDone event ``finalize`` then gets; None when the stage needs none."""
        return None

    def finalize(self, runner: TrialRunner[Any], done: Any) -> dict[str, Any]:
        """The stage's summary once its trials (and its finishing task) are done,
        with the kind's own results added."""
        return runner.summary()


class TrialRunner(Generic[StageT]):
    """Runs one stage's trials on the shared gang pool, one step at a time.

    Whatever the stage kind, its trials come from an ask/tell source (a
    searcher, or a fixed plan) and run the same way: journalled, retried,
    timed out, tracked. The workflow steps several runners in one loop, so
    independent stages share the allocation's slots. What the kind adds is
    ``part``, a :class:`KindTrials`.
    """

    kind = "trials"

    def __init__(
        self,
        workflow: Workflow,
        stage: StageT,
        *,
        run_dir: Path,
        backend: Backend,
        journal: Journal,
        searcher: TrialSource | None,
        objectives: list[Objective],
        trainer_spec: TrainerSpec,
        part: KindTrials | None = None,
        on_progress: Callable[[TrialRunner[Any]], None] | None = None,
        events: JournalSoFar | list[dict[str, Any]] | None = None,
    ) -> None:
        """``searcher``: where its trials come from, a search or a fixed plan (None: the
        kind's part builds it before the first ask, as an hpo stage's does once the
        trials' shape is known); ``part``: what the stage's kind adds (nothing by
        default); ``events``: the journal so far (a resumed stage's plan is in it)."""
        from nestor.trainers import TrainerRef

        self.workflow = workflow
        self.stage = stage
        self.part = part or KindTrials()
        self.run_dir = run_dir
        self._run_dir_text = str(run_dir)  # each launch's paths are joined as text
        self.backend = backend
        self.journal = journal
        self.on_progress = on_progress
        self.objectives = objectives
        self._searcher = searcher
        self.trainer_spec = trainer_spec
        self.settings: dict[str, Any] = dict(trainer_spec.settings)
        self.trainer = TrainerRef.from_spec(trainer_spec, result_metric=objectives[0].metric)
        self.broken: str | None = None  # why the stage cannot go on
        try:  # a function from a script's __main__ or a notebook: shipped by value
            code = shipped_code(run_dir, self.trainer.function)
        except RuntimeError as exc:
            self.broken = f"stage {stage.name!r}: {exc}"
        else:
            if code is not None:
                self.trainer = dataclasses.replace(self.trainer, code=code)
        planned: Any = stage_events(events, stage.name, StagePlanned)
        self.shaping = StageShape(workflow, stage, backend, journal, planned)
        self.policy = AttemptPolicy(stage.name, stage.trial, backend)
        self.search_log = SearchLog(stage.name, searcher, journal,
                                    run_dir / "searcher" / f"{stage.name}.json")
        self.checkpoints = CheckpointKeeper(stage.name, getattr(stage, "keep_checkpoints", None),
                                            run_dir, journal)
        self.results = ResultFiles(run_dir, stage.name)
        self.records = TrialRecords()
        self.running: dict[str, Attempt] = {}  # by trial id
        self._busy_ranks = 0  # the running attempts' ranks, kept as they come and go
        self.keys: dict[str, str] = {}  # attempt key -> trial id
        self.queue: list[tuple[Any, int]] = []  # (trial, attempt number) to start
        self.started_at = time.time()
        self.threshold_at: float | None = None
        self.exhausted = False  # the source has nothing more to give
        self.stopper: EarlyStopping | None = None  # the backend's, if the stage sets one
        self.preparing = False  # waiting for its preparing task before any trial
        self.wall: WallBudget | None = None  # the stage's wall budget (set on restore)
        self.wall_stop: str | None = None  # why the wall budget ended the stage
        # What the stage needs of a function or command trainer (a built-in gives it
        # all), checked as each trial completes; a trial that breaks it fails the run.
        self.needs = [] if trainer_spec.name is not None else stage.needs(workflow)

    @property
    def searcher(self) -> TrialSource:
        """Where the stage's trials come from: a searcher, or a fixed plan."""
        if self._searcher is None:
            raise RuntimeError(f"stage {self.stage.name!r}: its trials' source is not built"
                               " yet (its kind builds it before the first ask)")
        return self._searcher

    @searcher.setter
    def searcher(self, searcher: TrialSource) -> None:
        """A kind may plan its trials only once its preparing task is done (a greedy
        ensemble's members): its search log then journals, and restores, that plan,
        not the one the runner was built with."""
        self._searcher = searcher
        self.search_log.follow(searcher)

    @property
    def has_searcher(self) -> bool:
        """Whether the source of its trials is built (an hpo stage's is, once the shape
        of its trials is known)."""
        return self._searcher is not None

    @property
    def shape(self) -> Shape:
        """The gang the stage's next trial runs on."""
        return self.shaping.shape

    # -- resume -----------------------------------------------------------------------

    @paused_gc()  # what is rebuilt lives on: the collector's passes only cost time
    def restore(self, events: JournalSoFar | list[dict[str, Any]]) -> None:
        """Rebuild from the searcher's snapshot and the journal of this stage."""
        mine = stage_events(events, self.stage.name)
        self.wall = WallBudget.of(self.stage, mine, self.backend.now())
        self.shaping.restore(mine)
        self.part.restoring(self, mine)
        self.search_log.restore(mine)
        for event in mine:
            self.records.apply(event)
            if isinstance(event, ThresholdReached):
                self.threshold_at = event.time
            elif isinstance(event, CheckpointRemoved):
                self.checkpoints.removed(event.trial, self.records)
            elif isinstance(event, StageStarted):
                self.started_at = event.time
        self.part.restored(self, mine)
        # A result journalled just before the kill may be missing from the state file.
        pending = {t.id: t for t in self.searcher.pending}
        for record in self.records.values():
            if record.status != TrialStatus.RUNNING and record.id in pending:
                self._tell(pending.pop(record.id), record)
        # Trials that were running when the driver died: a result their rank 0 wrote
        # meanwhile is adopted; the others run again, as new attempts.
        ended, begun = attempts_heard(mine)
        for trial in list(self.searcher.pending):
            if self._adopt(trial, ended, begun):
                continue
            before = self.records.get(trial.id)
            self.queue.append((trial, (before.attempts if before else 0) + 1))

    def _adopt(self, trial: Any, ended: set[tuple[str, int]],
               begun: set[tuple[str, int]]) -> bool:
        """Take over an attempt whose result landed while no driver listened."""
        found = self.results.unheard(trial.id, ended)
        if found is None:
            return False
        number, result = found
        record = self.records.of(trial.to_dict())
        record.attempts = max(record.attempts, number)
        now = self.backend.now()
        key = f"{self.stage.name}/{trial.id}#{number}"
        wall = float(result.metrics.get("wall_time") or 0.0)
        attempt = Attempt(trial, number, key, launched=now - wall, started=now - wall)
        event = Ended(key, now, result)
        if not result.ok and disk_full(result.reason):  # failed for want of space: again
            return False
        log.info("trial %s: adopting the result of attempt %d, which landed while the"
                 " driver was down", trial.id, number)
        if (trial.id, number) not in begun:  # killed before it journalled the start
            self.journal.record(TrialStarted(
                stage=self.stage.name, trial=trial.to_dict(), attempt=number, gang=None,
                shape=str(self.shape), adopted=True, comm=self.shape.backend,
                elapsed_s=self._elapsed()))
        self._finish_attempt(attempt, attempt_outcome(attempt, event, self.objectives), event,
                             adopted=True)
        return True

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
            self.policy.started(attempt, event.at)
            self.journal.record(TrialStarted(
                stage=self.stage.name, trial=attempt.trial.to_dict(), attempt=attempt.number,
                gang=event.gang, shape=str(attempt.shape), startup_s=round(event.startup_s, 3),
                comm=attempt.shape.backend, elapsed_s=self._elapsed()))
        elif isinstance(event, Ended):
            del self.running[trial_id]
            self._busy_ranks -= attempt.shape.ranks
            del self.keys[event.key]
            self.policy.ended(event, attempt)
            self._finish_attempt(attempt, attempt_outcome(attempt, event, self.objectives), event)
        if self.on_progress:
            self.on_progress(self)

    def next_deadline(self) -> float | None:
        deadline = self.policy.next_deadline()
        if self.wall is None or self.wall_stop is not None or not self.running:
            return deadline
        return self.wall.deadline() if deadline is None else min(deadline, self.wall.deadline())

    def check_deadlines(self) -> None:
        """Kill the attempts past their timeout, or silent past their progress
        timeout, and every one at the stage's wall budget; their Ended events follow."""
        self.policy.check(self.running)
        if (self.wall is not None and self.wall_stop is None and self.running
                and self.wall.reached(self.backend.now())):
            self._stop_at_wall()

    def _elapsed(self) -> float | None:
        """The stage's seconds so far under a wall budget (journalled: a resume goes on
        from them); None without one."""
        return None if self.wall is None else round(self.wall.elapsed(self.backend.now()), 3)

    def _stop_at_wall(self) -> None:
        """End the stage at its wall budget: the running trials are stopped (their Ended
        events journal them as stopped), the queued ones journalled stopped unstarted."""
        assert self.wall is not None and self.wall.reason is not None
        self.wall_stop = reason = self.wall.reason
        running = f"; {len(self.running)} running trial(s) stopped" if self.running else ""
        log.warning("stage %s: %s%s", self.stage.name, reason, running)
        for attempt in self.running.values():
            if attempt.cancelled is None:
                attempt.stopped = True
                self.policy.cancel(attempt, reason)
        queued, self.queue = self.queue, []
        for trial, number in queued:
            record = self.records.of(trial.to_dict())
            record.attempts = max(number - 1, 0)
            self._skip(trial, record, f"{reason} before it started", status=TrialStatus.STOPPED)

    @property
    def holding(self) -> bool:
        """Backing off after gangs failed to start: nothing new starts for now."""
        return self.policy.holding

    def abandon(self, reason: str) -> None:
        """Kill the running gangs, journalled; their trials run again on resume."""
        for attempt in self.running.values():
            self.backend.cancel(attempt.key)
            self.journal.record(TrialInterrupted(
                stage=self.stage.name, trial=attempt.trial.to_dict(), attempt=attempt.number,
                reason=reason, elapsed_s=self._elapsed()))
        self.running.clear()
        self._busy_ranks = 0
        self.keys.clear()
        self.search_log.record()

    def start_what_fits(self, limit: int | None = None) -> int:
        """Start queued and newly asked trials while the pool has room, at most
        ``limit`` of them; returns how many started."""
        self.exhausted = False
        started = 0
        if self.holding or self.preparing:
            return 0
        if self.wall is not None and (self.wall_stop is not None
                                      or not self.wall.may_start(self.backend.now())):
            if not self.running:  # nothing left to wait for: the stage ends here
                if self.wall_stop is None:
                    self._stop_at_wall()
                self.exhausted = True
            return 0
        while limit is None or started < limit:
            checked = False  # the backend was asked just now whether the shape fits
            if not self.queue:
                if self.searcher.done():
                    self.exhausted = True
                    break
                if self.shaping.planner is not None:
                    self.shaping.replan_tail(self.searcher.planned - self.searcher.n_asked,
                                             self.busy_ranks, len(self.running))
                if not self.backend.fits(self.shape):
                    break
                checked = True
                asked = self.searcher.ask(1)
                if not asked:
                    # A generational barrier while trials run; else nothing is left.
                    self.exhausted = not self.running
                    break
                self.search_log.record()
                self.queue.extend((trial, self._next_attempt(trial.id)) for trial in asked)
            if not checked and not self.backend.fits(self.shape):
                break
            trial, number = self.queue.pop(0)
            self._start(trial, number)
            started += 1
        return started

    def _next_attempt(self, trial_id: str) -> int:
        """1, or the attempt after a retried trial's last (its results and logs kept)."""
        record = self.records.get(trial_id)
        return 1 if record is None else record.attempts + 1

    @property
    def busy_ranks(self) -> int:
        # Asked for every trial started: a sum over 2,000 running gangs each time
        # was most of the loop's CPU at 32,768 slots.
        return self._busy_ranks

    def request_extras(self, trial: Any) -> dict[str, Any]:
        """Per-trial additions to the request, as the kind's part says them."""
        return self.part.request_extras(self, trial)

    def _start(self, trial: Any, number: int) -> None:
        from nestor.trainers import TrialRequest

        record = self.records.of(trial.to_dict())
        record.attempts = number
        record.shape = str(self.shape)
        try:
            extras = dict(self.request_extras(trial))
        except SkipTrial as exc:
            record.attempts = max(number - 1, 0)
            self._skip(trial, record, str(exc))
            return
        settings = {**self.settings, **extras.pop("settings", {})}
        trial_dir = f"{self.stage.name}/{check_id(trial.id, 'trial id')}"  # restored ids too
        run_dir = self._run_dir_text
        request = TrialRequest(
            trial_id=f"{self.stage.name}-{trial.id}",
            trainer=self.trainer,
            settings=settings,
            config=dict(trial.config),
            data_parallel=self.shape.data,
            model_parallel=self.shape.model,
            backend=self.shape.backend,
            checkpoint_dir=f"{run_dir}/{CHECKPOINTS}/{trial_dir}",
            log_dir=f"{run_dir}/logs/{trial_dir}",
            artifact_dir=f"{run_dir}/{ARTIFACTS}/{trial_dir}",
            timeout=self.stage.trial.timeout,
            env=self.stage.trial.env_vars(),
            result_path=self.results.path_text(trial.id, number),
            **extras,
        )
        hooks = self.stopper.begin(trial.id) if self.stopper is not None else {}
        key = f"{self.stage.name}/{trial.id}#{number}"
        attempt = Attempt(trial, number, key, launched=self.backend.now(), shape=self.shape)
        self.running[trial.id] = attempt
        self._busy_ranks += attempt.shape.ranks
        self.keys[key] = trial.id
        # The trial runs only once what led to it (its ask, its start) is durable:
        # the backend waits on the gate off the loop, so many launches share an fsync.
        self.backend.launch(Launch(key, self.shape, request, hooks, self.policy.beat_every_s,
                                   gate=self.journal.gate()))

    def _skip(self, trial: Any, record: TrialRecord, reason: str,
              status: TrialStatus = TrialStatus.FAILED) -> None:
        record.status, record.reason, record.finished_at = status, reason, time.time()
        self.journal.record(TrialFinished(
            stage=self.stage.name, trial=trial.to_dict(), attempt=record.attempts,
            status=status, value=None, metrics={}, reason=reason, slot_seconds=0.0,
            elapsed_s=self._elapsed()))
        self._tell(trial, record)

    def _finish_attempt(self, attempt: Attempt, outcome: dict[str, Any],
                        ended: Ended, adopted: bool = False) -> None:
        trial = attempt.trial
        # Stopped at the wall: not its fault.
        if attempt.stopped and outcome["status"] == TrialStatus.FAILED:
            outcome = {**outcome, "status": TrialStatus.STOPPED, "reason": attempt.cancelled,
                       "repeats": False}
        elif self.wall is not None and outcome["status"] in SCORED:
            self.wall.finished(ended.at - attempt.launched)
        if outcome["status"] == TrialStatus.FAILED and disk_full(outcome.get("reason")):
            # The machine's fault, not the trial's: stop, and run it again on resume.
            raise TrialDiskFull(self.run_dir, f"{self.stage.name}/{trial.id}", outcome["reason"])
        record = self.records[trial.id]
        slot_seconds, startup_slot_seconds = slot_time(attempt, ended)
        record.slot_seconds += slot_seconds
        record.startup_slot_seconds += startup_slot_seconds
        logs = dict(outcome.get("logs") or {})  # a command trainer's stdout and stderr
        unmet = unmet_need(outcome, self.needs,
                           f"{self.trainer_spec.kind} trainer {self.trainer.describe()!r}")
        if unmet is not None:  # it would fail again: no retry, the run stops
            outcome = {**outcome, "status": TrialStatus.FAILED, "reason": unmet, "value": None}
            self.broken = f"stage {self.stage.name!r}, trial {trial.id}: {unmet}"
        elif self.policy.retries_after(outcome, attempt.number):
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
            self.stopper.finish(trial.id, first, outcome["status"] == TrialStatus.PRUNED)
        record.status = outcome["status"]
        record.value = outcome.get("value")
        record.metrics = outcome.get("metrics", {})
        record.reason = outcome.get("reason")
        if attempt.number <= self.policy.retries and self.policy.not_retried(outcome):
            record.reason = f"{record.reason}; {NOT_RETRIED}"
        record.checkpoint = outcome.get("checkpoint")
        record.history = list(outcome.get("history", []))
        record.finished_at = time.time()
        self.journal.record(TrialFinished(
            stage=self.stage.name, trial=trial.to_dict(), attempt=attempt.number,
            status=record.status, value=record.value, metrics=record.metrics,
            reason=record.reason, slot_seconds=slot_seconds,
            startup_slot_seconds=startup_slot_seconds, checkpoint=record.checkpoint,
            history=record.history, logs=logs, adopted=adopted, elapsed_s=self._elapsed(),
            logged=journalled_logs(outcome.get("logged"),
                                   f"{ARTIFACTS}/{self.stage.name}/{trial.id}")))
        self._tell(trial, record)

    def _tell(self, trial: Any, record: TrialRecord) -> None:
        from nestor.search import Failure

        # Only a search under a cost budget is told costs (a train stage's Plan is not).
        cost = self._cost(trial, record)
        paid = {} if cost is None else {"cost": cost}
        if record.status in SCORED:
            self.searcher.tell(trial.id, record.value, **paid)
            if (record.status == TrialStatus.COMPLETED and self.threshold_at is None
                    and self._reached(record.value)):
                self.threshold_at = time.time()
                self.journal.record(ThresholdReached(stage=self.stage.name, trial=trial.id))
        else:
            self.searcher.tell(trial.id, Failure(record.reason or "failed"), **paid)
        self.search_log.record()
        self.checkpoints.prune(self.searcher, self.records)

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
        fidelity = getattr(getattr(self.stage, "search", None), "fidelity", None) or "epochs"
        length = self.settings.get(fidelity)
        if length is None and self.trainer_spec.name:
            from nestor.trainers.catalog import TRAINERS

            known = TRAINERS.get(self.trainer_spec.name)
            if known is not None and fidelity in known.settings:
                length = known.settings[fidelity].default
        return float(length) if isinstance(length, int | float) else None

    def _reached(self, value: Any) -> bool:
        objective = self.objectives[0]
        if objective.threshold is None or value is None:
            return False
        first = value[0] if isinstance(value, list) else value
        return objective.reached(first)

    # -- before and after the trials --------------------------------------------------

    def preparing_task(self) -> tuple[Any, ...] | None:
        """The kind's task before the first trial (:meth:`KindTrials.preparing_task`);
        the runner is ``preparing`` until ``prepared`` gets its TaskDone event."""
        task = self.part.preparing_task(self)
        self.preparing = task is not None
        return task

    def prepared(self, done: Any) -> None:
        """The preparing task is done; the stage may plan its trials now."""
        self.preparing = False
        self.part.prepared(self, done)

    def finishing_task(self) -> tuple[Any, ...] | None:
        """The kind's task once the trials are done (:meth:`KindTrials.finishing_task`)."""
        return self.part.finishing_task(self)

    def finalize(self, done: Any = None) -> dict[str, Any]:
        """The stage's summary once its trials (and its finishing task) are done; the
        trial folders its trials left empty are removed then (engine.tidy)."""
        remove_empty_trial_folders(self._run_dir_text, self.stage.name)
        return self.part.finalize(self, done)

    # -- the summary ------------------------------------------------------------------

    def _batch_of(self, record: TrialRecord) -> dict[str, Any]:
        """The global batch and learning rate a planned stage's trial trained with: they
        follow its data-parallel width (``batch:``, ``lr_rule``), which a re-plan changes."""
        if self.shaping.planned_shape is None or record.shape is None or not self.trainer_spec.name:
            return {}
        from nestor.orchestrator.planning import trial_batch

        dp = int(record.shape.split("x")[0])
        try:
            batch, lr = trial_batch(self.trainer_spec.name, self.settings, record.config, dp)
        except (ValueError, KeyError):  # a trainer without these options
            return {}
        return {"global_batch": batch, "lr": lr}

    def summary(self) -> dict[str, Any]:
        best = self.searcher.best()
        best_record = self.records.get(best.trial.id) if best else None
        return {
            "name": self.stage.name,
            "kind": self.stage.kind,
            "objective": {"metric": self.objectives[0].metric, "mode": self.objectives[0].mode},
            "objectives": [{"metric": o.metric, "mode": o.mode} for o in self.objectives],
            "stop_reason": self.wall_stop or self.searcher.stop_reason,
            "best": None if best_record is None else {
                "id": best_record.id,
                "config": best_record.config,
                "value": best_record.value,
                "test_value": best_record.metrics.get("test_accuracy"),
                "checkpoint": best_record.checkpoint,
            },
            "trials": self.records.rows(self._batch_of),
            **self.shaping.summary(self.settings.get("lr_scaling")),
            **self.records.totals(),
            "wall_time_s": round(time.time() - self.started_at, 3),
            "time_to_threshold_s": None if self.threshold_at is None
            else round(self.threshold_at - self.started_at, 3),
        }
