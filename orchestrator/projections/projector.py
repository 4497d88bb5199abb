"""MLflow as a projection of the journal, written off the scheduling loop.

The driver only appends events to the journal; a projector (a thread of its own,
in the driver's child process: ``projector_process``) reads what was appended and
makes MLflow say the same: a run per stage, a nested run per
trial, their params, per-epoch metrics, tags, logs, plots and end states. Each
event is projected once it is on disk, in journal order, and the projector
remembers how far it got (``mlflow-projected``, the next event's sequence
number) only after MLflow accepted the event's writes. Every write is
idempotent (``orchestrator.projections.tracking``), so an event projected again after a
kill, an outage or a resume changes nothing:

- an MLflow outage costs the loop nothing: the projector waits and retries
  (1 s, 2 s, ... up to 30 s) while the sweep goes on;
- a driver killed at any instant loses nothing: the next driver on the run
  directory (``nestor resume``) projects from where this one stopped;
- there is no run that the journal does not name: a trial's run is made from
  its journalled start, under a key derived from the run's ``run_key``.

At the speed of a cluster's events: a run's MLflow id is found from its
derived key in what the tracker learnt from the store once, at the start (one
paged read, none on a new store), never by a search per trial; a batch of
events is gathered run by run, so that a trial started and finished costs its
run a create, one ``log_batch`` and its end; and the cursor file moves at most
once a second (behind, it only costs a replay).

This replaces the tracker's outbox, its key files, and the reconciling of
runs left RUNNING by a killed driver.
"""

from __future__ import annotations

import contextlib
import logging
import math
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from nestor.orchestrator.journal.errors import out_of_space
from nestor.orchestrator.journal.events import (
    Event,
    SearchSized,
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
    WorkflowStarted,
)
from nestor.orchestrator.journal.journal import JournalError, write_atomic
from nestor.orchestrator.journal.safe import inside_or_warn
from nestor.orchestrator.journal.state import RunState
from nestor.orchestrator.journal.status import TrialStatus
from nestor.orchestrator.journal.text import first_line
from nestor.orchestrator.projections.cursor import CURSOR_FILE, JournalLines, read_cursor
from nestor.orchestrator.projections.local_store import copy_cursor, default_tracking_uri
from nestor.orchestrator.projections.plot_helper import PlotHelper
from nestor.orchestrator.projections.products import objective_label
from nestor.orchestrator.projections.tracking import (
    RunWrites,
    Tracker,
    derived_key,
    permanent,
)
from nestor.trainers.logged import MAX_TAG_VALUE, artifact_name_problem, digest, name_problem

log = logging.getLogger(__name__)

RETRY_FIRST_S, RETRY_MAX_S = 1.0, 30.0
ENDED: dict[str, str] = {TrialStatus.COMPLETED: "FINISHED", TrialStatus.PRUNED: "KILLED",
                         TrialStatus.STOPPED: "KILLED"}  # else FAILED
# A trial's events: gathered, per batch, into one set of writes to its run.
GATHERED = (TrialStarted, TrialAttemptFailed, TrialFinished, TrialInterrupted)
# The other events MLflow shows something of (``project``), each written after what was
# gathered before it. Any other event (the search's log, two a trial; the workflow's
# start and end; the planner's state) writes nothing, so it does not cut a batch: it
# cost a 2,000-trial sweep some 2,000 transactions instead of a few.
WRITTEN_ALONE = (StageStarted, StageFinished, StageReopened, ThresholdReached, StagePlanned,
                 StageReplanned, SearchSized)
# Events per batch at most (a trial's events are gathered within one): a batch is one
# transaction into the run directory's own store, a run at a time elsewhere.
BATCH_EVENTS, BATCH_EVENTS_BULK = 64, 4096
READ_BYTES = 2 << 20  # the journal is read and parsed this much at a time (~7,000 events)
CURSOR_EVERY_S = 1.0  # the cursor file is written at most this often, and at the end
# While the run goes on, a pass over the journal starts at most this often: a trial's
# events come milliseconds apart, and a pass per append made batches of one or two
# events, each paying a transaction and a read of the runs it touches, in the driver's
# process, where every CPU-second it takes is one the scheduling loop waits for (the
# GIL; cores shared with the ranks). MLflow shows an event this much later at most; a
# flush or close (the run's end) does not wait.
PACE_S = 0.5


class Projector:
    """Tails one run directory's journal into MLflow, in a thread of its own.

    >>> projector = Projector(run_dir, workflow)        # doctest: +SKIP
    >>> journal = Journal(path, on_append=projector.wake)  # doctest: +SKIP
    >>> projector.close(timeout_s=20)                   # what MLflow still lacks
    """

    def __init__(self, run_dir: Path, workflow: Any, *, journal_file: str = "journal.jsonl",
                 tracker: Tracker | None = None, warm: bool = False,
                 plot_helper: PlotHelper | None = None) -> None:
        self.run_dir = Path(run_dir)
        self.plot_helper = plot_helper  # draws half of each finished stage's plots
        # Open MLflow at once (the driver's projector, started before Ray): see _warm.
        # A projector that only catches up (``nestor ui``) opens it only if behind: a
        # store opened for nothing is a node-local copy synced back at exit, over the
        # store the UI's server is serving.
        self._warm_up = warm
        self.workflow = workflow
        self.journal_path = self.run_dir / journal_file
        self.uri = workflow.tracking.uri or default_tracking_uri(self.run_dir)
        # Made in the thread: opening a store (SQLite migrations, a server that is
        # down) must not hold up the driver's start either.
        self._tracker = tracker
        self.done = self._read_cursor()  # events projected: the next one's sequence number
        if not workflow.tracking.uri:  # a store started from an older copy: from there
            behind = copy_cursor(self.run_dir)
            if behind is not None and behind < self.done:
                log.info("MLflow's copy in %s was taken at event %d; projecting again"
                         " from there (not %d)", self.run_dir, behind, self.done)
                self.done = behind
                # Said at once: the store's next copy records the cursor file's position.
                write_atomic(self.run_dir / CURSOR_FILE, str(behind))
        self._saved, self._saved_at = self.done, time.monotonic()  # what the cursor file says
        # The journal folded so far (its stages' heads): how far the projector read,
        # by byte and by event, and what was new in each read (``_read_new``).
        self._state = RunState(trials=False)
        self._lines = JournalLines(self.journal_path)  # the journal's lines, as last counted
        self._pending: list[tuple[int, Event | None]] = []  # (seq, event; None: unknown)
        self._run_key = "legacy"  # journals from before run_key
        self._stage_runs: dict[str, str] = {}
        self._keys_read = False  # whether the tracker has learnt the store's runs
        self._failing_since: float | None = None  # MLflow refusing events since
        self._failure: BaseException | None = None  # and why, the last time
        self._wake = threading.Event()
        self._hurry = threading.Event()  # set by flush and close: no pacing (PACE_S)
        self._stop = threading.Event()  # set once closing: a retry's wait ends at once
        self._closing = False
        self._thread = threading.Thread(target=self._loop, name="nestor-mlflow-projector",
                                        daemon=True)
        self._thread.start()

    @property
    def tracker(self) -> Tracker:
        if self._tracker is None:
            self._tracker = Tracker(self.run_dir, self.workflow.tracking.experiment
                                    or self.workflow.name, self.workflow.tracking.uri)
        return self._tracker

    # -- the driver's side -----------------------------------------------------------------

    def wake(self, *_: Any) -> None:
        """Something was appended (called by the journal; cheap, never blocks)."""
        self._wake.set()

    @property
    def behind(self) -> int:
        """Events on disk that MLflow does not show yet."""
        return max(0, self._count_on_disk() - self.done)

    def flush(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` for MLflow to show every event on disk."""
        deadline = time.monotonic() + timeout_s
        self._hurry.set()
        while self.behind and time.monotonic() < deadline and self._thread.is_alive():
            self._wake.set()
            time.sleep(0.05)
        self._hurry.clear()
        return not self.behind

    def close(self, timeout_s: float = 20.0, *,
              report: Callable[[int, int, float | None], None] | None = None,
              stop: Callable[[], bool] | None = None) -> int:
        """Project what is left, then stop; returns the events MLflow still lacks,
        which the next driver on this run directory projects.

        Waits as long as MLflow keeps taking events (a big sweep on SQLite may end
        well ahead of its projection; one event's plots may take a minute on a busy
        machine), but no more than ``timeout_s`` of MLflow refusing them (a server
        that is down), not at all once a full disk refused them (waiting does not
        free it), and not once ``stop()`` says so (a Ctrl-C). While it waits,
        ``report(written, of, seconds_left)`` is called every 50 ms; without
        ``report``, what is left is logged."""
        began, first = time.monotonic(), self.done
        self._hurry.set()
        while self.behind and self._thread.is_alive() and not (stop and stop()):
            if report is not None:
                now, behind = time.monotonic(), self.behind
                rate = (self.done - first) / (now - began) if now > began else 0.0
                report(self.done, self.done + behind, behind / rate if rate > 0 else None)
            self._wake.set()
            time.sleep(0.05)
            failing = self._failing_since
            if failing is not None and (time.monotonic() - failing > timeout_s
                                        or disk_full(self._failure)):
                break
        self._closing = True
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout=2 if stop and stop() else 5)
        if self._tracker is not None:
            self._tracker.close()  # a store kept on local disk: its last copy, now
        left = self.behind
        if left and report is None:
            log.warning("%d journal events are not in MLflow at %s yet; `nestor resume %s`"
                        " (or the next driver on it) sends them", left, self.uri,
                        self.run_dir)
        return left

    # -- the thread ------------------------------------------------------------------------

    def _loop(self) -> None:
        if self._warm_up:
            self._warm()
        wait, last_pass = RETRY_FIRST_S, 0.0
        while True:
            since = time.monotonic() - last_pass
            if since < PACE_S:  # appends gathered into one pass (PACE_S)
                self._hurry.wait(PACE_S - since)
            self._wake.clear()
            last_pass = time.monotonic()
            try:
                self._project_new()
                wait, self._failing_since, self._failure = RETRY_FIRST_S, None, None
            except Exception as exc:  # MLflow down or slow: the journal keeps it all
                self._failure = exc
                if self._failing_since is None:
                    self._failing_since = time.monotonic()
                if isinstance(self._tracker, Tracker):
                    self._tracker.unsure()
                if self._closing:
                    self._save()
                    return
                log.warning("MLflow at %s did not take event %d (%s); retrying in %.0f s",
                            self.uri, self.done, first_line(exc)[:300], wait)
                # Not cut short by appends, nor by close's hurrying (a wake every 50 ms:
                # a line logged each time, hundreds on a full disk); only by the end.
                self._stop.wait(wait)
                wait = min(wait * 2, RETRY_MAX_S)
                continue
            if self._closing:
                self._save()
                return
            if self.done != self._saved:  # caught up: the cursor file says so once idle
                if not self._wake.wait(CURSOR_EVERY_S):
                    self._save()
                continue
            self._wake.wait()

    def _warm(self) -> None:
        """Open the tracker (MLflow's and SQLAlchemy's imports, the store's creation) and
        load matplotlib for the stages' plots at once, before the journal holds anything:
        the driver starts the projector before its backend, so this CPU-heavy second or
        two overlaps Ray's start, when the driver's thread waits, not the scheduling
        loop's first trials, which it would slow through the GIL and the cores. A store
        that will not open is retried by the loop, as before."""
        if self._tracker is None:
            try:
                _ = self.tracker
            except Exception as exc:  # MLflow down: the loop's retries say so
                log.debug("MLflow at %s not opened yet: %s", self.uri, first_line(exc)[:300])
        try:  # the stages' plots, drawn here at each stage's end
            from nestor.orchestrator.projections import plots

            plots.warm()
        except Exception as exc:  # pragma: no cover - drawn without it, later
            log.debug("matplotlib not loaded ahead: %s", first_line(exc)[:300])

    def _save(self) -> None:
        try:
            self._advance(self.done, save=True)
        except Exception as exc:  # the next driver replays from the older cursor
            log.warning("could not save how far MLflow got (%s)", first_line(exc)[:300])

    def _project_new(self) -> None:
        """Project what the journal holds beyond what was read, a part of it at a time
        (``READ_BYTES``): a long journal's first batch is written after one part is
        parsed, not the whole file, and a million events are never all in memory."""
        while True:
            events, more = self._read_new()
            self._pending.extend(events)
            tracker = self.tracker if self._pending else None
            size = BATCH_EVENTS_BULK if isinstance(tracker, Tracker) and tracker.bulk \
                else BATCH_EVENTS
            # Whole batches while the journal has more; the rest once it has not.
            while len(self._pending) >= size or (self._pending and not more):
                batch = self._pending[:size]
                self._project_batch(batch)
                del self._pending[:len(batch)]
            if not more:
                return

    def _project_batch(self, batch: list[tuple[int, Event | None]]) -> None:
        """Project ``batch`` with a trial's events gathered into one set of writes per
        run, then move the cursor once. A refused write (not an outage) sends the
        batch through again an event at a time, to skip only the event refused."""
        writes: dict[str, RunWrites] = {}
        done = self.done
        try:
            for seq, event in batch:
                if seq < self.done or event is None:
                    self._remember(event)  # projected by an earlier driver: only learn from it
                elif isinstance(event, GATHERED):
                    self._gather(writes, event)
                elif not isinstance(event, WRITTEN_ALONE):
                    self._remember(event)  # nothing to write: the batch goes on
                else:  # a stage's event: after what came before it, as it came
                    self._apply(writes)
                    self.project(event)
                done = max(done, seq + 1)
            self._apply(writes)
        except Exception as exc:
            if transient(exc):
                raise  # retried, from the batch's start, once MLflow answers
            self._project_each(batch)
            return
        self._advance(done)

    def _project_each(self, batch: list[tuple[int, Event | None]]) -> None:
        for seq, event in batch:
            if seq < self.done or event is None:
                continue
            try:
                self.project(event)
            except Exception as exc:
                if transient(exc):
                    raise
                log.warning("event %d cannot be shown in MLflow (%s); skipped",
                            seq, first_line(exc)[:300], exc_info=not permanent(exc))
            self._advance(seq + 1)

    def _advance(self, done: int, *, save: bool = False) -> None:
        """MLflow shows the events before ``done``; the cursor file says so at most
        every ``CURSOR_EVERY_S`` (a cursor behind only costs a replay, idempotent)."""
        self.done = max(self.done, done)
        now = time.monotonic()
        if self.done != self._saved and (save or now - self._saved_at >= CURSOR_EVERY_S):
            if self._tracker is not None and hasattr(self._tracker, "durable"):
                self._tracker.durable()
            write_atomic(self.run_dir / CURSOR_FILE, str(self.done))
            self._saved, self._saved_at = self.done, now

    def _read_new(self) -> tuple[list[tuple[int, Event | None]], bool]:
        """The events after what was read, ``READ_BYTES`` of lines at most (a longer
        line whole), and whether the journal holds more: the run's fold, carried on
        from its offset (a damaged line is counted but not shown; the driver,
        ``nestor status`` and ``resume`` stop on it)."""
        return self._state.fold_new(self.journal_path, READ_BYTES, damaged=_unshown)

    @property
    def seen(self) -> int:
        """Events read from the journal file."""
        return self._state.events

    def _count_on_disk(self) -> int:
        """The journal's complete lines (asked from the driver's thread, every 50 ms
        while it waits), counted on from where the last count ended."""
        return self._lines.count()

    def _read_cursor(self) -> int:
        return read_cursor(self.run_dir) or 0

    # -- one event -------------------------------------------------------------------------

    def _remember(self, event: Event | None) -> None:
        """What later events need from this one: the run key."""
        if isinstance(event, WorkflowStarted) and event.run_key:
            self._run_key = event.run_key

    def _resolved(self) -> Tracker:
        """The tracker, once it knows the runs its store holds (one read per start)."""
        tracker = self.tracker
        if not self._keys_read:
            tracker.run_key = self._run_key
            tracker.resolve(self._run_key)
            self._keys_read = True
        return tracker

    def _stage_run(self, stage: str) -> str:
        if stage not in self._stage_runs:
            self._resolved()
            kind = self._kind(stage)
            self._stage_runs[stage] = self.tracker.start_run(
                stage, key=derived_key(self._run_key, stage),
                tags={"nestor.stage": stage, "nestor.kind": kind,
                      "nestor.run_dir": str(self.run_dir.resolve()),
                      **self._objective_tags(stage)})
        return self._stage_runs[stage]

    def _objective_tags(self, stage: str) -> dict[str, str]:
        """What the stage's search optimizes and which way, ``nestor.objective: fom
        (min)``, so MLflow's view of its runs' metric never leaves the direction to
        guess (several objectives: each, comma-separated). A stage with no search of
        its own (ensemble, train) is tagged from its summary at its end."""
        try:
            objectives = self.workflow.stage(stage).objectives
        except Exception:
            return {}
        if not objectives:
            return {}
        return {"nestor.objective": ", ".join(objective_label(o.metric, o.mode)
                                              for o in objectives)}

    def _trial_run(self, event: TrialStarted | TrialAttemptFailed | TrialFinished
                   | TrialInterrupted) -> str:
        stage, trial = event.stage, event.trial
        stage_run = self._stage_run(stage)
        return self.tracker.start_run(
            f"{stage}/{trial['id']}", parent=stage_run, params=trial["config"],
            key=self._trial_key(stage, trial), tags=self._trial_tags(stage, trial))

    def _trial_key(self, stage: str, trial: dict[str, Any]) -> str:
        return derived_key(derived_key(self._run_key, stage), trial["id"])

    @staticmethod
    def _trial_tags(stage: str, trial: dict[str, Any]) -> dict[str, Any]:
        """A trial run's tags when it is made."""
        return {"nestor.stage": stage, "nestor.trial": trial["id"],
                "nestor.generation": trial.get("generation", 0),
                "nestor.deme": trial.get("deme", 0),
                "nestor.parents": ",".join(trial.get("parents", [])),
                "nestor.status": TrialStatus.RUNNING}

    def _gather(self, writes: dict[str, RunWrites], event: TrialStarted | TrialAttemptFailed
                | TrialFinished | TrialInterrupted) -> None:
        """Add what one of a trial's events asks of its run to ``writes`` (what
        ``project`` would write for it, in the same order)."""
        at = event.time or time.time()
        stage, trial = event.stage, event.trial
        key = self._trial_key(stage, trial)
        run = writes.get(key)
        if run is None:
            run = writes[key] = RunWrites(
                f"{stage}/{trial['id']}", key, parent=stage, start_time=at,
                create_tags=self._trial_tags(stage, trial), params=trial["config"])
        if isinstance(event, TrialStarted):
            run.tags |= self._started_tags(event)
        elif isinstance(event, TrialAttemptFailed):
            run.artifacts += self._log_files(event)
            run.tags |= {"nestor.attempts": event.attempt,
                         f"nestor.attempt{event.attempt}.failure": event.reason}
        elif isinstance(event, TrialFinished):
            history = event.history or []
            run.metrics += [(metrics, step, at) for step, metrics in enumerate(history)]
            run.metrics.append((event.metrics or {}, len(history), at))
            run.artifacts += self._log_files(event)
            points, tags, files = self._user_logs(event)
            run.metrics += points
            run.artifacts += files
            run.tags |= tags | self._finished_tags(event)
            run.end = (ENDED.get(event.status, "FAILED"), at)
        else:
            run.tags["nestor.status"] = TrialStatus.INTERRUPTED

    @staticmethod
    def _started_tags(event: TrialStarted) -> dict[str, Any]:
        return {"nestor.status": TrialStatus.RUNNING, "nestor.attempts": event.attempt,
                "nestor.shape": event.shape or "", "nestor.backend": event.comm or "horovod",
                "nestor.gang": event.gang}

    @staticmethod
    def _finished_tags(event: TrialFinished) -> dict[str, Any]:
        tags = {"nestor.status": event.status, "nestor.attempts": event.attempt}
        if event.reason:
            tags["nestor.failure"] = event.reason
        return tags

    def _apply(self, writes: dict[str, RunWrites]) -> None:
        """Write what ``_gather`` gathered, run by run (their stage runs first)."""
        for run in writes.values():
            run.parent = self._stage_run(str(run.parent))  # its stage's name, until now
        tracker = self._resolved() if writes else None
        if isinstance(tracker, Tracker):
            tracker.apply_all(list(writes.values()))
        elif tracker is not None:  # a tracker of another make (tests): run by run
            for run in writes.values():
                tracker.apply(run)
        writes.clear()

    def _kind(self, stage: str) -> str:
        try:
            return str(self.workflow.stage(stage).kind)
        except Exception:
            return "unknown"

    def project(self, event: Event) -> None:
        """Make MLflow show one journal event (idempotently)."""
        at = event.time or time.time()
        self._remember(event)
        tracker = self.tracker
        if isinstance(event, StageStarted):
            run = self._stage_run(event.stage)
            tracker.set_tags(run, {"nestor.from": ",".join(event.sources or [])})
        elif isinstance(event, TrialStarted):
            tracker.set_tags(self._trial_run(event), self._started_tags(event))
        elif isinstance(event, TrialAttemptFailed):
            run = self._trial_run(event)
            self._logs(run, event)
            tracker.set_tags(run, {"nestor.attempts": event.attempt,
                                   f"nestor.attempt{event.attempt}.failure": event.reason})
        elif isinstance(event, TrialFinished):
            run = self._trial_run(event)
            for step, metrics in enumerate(event.history or []):
                tracker.log_metrics(run, metrics, step=step, at=at)
            tracker.log_metrics(run, event.metrics or {}, step=len(event.history or []), at=at)
            self._logs(run, event)
            points, tags, files = self._user_logs(event)
            for values, step, when in points:
                tracker.log_metrics(run, values, step=step, at=when)
            for path, folder in files:
                tracker.log_artifact(run, path, folder)
            tracker.set_tags(run, tags | self._finished_tags(event))
            tracker.finish(run, ENDED.get(event.status, "FAILED"), at=at)
        elif isinstance(event, TrialInterrupted):
            tracker.set_tags(self._trial_run(event), {"nestor.status": TrialStatus.INTERRUPTED})
        elif isinstance(event, ThresholdReached):
            tracker.set_tags(self._stage_run(event.stage),
                             {"nestor.threshold_trial": event.trial})
        elif isinstance(event, StageFinished):
            self._stage_finished(event, at)
        elif isinstance(event, StageReopened):  # its summary is published again at its end
            tracker.set_tags(self._stage_run(event.stage), {
                "nestor.reopened": f"budget {event.budget}" if event.budget else "retry"})
        elif isinstance(event, StagePlanned):  # the shape parallel: auto chose, and why
            tracker.set_tags(self._stage_run(event.stage), {
                "nestor.plan": f"{event.dp}x{event.mp} on {event.slots} slots",
                "nestor.plan.why": str((event.plan or {}).get("why", ""))[:4000]})
        elif isinstance(event, SearchSized) and event.resumed_at is None:  # auto's pick
            tracker.set_tags(self._stage_run(event.stage), {
                "nestor.search": event.pick,
                "nestor.search.width": f"{event.width} at once ({event.source})"})
        elif isinstance(event, StageReplanned):
            tracker.set_tags(self._stage_run(event.stage), {
                f"nestor.replan.left{event.left}": f"{event.dp}x{event.mp}: {event.reason}"})

    def _logs(self, run: str, event: TrialAttemptFailed | TrialFinished) -> None:
        for path, folder in self._log_files(event):
            with contextlib.suppress(FileNotFoundError):
                self.tracker.log_artifact(run, path, folder)

    def _log_files(self, event: TrialAttemptFailed | TrialFinished
                   ) -> list[tuple[Path, str | None]]:
        """A command trainer's output files of the event's attempt, and their folder:
        only those inside the run directory (the journal is data; ``inside``)."""
        attempt = event.attempt if type(event.attempt) is int else 0  # a folder name: a number
        folder = f"logs/attempt-{attempt}"
        logs = event.logs if isinstance(event.logs, dict) else {}
        files = (inside_or_warn(self.run_dir, str(path), f"trial {event.trial.get('id')}'s log")
                 for path in logs.values())
        return [(path, folder) for path in files if path is not None]

    def _user_logs(self, event: TrialFinished) -> tuple[
            list[tuple[dict[str, float], int, float]], dict[str, str],
            list[tuple[Path, str | None]]]:
        """What the trial's code logged (``event.logged``; trainers.logged) as its run's
        metric points, tags and files. The journal is data: a metric or tag MLflow
        would refuse (a refused write would hold up every later event), a tag of
        nestor's or MLflow's own (``nestor.key`` names the run), a file outside the
        run directory, or one whose content is not what the trial left, is skipped."""
        logged = event.logged if isinstance(event.logged, dict) else {}
        trial = event.trial.get("id")
        points: list[tuple[dict[str, float], int, float]] = []
        metrics = logged.get("metrics")
        for name, rows in (metrics.items() if isinstance(metrics, dict) else ()):
            if name_problem(name) is not None or not isinstance(rows, list):
                continue
            for row in rows:
                if (isinstance(row, list) and len(row) == 3 and type(row[0]) is int
                        and all(_finite(x) for x in row[1:])):
                    points.append(({name: float(row[1])}, row[0], float(row[2])))
        tags = logged.get("tags")
        tags = {key: str(value)[:MAX_TAG_VALUE]
                for key, value in (tags.items() if isinstance(tags, dict) else ())
                if name_problem(key, "tag") is None}
        problems = logged.get("problems")
        if isinstance(problems, list) and problems:
            tags["nestor.logged.problems"] = "; ".join(map(str, problems))[:MAX_TAG_VALUE]
        files = []
        artifacts = logged.get("artifacts")
        for entry in artifacts if isinstance(artifacts, list) else ():
            file = self._artifact(entry, trial)
            if file is not None:
                files.append(file)
        return points, tags, files

    def _artifact(self, entry: Any, trial: Any) -> tuple[Path, str | None] | None:
        """(file, its folder in the run) of one artifact the trial logged, when its
        name is a plain relative path, its file lies inside the run directory and
        still holds what the trial left (its digest); else None, with a warning."""
        if not isinstance(entry, dict) or artifact_name_problem(entry.get("name")) is not None:
            log.warning("trial %s logged an artifact %r whose name is not a relative path:"
                        " not shown", trial, str(entry)[:200])
            return None
        name, path = str(entry["name"]), entry.get("path")
        if not isinstance(path, str) or Path(path).name != Path(name).name:
            return None
        place = inside_or_warn(self.run_dir, path, f"trial {trial}'s artifact")
        if place is None or not place.is_file():
            return None
        try:
            same = digest(place) == entry.get("sha256")
        except OSError:
            return None
        if not same:
            log.warning("trial %s's artifact %s changed since the trial left it: not shown",
                        trial, place)
            return None
        folder = str(Path(name).parent)
        return place, None if folder == "." else folder

    def _stage_finished(self, event: StageFinished, at: float) -> None:
        from nestor.orchestrator.projections.artifacts import publish_stage

        name, summary = event.stage, event.summary
        run = self._stage_run(name)
        stage = self.workflow.stage(name)
        publish_stage(self.tracker, run, summary, stage, self.run_dir, self.plot_helper)
        self.tracker.log_metrics(run, headline(summary), at=at)
        objective = summary.get("objective") or {}
        judged = self._objective_tags(name) or (
            {"nestor.objective": objective_label(objective["metric"], objective.get("mode"))}
            if objective.get("metric") else {})
        self.tracker.set_tags(run, {"nestor.n_runs": summary["n_runs"],
                                    "nestor.stop_reason": summary["stop_reason"], **judged})
        self.tracker.finish(run, "FINISHED", at=at)


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and \
        math.isfinite(value)


def _unshown(exc: JournalError) -> None:
    log.warning("%s; MLflow does not show it", exc)


def disk_full(exc: BaseException | None) -> bool:
    """Did MLflow refuse for want of space or quota (its own SQLite store's ``database
    or disk is full``, or ENOSPC or EDQUOT from a file it writes)? Waiting frees
    nothing: the driver stops, and the journal keeps what MLflow lacks for ``nestor
    resume``. (journal.errors.out_of_space, the journal's and the engine's test too.)"""
    return out_of_space(exc)


def transient(exc: BaseException) -> bool:
    """An MLflow that is down, slow or locked: worth trying the same write again.
    A refused write (4xx) or a fault in nestor itself is not: it would block
    every later event for ever."""
    import requests
    from mlflow.exceptions import MlflowException

    if isinstance(exc, MlflowException):
        return not permanent(exc)
    return isinstance(exc, OSError | ConnectionError | requests.RequestException)


def headline(summary: dict[str, Any]) -> dict[str, Any]:
    """The stage's comparison figures, as metrics of its MLflow run: its cost, and
    the figures its kind keeps under its own name (``summary["ensemble"]``...)."""
    metrics: dict[str, Any] = {"n_runs": summary["n_runs"], "slot_seconds":
                               summary["slot_seconds"]}
    section = str(summary.get("kind") or "hpo")
    if isinstance(summary.get(section), dict):
        for key, value in summary[section].items():
            if isinstance(value, int | float) and not isinstance(value, bool):
                metrics[f"{section}.{key}"] = value
    return metrics
