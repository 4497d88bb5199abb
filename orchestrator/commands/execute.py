"""Running a spec as `nestor run`/`resume`/`sweep` do, for the CLI and the Python API
alike: the run path (:func:`orchestrator.commands.run.run_spec`) with the progress
bars, what an auto search says as it is sized, the wait for MLflow, and every way a
run can fail turned into the same messages and exit statuses (:class:`RunFailed`),
which the CLI prints and exits with and the API raises as its one exception."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from nestor.orchestrator.commands.console import EXIT_DISK_FULL, EXIT_SPEC_ERROR
from nestor.orchestrator.journal.status import TrialStatus


class RunFailed(Exception):
    """A run that could not start or go on: ``problems`` (one message each), the
    command's exit status, and whether they are errors (else a plain notice: a
    stop request, with how to continue)."""

    def __init__(self, problems: list[str], code: int, *, errors: bool = True,
                 run_dir: Path | None = None) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems
        self.code = code
        self.errors = errors
        self.run_dir = run_dir


def execute(spec: Path | None, *, run_dir: Path | None, resume: bool, slots: int | None,
            address: str | None, err: Any, spec_text: str | None = None,
            reopen: dict[str, Any] | None = None,
            on_results: Callable[[Path, dict[str, Any]], None] | None = None,
            function_code: dict[str, bytes] | None = None, verbosity: int = 0,
            ) -> tuple[Path, dict[str, Any]]:
    """Run (or resume) a spec showing its progress on the console ``err``; returns the
    run directory and results. ``on_results`` is told them as soon as they are
    journalled (the progress bars stopped first); a failure raises RunFailed.

    ``verbosity`` (``-q``/``-v``): -1 shows nothing on ``err`` as the run goes (no
    progress bar, no notices, no MLflow wait: the failure is raised, the results are
    the caller's to print); 1 adds a line as each trial starts, ends or fails and as
    each stage starts and ends (:func:`orchestrator.commands.progress.event_line`)."""
    os.environ.setdefault("MLFLOW_LOGGING_LEVEL", "WARNING")  # its schema-migration chatter
    # MLflow's process first, loading while the driver imports and reads the spec; a
    # run that never gets to use it (its spec refused) ends it (discard_prestarted).
    from nestor.orchestrator.projections.projector_process import discard_prestarted, prestart

    prestart()
    from nestor.orchestrator.backends import ClusterError
    from nestor.orchestrator.backends.ray.visibility import RunDirNotShared
    from nestor.orchestrator.backends.stopping import Interrupted, exit_code, install_handlers
    from nestor.orchestrator.backends.stopping import clear as clear_stop
    from nestor.orchestrator.commands.progress import StageProgress, event_line, wait_for_mlflow
    from nestor.orchestrator.commands.run import run_spec
    from nestor.orchestrator.commands.summary import sized_lines
    from nestor.orchestrator.engine.workflow import RunError
    from nestor.orchestrator.journal.events import SearchSized, parse
    from nestor.orchestrator.journal.journal import DamagedRun
    from nestor.orchestrator.spec import SpecError

    clear_stop()
    install_handlers()
    if verbosity < 0:  # a console of its own: the caller's still prints the errors
        from nestor.orchestrator.commands.console import console

        err = console(stderr=True)
        err.quiet = True

    def say(record: dict[str, Any]) -> None:
        """What the run says as it goes: an auto search's pick and width, as built;
        verbose, each trial and stage as it starts and ends."""
        if verbosity > 0:
            line = event_line(record)
            if line is not None:
                err.print(line, soft_wrap=True)
        if record.get("event") == SearchSized.kind:  # the others unparsed: this is per event
            event = parse(record)
            assert isinstance(event, SearchSized)
            for line in sized_lines(event):
                err.print(line, soft_wrap=True)

    quiet_logs = _DriverWarnings(shown=verbosity >= 0)
    try:
        with quiet_logs, StageProgress(err) as progress:
            def show(done_dir: Path, results: dict[str, Any]) -> None:
                progress.progress.stop()
                if on_results is not None:
                    on_results(done_dir, results)

            try:
                return run_spec(
                    spec, run_dir=run_dir, resume=resume, slots=slots, address=address,
                    on_progress=progress.update, on_results=show, spec_text=spec_text,
                    wait_for_mlflow=lambda projector: wait_for_mlflow(projector, err),
                    on_event=say, reopen=reopen, function_code=function_code,
                    on_accepted=lambda line: err.print(line, soft_wrap=True),
                )
            finally:
                discard_prestarted()
    except SpecError as exc:
        raise RunFailed([str(p) for p in exc.problems], EXIT_SPEC_ERROR) from None
    except (RunError, ClusterError, RunDirNotShared, DamagedRun) as exc:
        raise RunFailed([str(exc)], EXIT_SPEC_ERROR, run_dir=run_dir) from None
    except OSError as exc:
        from nestor.orchestrator.journal.journal import disk_full_message

        message = disk_full_message(exc, run_dir)
        if message is None:
            raise
        raise RunFailed([str(message)], EXIT_DISK_FULL, run_dir=run_dir) from None
    except Interrupted as exc:
        stopped_in = exc.run_dir or run_dir
        where = f" {stopped_in}" if stopped_in else ""
        raise RunFailed([f"stopped on {exc.reason}; finished trials are journalled."
                         f" Continue with: nestor resume{where}"], exit_code(exc.reason),
                        errors=False, run_dir=stopped_in) from None


class _DriverWarnings:
    """A quiet run (``-q``) hides the driver's own warnings (``nestor`` loggers: "going
    on with stage ..."), errors still shown; restored afterwards."""

    def __init__(self, shown: bool) -> None:
        import logging

        self.logger = logging.getLogger("nestor")
        self.shown = shown
        self.level = self.logger.level

    def __enter__(self) -> None:
        import logging

        if not self.shown:
            self.logger.setLevel(logging.ERROR)

    def __exit__(self, *exc: object) -> None:
        self.logger.setLevel(self.level)


def stages_without_result(results: dict[str, Any], run_dir: Path) -> list[str]:
    """One line per stage whose every trial failed: a script, or a Slurm job's
    state, must not read such a run as a success."""
    lines = []
    for stage in results["stages"]:
        trials = stage.get("trials") or []
        if trials and all(t.get("status") == TrialStatus.FAILED for t in trials):
            reason = next((t["reason"] for t in trials if t.get("reason")), "no reason recorded")
            lines.append(
                f"stage {stage['name']}: all {len(trials)} trials failed; the first said:"
                f" {reason} (`nestor results {run_dir}` lists every trial)"
            )
    return lines
