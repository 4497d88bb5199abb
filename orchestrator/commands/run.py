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
from nestor.orchestrator.engine.reopen import ReopenError, edited_budget
from nestor.orchestrator.engine.shipped import register_constraints, save_functions
from nestor.orchestrator.projections.projector_process import start_projector
from nestor.orchestrator.spec import load_spec, load_spec_text


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
    reopen: dict[str, Any] | None = None,
    on_accepted: Callable[[str], None] | None = None,
    function_code: dict[str, bytes] | None = None,
) -> tuple[Path, dict[str, Any]]:
    """Run (or resume) a spec on a Ray cluster; returns the run directory and results.

    ``on_results`` is told the results as soon as they are journalled, before Ray is
    shut down and MLflow is waited for (``wait_for_mlflow(projector)``, else
    ``projector.close()``); ``on_event`` of each event journalled (a record), on the
    driver's loop: what a command says as the run goes (an auto search's width).
    ``spec_text`` is a new run's spec given as text (``nestor sweep``'s), saved as the
    run's ``spec.yaml`` only once the run directory is locked.

    The run directory's lock is held from before anything is written there until
    MLflow has been caught up: one driver per run directory.

    ``reopen`` (a resume): :func:`orchestrator.engine.reopen.reopenings`' keywords (a
    search's larger ``budget``, ``retry``). A resume given a spec file that differs
    from the run's own takes a larger budget of one hpo stage in it as such an
    extension, says so through ``on_accepted``, and refuses every other change.
    ``function_code``: ``__main__:NAME`` trainers' functions pickled by value (the
    Python API's), kept in the run directory once it is locked."""
    run_dir, workflow, lock = engine.prepare_run_dir(None if resume else spec_path, run_dir,
                                                     resume, spec_text=spec_text)
    if resume:
        try:
            workflow, edit = _edited(run_dir, workflow, spec_path)
        except BaseException:
            lock.release()
            raise
        if edit is not None:
            if on_accepted is not None:
                where = spec_path or run_dir / engine.SPEC_FILE
                on_accepted(f"{where} differs from the spec the run started with in stage"
                            f" {edit['stage']}'s search.budget only: accepted, its search is"
                            f" extended to {edit['budget']} trials")
            reopen = {**(reopen or {}), **edit}
    with lock:
        if function_code:
            save_functions(run_dir, function_code)
        register_constraints(run_dir, workflow)  # __main__ ones, for the driver's search
        if resume:  # a damaged journal, or one that lost trials whose results are on disk
            check_journal_covers(run_dir, run_dir / engine.JOURNAL_FILE)
        # MLflow, off the loop (in a process of its own: projections.projector_process);
        # started first, so that its store opens while Ray starts.
        projector = start_projector(run_dir, workflow)
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
                on_results=on_results, reopen=reopen,
                on_append=projector.wake if on_event is None else appended)
        finally:  # what MLflow still lacks then, the next driver on run_dir sends
            (wait_for_mlflow or type(projector).close)(projector)
    return run_dir, results


def _edited(run_dir: Path, saved: Any, spec_path: Path | None) -> tuple[Any, dict[str, Any] | None]:
    """The workflow a resume runs (the spec the run started with, as its journal holds
    it; else its spec.yaml) and the extension an edited spec asks (``spec_path``, else
    the run's spec.yaml edited in place): RunError for an edit it cannot honour."""
    text = engine.started_spec(run_dir)
    started = saved if text is None else load_spec_text(text, str(run_dir / engine.SPEC_FILE))
    edited = load_spec(spec_path) if spec_path is not None else saved
    try:
        return started, edited_budget(started, edited)
    except ReopenError as exc:
        raise engine.RunError(str(exc)) from None
