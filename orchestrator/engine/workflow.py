"""Run a workflow spec in a run directory, from the start or resumed.

A run directory is self-contained: the spec as given (``spec.yaml``), the
journal, each stage's searcher state, checkpoints, trainer logs, plots,
``results.json`` and, by default, the MLflow store. ``resume`` needs nothing
but the directory.
"""

from __future__ import annotations

import json
import logging
import os
import time
import uuid
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from orchestrator.backends import Backend, RayBackend, TaskDone
from orchestrator.backends.ray.gangs import (
    GangPool,
    cluster_slot_counts,
    gpu_packing,
    slot_resource,
)
from orchestrator.engine.stopping import (
    Interrupted,
    on_stop_request,
    reinstall_handlers,
    stop_requested,
)
from orchestrator.journal.events import (
    StageFinished,
    StageStarted,
    WorkflowFinished,
    WorkflowInterrupted,
    WorkflowResumed,
    WorkflowStarted,
)
from orchestrator.journal.journal import Journal, read_events, write_atomic
from orchestrator.spec import Workflow, load_spec

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


def prepare_run_dir(spec_path: Path, run_dir: Path | None, resume: bool) -> tuple[Path, Workflow]:
    """Create (or, to resume, check) the run directory; returns it and the workflow."""
    if resume:
        if run_dir is None:
            raise RunError("--resume needs --run-dir DIR naming the run to continue")
        saved = run_dir / SPEC_FILE
        if not saved.exists():
            raise RunError(f"{run_dir} is not a nestor run directory (no {SPEC_FILE})")
        return run_dir, load_spec(saved)
    workflow = load_spec(spec_path)
    run_dir = run_dir or new_run_dir(Path("runs"), workflow.name)
    if (run_dir / JOURNAL_FILE).exists():
        raise RunError(
            f"{run_dir} already holds a workflow run; continue it with"
            f" `nestor resume {run_dir}` or choose another --run-dir"
        )
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / SPEC_FILE).write_text(spec_path.read_text())
    return run_dir, workflow


def joining_runtime_env(environ: dict[str, str] | None = None) -> dict[str, Any] | None:
    """What a driver joining a cluster started elsewhere (``--address``) hands its ranks.

    Workers there have the cluster's environment, not this driver's. The spec's
    import check looked on the driver's PYTHONPATH, so the ranks get it too (made
    absolute: they run in another directory), ahead of the cluster's own."""
    environ = os.environ if environ is None else environ
    entries = [str(Path(entry).resolve())
               for entry in environ.get("PYTHONPATH", "").split(os.pathsep) if entry]
    if not entries:
        return None
    return {"env_vars": {"PYTHONPATH": os.pathsep.join([*entries, "${PYTHONPATH}"])}}


RAY_TOKEN_LOGGER = "ray._private.authentication.authentication_token_setup"


class _NoTokenAdvice(logging.Filter):
    """Drops Ray's advice, on starting a cluster, to turn its token off."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "RAY_AUTH_MODE=disabled" not in record.getMessage()


def quiet_token_advice() -> None:
    """Say nothing of the token of the Ray cluster nestor starts for a run.

    Ray's token is what keeps that cluster (its ports on this host) private to the
    run; Ray's own line about it ("... Set RAY_AUTH_MODE=disabled to opt out")
    tells every user how to turn that protection off, so it is not shown."""
    logger = logging.getLogger(RAY_TOKEN_LOGGER)
    if not any(isinstance(f, _NoTokenAdvice) for f in logger.filters):
        logger.addFilter(_NoTokenAdvice())


def cluster_slots(workflow: Workflow, slots: int | None, address: str | None) -> int:
    """Slots to use: the spec's, else --slots, else the Ray cluster's CPUs (GPUs if any)."""
    import ray

    if workflow.resources.slots is not None:
        wanted = workflow.resources.slots
    elif slots is not None:
        wanted = slots
    else:
        wanted = None
    if address is None and not ray.is_initialized():
        from orchestrator.spec import default_slots

        quiet_token_advice()
        ray.init(
            address="local",  # a Ray of its own, even where another runs on this host
            num_cpus=max(wanted or default_slots(), 1),
            include_dashboard=False,
            log_to_driver=False,
            configure_logging=False,
        )
    elif not ray.is_initialized():
        ray.init(address=address, log_to_driver=False, configure_logging=False,
                 runtime_env=joining_runtime_env())
    resource = slot_resource()
    packing = gpu_packing(workflow.resources.gpus_per_trial) if resource == "GPU" else 1
    available, idle = cluster_slot_counts(resource, packing)
    if wanted is not None and wanted > available and not workflow.resources.oversubscribe:
        raise RunError(
            f"the workflow asks for {wanted} slots but the Ray cluster has {available}"
        )
    if address is not None and not workflow.resources.oversubscribe:
        # A shared cluster: other drivers may hold slots. Refuse now, clearly, rather
        # than wait in placement-group creation until Horovod times out.
        if wanted is None:
            wanted = idle  # what the cluster has free now
        if wanted > idle or wanted < 1:
            raise RunError(
                f"the workflow asks for {wanted} slots but only {idle} of the Ray"
                f" cluster's {available} are free (other workflows hold the rest); lower"
                " resources.slots or --slots, or wait for them"
            )
    return wanted or available


# A cluster whose GPUs are logical only (tests, dry runs) may skip the start check.
GPU_CHECK_ENV = "NESTOR_GPU_CHECK"


def check_gpu_builds(workflow: Workflow) -> None:
    """Where the ranks will be granted GPUs, refuse to start on a node whose torch is a
    CPU build (or whose Horovod lacks NCCL, for Horovod stages): each of its trials
    would fail. Checked once per node, before any trial starts."""
    if slot_resource() != "GPU" or os.environ.get(GPU_CHECK_ENV, "1") == "0":
        return
    from orchestrator.commands.doctor import build_problems, node_builds

    problems = build_problems(node_builds(), {workflow.backend_of(s.name)
                                              for s in workflow.stages})
    if problems:
        raise RunError(
            "the ranks are granted GPUs, but cannot use them: " + "; ".join(problems)
            + "; run `nestor doctor` on that node and rerun set-up there"
            f" (NESTOR_TORCH_FLAVOUR=cuda scripts/setup.sh), or set {GPU_CHECK_ENV}=0 where"
            " the cluster's GPUs are logical only")


def run_workflow(
    spec_path: Path | None,
    *,
    run_dir: Path | None = None,
    resume: bool = False,
    slots: int | None = None,
    address: str | None = None,
    on_progress: Callable[[Any], None] | None = None,
    on_results: Callable[[Path, dict[str, Any]], None] | None = None,
    wait_for_mlflow: Callable[[Any], None] | None = None,
) -> tuple[Path, dict[str, Any]]:
    """Run (or resume) a workflow; returns the run directory and its results.

    Stages form a DAG through ``from:``. Every stage whose sources are done
    runs at once, all of them stepping their trials on one shared pool of
    slots; a finished stage is journalled with its summary and never re-run.
    ``on_results`` is told the results as soon as they are journalled, before
    Ray is shut down and MLflow is waited for (``wait_for_mlflow(projector)``,
    else ``projector.close()``): a command prints them without waiting on either.
    """
    import ray

    from orchestrator.projections.projector import Projector

    run_dir, workflow = prepare_run_dir(spec_path or Path(), run_dir, resume)
    started_ray = not ray.is_initialized()
    total = cluster_slots(workflow, slots, address)
    check_gpu_builds(workflow)
    if address is not None:  # a cluster started elsewhere: do all its nodes see run_dir?
        from orchestrator.backends.ray.visibility import check_run_dir_shared

        check_run_dir_shared(run_dir)
    reinstall_handlers()
    events = read_events(run_dir / JOURNAL_FILE)
    journal = Journal(run_dir / JOURNAL_FILE)
    projector = Projector(run_dir, workflow)  # MLflow, off the loop
    journal.on_append = projector.wake
    pool = GangPool(total, oversubscribe=workflow.resources.oversubscribe,
                    use_gpu=slot_resource() == "GPU", shared=address is not None,
                    gpu_share=workflow.resources.gpus_per_trial)
    backend = RayBackend(pool)
    started = time.time()
    try:
        # Names this run's MLflow runs for good: the projector derives every run's
        # key from it, so a resumed driver's projector finds the runs made before.
        run_key = next((e.get("run_key") for e in events if e["event"] == "workflow_started"),
                       None) or uuid.uuid4().hex
        if not events:
            journal.record(WorkflowStarted(workflow=workflow.name, slots=total,
                                           pid=os.getpid(), run_key=run_key))
        else:
            journal.record(WorkflowResumed(slots=total, pid=os.getpid()))
        scheduler = StageScheduler(workflow, run_dir=run_dir, backend=backend, journal=journal,
                                   events=events, on_progress=on_progress)
        summaries = scheduler.run()
        results: dict[str, Any] = {
            "workflow": workflow.name, "run_dir": str(run_dir), "slots": total,
            "stages": [summaries[name] for name in workflow.order()],
            "n_runs": sum(summaries[name]["n_runs"] for name in summaries),
            "slot_seconds": round(sum(summaries[n]["slot_seconds"] for n in summaries), 3),
        }
        first = next((e["time"] for e in events if e["event"] == "workflow_started"), started)
        results["wall_time_s"] = round(time.time() - first, 3)
        write_atomic(run_dir / RESULTS_FILE, json.dumps(results, indent=2, default=str))
        journal.record(WorkflowFinished())
        if on_results is not None:
            on_results(run_dir, results)
        return run_dir, results
    except Interrupted as exc:
        journal.record(WorkflowInterrupted(reason=exc.reason))
        exc.run_dir = run_dir
        raise
    finally:
        journal.close()
        try:
            backend.shutdown()
            if started_ray:
                ray.shutdown()
        finally:  # what MLflow still lacks then, the next driver on run_dir sends
            (wait_for_mlflow or Projector.close)(projector)


class StageScheduler:
    """Steps the runners of every ready stage together on one backend.

    The loop blocks in ``backend.wait`` until an attempt starts or ends, the
    next trial deadline passes, or a stop is requested: it never polls.
    """

    def __init__(self, workflow: Workflow, *, run_dir: Path, backend: Backend,
                 journal: Journal, events: list[dict[str, Any]],
                 on_progress: Callable[[Any], None] | None) -> None:
        self.workflow = workflow
        self.run_dir = run_dir
        self.backend = backend
        self.journal = journal
        self.events = events
        self.on_progress = on_progress
        self.summaries: dict[str, dict[str, Any]] = {}
        for event in events:
            if event["event"] == "stage_finished":
                self.summaries[event["stage"]] = event["summary"]
        self.active: dict[str, Any] = {}
        self.finishing: dict[str, str] = {}  # a stage's finishing task's key -> the stage
        self.preparing: dict[str, str] = {}  # and its preparing task's
        self._waiting_since = 0.0  # when nothing could start for want of cluster slots
        self._last_said = 0.0

    def run(self) -> dict[str, dict[str, Any]]:
        with on_stop_request(self.backend.wake):
            return self._loop()

    def _loop(self) -> dict[str, dict[str, Any]]:
        while True:
            self._start_ready_stages()
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
        from orchestrator.engine.kinds import StageError, stage_kind

        if all(s.name in self.active or s.name in self.summaries for s in self.workflow.stages):
            return  # every stage started: no topological order to work out per event
        for name in self.workflow.order():
            if name in self.summaries or name in self.active:
                continue
            stage = self.workflow.stage(name)
            if not all(dep in self.summaries for dep in stage.from_):
                continue
            if not any(e["event"] == "stage_started" and e["stage"] == name
                       for e in self.events):
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
