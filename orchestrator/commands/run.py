"""``nestor run``/``resume`` end to end: a spec file, a run directory, a Ray backend
from the factory, the MLflow projector beside the journal, and the one run path
(:func:`orchestrator.engine.workflow.run_workflow`) between them.

Benches that run a spec for real call :func:`run_spec` as the command does.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from nestor.orchestrator.backends import stopping
from nestor.orchestrator.backends.factory import make_backend
from nestor.orchestrator.engine import workflow as engine
from nestor.orchestrator.engine.adoption import check_journal_covers
from nestor.orchestrator.projections.projector import Projector


def run_spec(
    spec_path: Path | None,
    *,
    run_dir: Path | None = None,
    resume: bool = False,
    slots: int | None = None,
    address: str | None = None,
    on_progress: Callable[[Any], None] | None = None,
    on_results: Callable[[Path, dict[str, Any]], None] | None = None,
    wait_for_mlflow: Callable[[Any], None] | None = None,
    spec_text: str | None = None,
    on_event: Callable[[dict[str, Any]], None] | None = None,
) -> tuple[Path, dict[str, Any]]:
    """Run (or resume) a spec on a Ray cluster; returns the run directory and results.

    ``on_results`` is told the results as soon as they are journalled, before Ray is
    shut down and MLflow is waited for (``wait_for_mlflow(projector)``, else
    ``projector.close()``); ``on_event`` of each event journalled (a record), on the
    driver's loop: what a command says as the run goes (an auto search's width).
    ``spec_text`` is a new run's spec given as text (``nestor sweep``'s), saved as the
    run's ``spec.yaml`` only once the run directory is locked.

    The run directory's lock is held from before anything is written there until
    MLflow has been caught up: one driver per run directory."""
    run_dir, workflow, lock = engine.prepare_run_dir(spec_path, run_dir, resume,
                                                     spec_text=spec_text)
    with lock:
        if resume:  # a damaged journal, or one that lost trials whose results are on disk
            check_journal_covers(run_dir, run_dir / engine.JOURNAL_FILE)
        # MLflow, off the loop; started first, so that its store opens while Ray starts.
        projector = Projector(run_dir, workflow, warm=True)
        try:
            with stopping.starting():  # a SIGTERM while Ray starts: Interrupted, not exit 15
                backend = make_backend(workflow, run_dir, slots=slots, address=address)
        except BaseException as exc:
            projector.close(timeout_s=5)
            if isinstance(exc, stopping.Interrupted):
                exc.run_dir = run_dir
            raise

        def appended(record: dict[str, Any]) -> None:
            projector.wake()
            if on_event is not None:
                on_event(record)

        try:
            results = engine.run_workflow(
                workflow, backend, run_dir, resume=resume, on_progress=on_progress,
                on_results=on_results,
                on_append=projector.wake if on_event is None else appended)
        finally:  # what MLflow still lacks then, the next driver on run_dir sends
            (wait_for_mlflow or Projector.close)(projector)
    return run_dir, results
