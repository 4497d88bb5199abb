"""Run a workflow's real scheduler on a backend given by the caller, without Ray.

``nestor run`` builds a Ray cluster, a RayBackend and an MLflow projector of
its journal, then hands the backend and the journal to
:class:`~orchestrator.engine.workflow.StageScheduler`. This module builds only the
journal (no MLflow: a simulation of thousands of trials has no store to fill),
and hands the scheduler whatever backend it is given: a
:class:`~orchestrator.backends.SimulatedBackend` for the 2,048-slot benchmark
and the fast tests, or a RayBackend on a Ray the caller started, to check that
both give the same sweep. The scheduling code is the real one; nothing here
decides which trial runs next.

Simulated stages: hpo and train. The others need what trials leave on disk
(checkpoints, predictions) and are refused with a clear error. Early stopping
is refused too: its judge is a Ray actor the trials report to each epoch.

>>> backend = SimulatedBackend(nodes=256, slots_per_node=8,
...                            trial_model=lognormal_trials(600.0), seed=1)
>>> results = simulate_workflow(workflow, backend, Path("runs/sim"))   # doctest: +SKIP
>>> results["slot_seconds"], results["virtual_time_s"]                 # doctest: +SKIP
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from orchestrator.backends import Backend
from orchestrator.engine.stopping import Interrupted
from orchestrator.engine.workflow import JOURNAL_FILE, RESULTS_FILE, RunError, StageScheduler
from orchestrator.journal.events import WorkflowFinished, WorkflowInterrupted, WorkflowStarted
from orchestrator.journal.journal import Journal, read_events, write_atomic
from orchestrator.spec import Workflow


def check_simulatable(workflow: Workflow) -> None:
    """Refuse, naming the stage, what the simulation cannot stand in for."""
    from orchestrator.engine.kinds import KINDS, stage_kind

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


def simulate_workflow(
    workflow: Workflow,
    backend: Backend,
    run_dir: Path,
    *,
    fsync: bool = False,
    on_progress: Callable[[Any], None] | None = None,
) -> dict[str, Any]:
    """Run ``workflow``'s stages with the real StageScheduler on ``backend``.

    Journals into ``run_dir`` as ``nestor run`` does (``fsync=False`` skips the
    journal's fsyncs: a simulation has nothing to lose in a crash; with them on,
    the journal's writer thread fsyncs events in groups beside the loop). Returns the results, as
    ``run_workflow`` does, plus ``virtual_time_s`` (the backend's clock) and
    ``driver_s`` (real seconds the run took). The backend is shut down at
    the end; its ledger stays readable. A stop request (or a simulated
    allocation's time limit) raises :class:`~orchestrator.engine.stopping.Interrupted`
    after journalling it, as ``nestor run`` does.
    """
    check_simulatable(workflow)
    run_dir = Path(run_dir)
    if (run_dir / JOURNAL_FILE).exists():
        raise RunError(f"{run_dir} already holds a workflow run; simulate into a new directory")
    run_dir.mkdir(parents=True, exist_ok=True)
    journal = Journal(run_dir / JOURNAL_FILE, fsync=fsync)
    began, clock0 = time.perf_counter(), backend.now()
    try:
        run_key = uuid.uuid4().hex
        journal.record(WorkflowStarted(workflow=workflow.name, slots=backend.slots,
                                       pid=os.getpid(), run_key=run_key,
                                       backend=type(backend).__name__))
        scheduler = StageScheduler(workflow, run_dir=run_dir, backend=backend, journal=journal,
                                   events=read_events(run_dir / JOURNAL_FILE),
                                   on_progress=on_progress)
        summaries = scheduler.run()
        results: dict[str, Any] = {
            "workflow": workflow.name, "run_dir": str(run_dir), "slots": backend.slots,
            "stages": [summaries[name] for name in workflow.order()],
            "n_runs": sum(summaries[name]["n_runs"] for name in summaries),
            "slot_seconds": round(sum(summaries[n]["slot_seconds"] for n in summaries), 3),
            "virtual_time_s": backend.now() - clock0,
            "driver_s": time.perf_counter() - began,
        }
        # Unindented: json's C encoder writes 230,000 trials' summary in a second,
        # where indent=2 (pure Python) took minutes of the driver's CPU.
        write_atomic(run_dir / RESULTS_FILE, json.dumps(results, default=str))
        journal.record(WorkflowFinished())
        return results
    except Interrupted as exc:  # a stop request, or a simulated allocation's time limit
        journal.record(WorkflowInterrupted(reason=exc.reason))
        exc.run_dir = run_dir
        raise
    finally:
        journal.close()
        backend.shutdown()


def simulated_trial(config: Mapping[str, Any], ctx: Any) -> dict[str, float]:
    """The function trainer a simulated spec names; a simulation never calls it.

    A spec written for the simulator says ``trainer: {function:
    "orchestrator.simulate:simulated_trial"}``; run for real, it stops at once
    with this message instead of training nothing.
    """
    raise RuntimeError(
        "orchestrator.simulate:simulated_trial stands in for a trainer in simulated"
        " workflows (orchestrator.simulate.simulate_workflow); give a real trainer to run"
        " this spec on a cluster"
    )
