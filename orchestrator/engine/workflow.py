"""Run a workflow spec in a run directory, from the start or resumed.

A run directory is self-contained: the spec as given (``spec.yaml``), the
journal, each stage's searcher state, checkpoints, trainer logs, plots,
``results.json`` and, by default, the MLflow store. ``resume`` needs nothing
but the directory.
"""

from __future__ import annotations

import logging
import os
import time
import uuid
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from nestor.orchestrator.backends.interface import Backend, TaskDone
from nestor.orchestrator.backends.stopping import (
    Interrupted,
    on_stop_request,
    reinstall_handlers,
    stop_requested,
)
from nestor.orchestrator.engine.history import JournalSoFar, Summaries, sparse_gc
from nestor.orchestrator.journal.events import (
    StageFinished,
    StageStarted,
    WorkflowFinished,
    WorkflowInterrupted,
    WorkflowResumed,
    WorkflowStarted,
)
from nestor.orchestrator.journal.journal import Journal
from nestor.orchestrator.journal.kept import FoldKeeper
from nestor.orchestrator.journal.lock import LOCK_FILE, RunDirLocked, RunLock, hold
from nestor.orchestrator.journal.results_file import write_results
from nestor.orchestrator.spec import Workflow, load_spec, load_spec_text

log = logging.getLogger(__name__)
CLUSTER_POLL_S = 1.0  # how often a driver waiting on a shared cluster looks again
CLUSTER_SAY_S = 60.0  # and how often it says it is still waiting

SPEC_FILE = "spec.yaml"
JOURNAL_FILE = "journal.jsonl"
RESULTS_FILE = "results.json"


class RunError(Exception):
    """The workflow cannot start or go on; the message says why and what to do."""


def new_run_dir(base: Path, name: str) -> Path:
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    path = base / f"{name}-{stamp}"
    suffix = 1
    while path.exists():
        suffix += 1
        path = base / f"{name}-{stamp}-{suffix}"
    return path


def prepare_run_dir(spec_path: Path | None, run_dir: Path | None, resume: bool, *,
                    spec_text: str | None = None) -> tuple[Path, Workflow, RunLock]:
    """Create (or, to resume, check) the run directory and take its lock; returns it,
    the workflow and the lock, which the caller holds for as long as it drives the run.

    A new run's spec is given as a file (``spec_path``) or as text (``spec_text``,
    what ``nestor sweep`` builds) and saved as ``spec.yaml``, created exclusively,
    after the lock is taken: nothing is written before the run is known to be new,
    and a directory that holds files which are not a nestor run is refused, never
    mixed into (no user file is overwritten)."""
    if resume:
        if run_dir is None:
            raise RunError("--resume needs --run-dir DIR naming the run to continue")
        saved = run_dir / SPEC_FILE
        if not saved.exists():
            raise RunError(f"{run_dir} is not a nestor run directory (no {SPEC_FILE})")
        lock = take_lock(run_dir)
        try:
            return run_dir, load_spec(saved), lock
        except BaseException:
            lock.release()
            raise
    if spec_text is None:
        assert spec_path is not None
        workflow = load_spec(spec_path)
        spec_text = spec_path.read_text()
    else:
        workflow = load_spec_text(spec_text, "<nestor sweep>")
    run_dir = run_dir or new_run_dir(Path("runs"), workflow.name)
    check_fresh(run_dir, spec_text)  # before anything is created there
    run_dir.mkdir(parents=True, exist_ok=True)
    lock = take_lock(run_dir)
    try:
        check_fresh(run_dir, spec_text)  # again, now that no other driver can start
        saved = run_dir / SPEC_FILE
        if not saved.exists():
            with open(saved, "x") as handle:  # exclusive: never another's file
                handle.write(spec_text)
    except BaseException:
        lock.release()
        raise
    return run_dir, workflow, lock


# What nestor itself leaves in a run directory before its journal exists (a run whose
# start failed, a Slurm job's output, the MLflow store the projector opened first).
_OWN_NAMES = (LOCK_FILE, "mlflow.db", "mlflow.db-journal", "mlflow.db-wal", "mlflow.db-shm",
              "mlflow.db.json", "mlflow.db.lock", "mlartifacts", "mlflow-projected", "logs",
              "functions")
_OWN_PREFIXES = (".nestor-visible-", "slurm-")


def check_fresh(run_dir: Path, spec_text: str) -> None:
    """Refuse a run directory that already holds a run or files that are not nestor's.

    A ``spec.yaml`` there is nestor's only if it is this very spec (a run whose start
    failed before its journal, rerun, or a requeued Slurm job); any other is a file
    of the user's, which nestor must neither overwrite nor run beside."""
    if (run_dir / JOURNAL_FILE).exists():
        raise RunError(
            f"{run_dir} already holds a workflow run; continue it with"
            f" `nestor resume {run_dir}` or choose another --run-dir"
        )
    if not run_dir.is_dir():
        if run_dir.exists():
            raise RunError(f"--run-dir {run_dir} is a file, not a directory; choose another")
        return
    saved = run_dir / SPEC_FILE
    foreign = sorted(
        entry.name for entry in run_dir.iterdir()
        if entry.name not in _OWN_NAMES and not entry.name.startswith(_OWN_PREFIXES)
        and not (entry.name == SPEC_FILE and _same_text(saved, spec_text))
    )
    if foreign:
        more = f" and {len(foreign) - 5} more" if len(foreign) > 5 else ""
        shown = ", ".join(foreign[:5]) + more
        raise RunError(
            f"--run-dir {run_dir} holds files that are not a nestor run ({shown}); nestor"
            " never writes among your own files: give an empty or new directory (or leave"
            " --run-dir out for runs/NAME-TIMESTAMP)"
        )


def _saved_spec(run_dir: Path) -> str | None:
    """The run's spec.yaml as text (None: none, as in a simulation given a workflow)."""
    path = run_dir / SPEC_FILE
    try:
        return path.read_text() if path.is_file() and not path.is_symlink() else None
    except (OSError, UnicodeDecodeError):
        return None


def started_spec(run_dir: Path) -> str | None:
    """The spec text the run's journal says it started with (None: it started before
    nestor journalled it, or has not started)."""
    from nestor.orchestrator.journal.events import kinds_of, parse
    from nestor.orchestrator.journal.journal import iter_events

    for record in iter_events(run_dir / JOURNAL_FILE, kinds_of(WorkflowStarted)):
        event = parse(record)
        return event.spec if isinstance(event, WorkflowStarted) else None
    return None


def _same_text(path: Path, text: str) -> bool:
    try:
        return path.is_file() and not path.is_symlink() and path.read_text() == text
    except (OSError, UnicodeDecodeError):
        return False


def take_lock(run_dir: Path) -> RunLock:
    """The run directory's lock (:mod:`orchestrator.journal.lock`); RunError naming
    the holder when another driver has it."""
    try:
        return hold(run_dir)
    except RunDirLocked as exc:
        raise RunError(str(exc)) from None


def check_simulatable(workflow: Workflow) -> None:
    """Refuse, naming the stage, what a simulated backend cannot stand in for."""
    from nestor.orchestrator.engine.kinds import KINDS, stage_kind

    simulated = [name for name in KINDS if stage_kind(name).simulated]
    for stage in workflow.stages:
        if not stage_kind(stage.kind).simulated:
            raise RunError(
                f"stage {stage.name!r} is a {stage.kind} stage, but the simulation runs"
                f" only {' and '.join(simulated)} stages: {stage.kind} stages need the"
                " checkpoints and predictions real trials leave on disk"
            )
        if getattr(stage, "early_stopping", None) is not None:
            raise RunError(
                f"stage {stage.name!r} sets early_stopping, but the simulation cannot run it:"
                " early stopping judges the per-epoch reports of real trials on a Ray actor"
            )


def run_workflow(
    workflow: Workflow,
    backend: Backend,
    run_dir: Path,
    *,
    resume: bool = False,
    fsync: bool | None = None,
    on_progress: Callable[[Any], None] | None = None,
    on_results: Callable[[Path, dict[str, Any]], None] | None = None,
    on_append: Callable[[dict[str, Any]], None] | None = None,
    reopen: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Run (or, with ``resume``, go on with) ``workflow`` on ``backend``, journalling
    into ``run_dir``; returns its results. The one run path, for every backend
    (``orchestrator.backends.factory.make_backend`` makes them).

    Stages form a DAG through ``from:``. Every stage whose sources are done
    runs at once, all of them stepping their trials on one shared pool of
    slots; a finished stage is journalled with its summary and never re-run.
    ``on_results`` is told the results as soon as they are journalled, before
    the backend is shut down (a command prints them without waiting for Ray's
    shutdown or MLflow); ``on_append`` is told of each journalled event (the MLflow
    projector's wake). The journal fsyncs its events unless ``fsync`` is False (by
    default, unless the backend is virtual: a simulation has nothing to lose in a
    crash). A virtual backend's results add ``virtual_time_s`` (its clock) and
    ``driver_s`` (real seconds the run took). The backend is shut down at the end;
    a stop request (or a simulated allocation's time limit) raises
    :class:`~orchestrator.backends.stopping.Interrupted` after journalling it.
    ``reopen`` (resume only): :func:`orchestrator.engine.reopen.reopenings`' keywords,
    a search's new ``budget`` (of ``stage``) and ``retry`` of failed planned trials.
    """
    run_dir = Path(run_dir)
    if backend.virtual:
        check_simulatable(workflow)
    run_dir.mkdir(parents=True, exist_ok=True)
    try:  # one driver per run directory (shared with a command's own hold of it)
        lock = take_lock(run_dir)
    except RunError:
        backend.shutdown()
        raise
    try:
        return _drive(workflow, backend, run_dir, resume=resume, fsync=fsync,
                      on_progress=on_progress, on_results=on_results, on_append=on_append,
                      reopen=reopen)
    finally:
        lock.release()


def _drive(workflow: Workflow, backend: Backend, run_dir: Path, *, resume: bool,
           fsync: bool | None, on_progress: Callable[[Any], None] | None,
           on_results: Callable[[Path, dict[str, Any]], None] | None,
           on_append: Callable[[dict[str, Any]], None] | None,
           reopen: dict[str, Any] | None = None) -> dict[str, Any]:
    """:func:`run_workflow`'s run, under the run directory's lock."""
    from nestor.orchestrator.engine.reopen import ReopenError, reopenings

    if not resume and (run_dir / JOURNAL_FILE).exists():
        backend.shutdown()
        raise RunError(f"{run_dir} already holds a workflow run; continue it with"
                       f" `nestor resume {run_dir}` or choose another run directory")
    reinstall_handlers()  # a backend's start (ray.init) may have taken the signals
    events = JournalSoFar.read(run_dir / JOURNAL_FILE)  # before this driver appends
    reopened = []
    if reopen:
        try:  # refused before anything is written
            if events.started is None:
                raise ReopenError("the run never started: there is nothing to extend or retry")
            reopened = reopenings(workflow, events, **reopen)
        except ReopenError as exc:
            backend.shutdown()
            raise RunError(str(exc)) from None
    keeper = FoldKeeper(run_dir, JOURNAL_FILE)  # `nestor status` folds only its tail
    journal = Journal(run_dir / JOURNAL_FILE, on_append,
                      fsync=not backend.virtual if fsync is None else fsync,
                      on_written=keeper.written, new=not resume)
    keeper.start(journal.size, events.heads)  # the resume's fold of the journal so far
    began, began_at, clock0 = time.perf_counter(), time.time(), backend.now()
    try:
        started = events.started
        if started is None:
            # Names this run's MLflow runs for good: the projector derives every run's
            # key from it, so a resumed driver's projector finds the runs made before.
            journal.record(WorkflowStarted(
                workflow=workflow.name, slots=backend.slots, pid=os.getpid(),
                run_key=uuid.uuid4().hex,
                backend=type(backend).__name__ if backend.virtual else None,
                spec=_saved_spec(run_dir)))
        else:
            journal.record(WorkflowResumed(slots=backend.slots, pid=os.getpid()))
        if reopened:
            for event in reopened:
                log.warning("going on with stage %s: %s", event.stage,
                            f"its search extended to {event.budget} trials" if event.budget
                            else "its failed trials run again")
                journal.record(event)
            journal.sync()
            events = JournalSoFar.read(run_dir / JOURNAL_FILE)  # the reopened stages' events
        scheduler = StageScheduler(workflow, run_dir=run_dir, backend=backend, journal=journal,
                                   events=events, on_progress=on_progress)
        summaries = scheduler.run()  # its loop runs with the collector sparse
        with sparse_gc():  # the results of 230,000 trials, as the loop's events
            results: dict[str, Any] = {
                "workflow": workflow.name, "run_dir": str(run_dir), "slots": backend.slots,
                "stages": [summaries[name] for name in workflow.order()],
                "n_runs": sum(summaries[name]["n_runs"] for name in summaries),
                "slot_seconds": round(sum(summaries[n]["slot_seconds"] for n in summaries), 3),
            }
            first = started.time if started is not None else began_at  # resumed: from the start
            results["wall_time_s"] = round(time.time() - first, 3)
            if backend.virtual:
                results["virtual_time_s"] = backend.now() - clock0
                results["driver_s"] = time.perf_counter() - began
            # A simulation's summary of 230,000 trials unindented: json's C encoder writes it
            # in a second, where indent=2 (pure Python) took minutes of the driver's CPU.
            # With an index of each stage's trials in it: `nestor results` parses only the rest.
            write_results(run_dir / RESULTS_FILE, results, indent=None if backend.virtual else 2)
        journal.record(WorkflowFinished())
        if on_results is not None:
            on_results(run_dir, results)
        return results
    except Interrupted as exc:  # a stop request, or a simulated allocation's time limit
        journal.record(WorkflowInterrupted(reason=exc.reason))
        exc.run_dir = run_dir
        raise
    finally:
        journal.close()
        keeper.close()
        backend.shutdown()


class StageScheduler:
    """Steps the runners of every ready stage together on one backend.

    The loop blocks in ``backend.wait`` until an attempt starts or ends, the
    next trial deadline passes, or a stop is requested: it never polls.
    """

    def __init__(self, workflow: Workflow, *, run_dir: Path, backend: Backend,
                 journal: Journal, events: JournalSoFar | list[dict[str, Any]],
                 on_progress: Callable[[Any], None] | None) -> None:
        self.workflow = workflow
        self.run_dir = run_dir
        self.backend = backend
        self.journal = journal
        self.events = JournalSoFar.of(events)  # the journal before this driver
        self.on_progress = on_progress
        # the finished stages' (a copy: the journal's are parsed only when looked up)
        self.summaries: Summaries = self.events.summaries.copy()
        self.active: dict[str, Any] = {}
        self.finishing: dict[str, str] = {}  # a stage's finishing task's key -> the stage
        self.preparing: dict[str, str] = {}  # and its preparing task's
        self._waiting_since = 0.0  # when nothing could start for want of cluster slots
        self._last_said = 0.0

    def run(self) -> Summaries:
        with on_stop_request(self.backend.wake), sparse_gc():
            return self._loop()

    def _loop(self) -> Summaries:
        while True:
            self._start_ready_stages()
            broken = next((r.broken for r in self.active.values() if r.broken), None)
            if broken is not None:  # a trainer broke what its stage needs of it
                for runner in list(self.active.values()):
                    runner.abandon(broken)
                raise RunError(broken)
            if not self.active:
                return self.summaries
            self._share_free_slots()
            done = [name for name, runner in self.active.items()
                    if runner.finished and name not in self.finishing.values()]
            for name in done:
                self._finish(name)
            if any(name in self.summaries for name in done):
                continue  # their dependants may start now
            if self.finishing or self.preparing or any(runner.running or runner.holding
                                     for runner in self.active.values()):
                self._waiting_since = 0.0
                self._dispatch(self.backend.wait(self._until_next_deadline()))
            elif not self._wait_for_shared_cluster():
                blocked = ", ".join(f"{n} ({r.shape})" for n, r in self.active.items())
                raise RunError(
                    f"stage trials of {blocked} cannot start on {self.backend.slots} slots;"
                    " lower parallel: or give more slots"
                )
            reason = stop_requested()
            if reason is not None:
                for runner in list(self.active.values()):
                    runner.abandon(reason)
                raise Interrupted(reason)

    def _until_next_deadline(self) -> float | None:
        deadlines = [d for r in self.active.values() if (d := r.next_deadline()) is not None]
        if not deadlines:
            return None
        return max(0.0, min(deadlines) - self.backend.now())

    def _dispatch(self, events: list[Any]) -> None:
        for event in events:
            if isinstance(event, TaskDone):
                if (name := self.finishing.pop(event.key, None)) is not None:
                    self._finished(name, self.active[name].finalize(event))
                elif (name := self.preparing.pop(event.key, None)) is not None:
                    self.active[name].prepared(event)
                    self.active[name].restore(self.events)
                continue
            for runner in self.active.values():
                if runner.owns(event.key):
                    runner.on_event(event)
                    break
            else:
                log.debug("event for an attempt no stage holds: %s", event)
        for runner in self.active.values():
            runner.check_deadlines()

    def _wait_for_shared_cluster(self) -> bool:
        """Wait a moment when nothing runs only because other drivers on a shared
        cluster hold the slots; True if that is the case (it clears when they end)."""
        short = {name: self.backend.cluster_shortfall(runner.shape)
                 for name, runner in self.active.items()}
        if not all(short.values()):
            return False
        size = self.backend.cluster_size()
        if any(runner.shape.ranks > size for runner in self.active.values()):
            return False  # the cluster itself shrank (a node left): waiting cannot help
        now = self.backend.now()
        if not self._waiting_since or now - self._last_said >= CLUSTER_SAY_S:
            self._waiting_since = self._waiting_since or now
            self._last_said = now
            log.warning("waiting %.0f s so far for slots on the shared Ray cluster: other"
                        " workflows hold them (%s short)", now - self._waiting_since,
                        ", ".join(f"{n}: {k}" for n, k in short.items()))
        # On the backend's clock: a simulated cluster brings repaired nodes back.
        self._dispatch(self.backend.wait(CLUSTER_POLL_S))
        return True

    def _share_free_slots(self) -> None:
        """Hand free slots out one trial at a time, to the stage using fewest ranks,
        so that stages running side by side share the allocation instead of the
        first one taking it all. Ends with a pass in which every runner was asked."""
        while True:
            for runner in sorted(self.active.values(), key=lambda r: r.busy_ranks):
                if runner.start_what_fits(limit=1):
                    break
            else:
                return

    def _start_ready_stages(self) -> None:
        if all(s.name in self.active or s.name in self.summaries for s in self.workflow.stages):
            return  # every stage started: no topological order to work out per event
        from nestor.orchestrator.engine.kinds import (  # once all started, never
            StageError,
            stage_kind,
        )
        for name in self.workflow.order():
            if name in self.summaries or name in self.active:
                continue
            stage = self.workflow.stage(name)
            if not all(dep in self.summaries for dep in stage.from_):
                continue
            if name not in self.events.stages_started:
                self.journal.record(StageStarted(stage=name, stage_kind=stage.kind,
                                                 sources=list(stage.from_)))
            kwargs: dict[str, Any] = dict(
                run_dir=self.run_dir.resolve(), backend=self.backend, journal=self.journal,
                on_progress=self.on_progress, events=self.events,
            )
            sources = [self.summaries[dep] for dep in stage.from_]
            try:
                runner = stage_kind(stage.kind).runner(self.workflow, stage, sources, **kwargs)
            except StageError as exc:
                raise RunError(str(exc)) from None
            self.active[name] = runner
            task = runner.preparing_task()
            if task is None:
                runner.restore(self.events)
            else:  # restored once prepared: its plan depends on the task
                self.preparing[f"{name}:prepare"] = name
                self.backend.run_task(f"{name}:prepare", *task)

    def _finish(self, name: str) -> None:
        """A stage whose trials are done: its own last work (an ensemble's member
        predictions) runs off the loop first, if it has any."""
        runner = self.active[name]
        task = runner.finishing_task()
        if task is None:
            self._finished(name, runner.finalize())
            return
        key = f"{name}:finish"
        self.finishing[key] = name
        self.backend.run_task(key, *task)

    def _finished(self, name: str, summary: dict[str, Any]) -> None:
        self.active.pop(name)
        # Its plots, tables and MLflow run are drawn by the projector, off the loop.
        self.journal.record(StageFinished(stage=name, summary=summary))
        self.summaries[name] = summary
