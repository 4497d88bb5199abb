"""Run a workflow spec in a run directory, from the start or resumed.

A run directory is self-contained: the spec as given (``spec.yaml``), the
journal, each stage's searcher state, checkpoints, trainer logs, plots,
``results.json`` and, by default, the MLflow store. ``resume`` needs nothing
but the directory.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from orchestrator.journal import Journal, read_events, write_atomic
from orchestrator.spec import HpoStage, Workflow, load_spec
from orchestrator.stopping import Interrupted, reinstall_handlers

SUPPORTED_KINDS = ("hpo",)
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


def check_supported(workflow: Workflow) -> None:
    for stage in workflow.stages:
        if stage.kind not in SUPPORTED_KINDS:
            raise RunError(
                f"stage {stage.name!r} is of kind {stage.kind!r}, which this version cannot run"
                f" yet (it runs: {', '.join(SUPPORTED_KINDS)}); `nestor validate` plans it"
            )


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

        ray.init(
            num_cpus=max(wanted or default_slots(), 1),
            include_dashboard=False,
            log_to_driver=False,
            configure_logging=False,
        )
    elif not ray.is_initialized():
        ray.init(address=address, log_to_driver=False, configure_logging=False)
    resources = ray.cluster_resources()
    available = int(resources.get("GPU", 0)) or int(resources.get("CPU", 0))
    if wanted is not None and wanted > available and not workflow.resources.oversubscribe:
        raise RunError(
            f"the workflow asks for {wanted} slots but the Ray cluster has {available}"
        )
    return wanted or available


def run_workflow(
    spec_path: Path | None,
    *,
    run_dir: Path | None = None,
    resume: bool = False,
    slots: int | None = None,
    address: str | None = None,
    on_progress: Callable[[Any], None] | None = None,
) -> tuple[Path, dict[str, Any]]:
    """Run (or resume) a workflow; returns the run directory and its results."""
    import ray

    from orchestrator.artifacts import publish_stage
    from orchestrator.gangs import GangPool
    from orchestrator.hpo import HpoRunner
    from orchestrator.tracking import Tracker

    run_dir, workflow = prepare_run_dir(spec_path or Path(), run_dir, resume)
    check_supported(workflow)
    started_ray = not ray.is_initialized()
    total = cluster_slots(workflow, slots, address)
    reinstall_handlers()
    events = read_events(run_dir / JOURNAL_FILE)
    journal = Journal(run_dir / JOURNAL_FILE)
    tracker = Tracker(
        run_dir, workflow.tracking.experiment or workflow.name, workflow.tracking.uri
    )
    pool = GangPool(total, oversubscribe=workflow.resources.oversubscribe,
                    use_gpu=bool(ray.cluster_resources().get("GPU")))
    results: dict[str, Any] = {"workflow": workflow.name, "run_dir": str(run_dir),
                               "slots": total, "stages": []}
    started = time.time()
    try:
        if not events:
            journal.append("workflow_started", workflow=workflow.name, slots=total,
                           pid=os.getpid())
        else:
            journal.append("workflow_resumed", slots=total, pid=os.getpid())
        for name in workflow.order():
            stage = workflow.stage(name)
            done = [e for e in events if e["event"] == "stage_finished" and e["stage"] == name]
            if done:
                results["stages"].append(done[-1]["summary"])
                continue
            assert isinstance(stage, HpoStage)
            begun = [e for e in events if e["event"] == "stage_started" and e["stage"] == name]
            if begun:
                stage_run = begun[0]["run_id"]
            else:
                stage_run = tracker.start_run(
                    name, tags={"nestor.stage": name, "nestor.kind": stage.kind,
                                "nestor.run_dir": str(run_dir.resolve())}
                )
                journal.append("stage_started", stage=name, run_id=stage_run)
            runner = HpoRunner(
                workflow, stage, run_dir=run_dir, pool=pool, journal=journal,
                tracker=tracker, stage_run_id=stage_run, on_progress=on_progress,
            )
            runner.restore(events)
            runner.run()
            summary = runner.summary()
            publish_stage(tracker, stage_run, summary, stage, run_dir)
            tracker.set_tags(stage_run, {"nestor.n_runs": summary["n_runs"],
                                         "nestor.stop_reason": summary["stop_reason"]})
            tracker.finish(stage_run, "FINISHED")
            journal.append("stage_finished", stage=name, summary=summary)
            results["stages"].append(summary)
        results["wall_time_s"] = round(time.time() - started, 3)
        write_atomic(run_dir / RESULTS_FILE, json.dumps(results, indent=2, default=str))
        journal.append("workflow_finished")
        return run_dir, results
    except Interrupted as exc:
        journal.append("workflow_interrupted", reason=exc.reason)
        exc.run_dir = run_dir
        raise
    finally:
        journal.close()
        pool.shutdown()
        if started_ray:
            ray.shutdown()
