"""What every `nestor` command prints with, and the exit statuses they share.

Apart from ``orchestrator.commands.cli`` so that commands defined in their own
modules (``commands.submit``) use them without importing the CLI that registers
them: the imports run one way.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from nestor.orchestrator.journal.status import StageStatus

if TYPE_CHECKING:
    from rich.console import Console
    from rich.text import Text

EXIT_NO_RESULT = 1  # the run ended, but a stage has not one completed trial
EXIT_SPEC_ERROR = 2
EXIT_DISK_FULL = 75  # EX_TEMPFAIL: try again (nestor resume) once there is space
PRIVATE_UMASK = 0o077  # run-directory files 0600, folders 0700


@contextlib.contextmanager
def private_files() -> Iterator[None]:
    """What a command makes is its user's alone: every file 0600 and folder 0700 (a
    umask of 077): the run directory and what its driver and trials write there (the
    ranks inherit it), since a run directory holds the spec's environment values,
    checkpoints and logs, and lives in project spaces other users can read.
    Restored afterwards."""
    previous = os.umask(PRIVATE_UMASK)
    try:
        yield
    finally:
        os.umask(previous)


def console(stderr: bool = False, markup: bool = False) -> Console:
    """A rich console; 120 columns when not a terminal, so logs keep tables whole.

    Text is printed as it is: names, paths and values come from users (a spec's
    name, a run directory, a categorical value), and read as rich markup a ``[red]``
    in them would vanish and a ``[/x]`` would crash the command after its work was
    done. Styling is given as ``rich.text.Text`` (``print_errors``), or by a command
    whose every user string is escaped asking for ``markup=True``."""
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    width = None if stream.isatty() else 120
    return Console(file=stream, width=width, highlight=False, soft_wrap=False,
                   markup=markup, emoji=False)


def styled(*parts: str | tuple[str, str]) -> Text:
    """Text of plain strings and (string, style) pairs, printed literally."""
    from rich.text import Text

    return Text.assemble(*parts)


def print_errors(err: Console, problems: Sequence[object]) -> None:
    for problem in problems:
        err.print(styled(("error", "bold red"), f": {problem}"), soft_wrap=True)


def run_status(run_dir: Path, interrupted_hint: str | None = None) -> None:
    from rich.table import Table

    from nestor.orchestrator.journal.journal import DamagedRun
    from nestor.orchestrator.projections.status import workflow_status

    try:
        info = workflow_status(run_dir)
    except (FileNotFoundError, DamagedRun) as exc:
        print_errors(console(stderr=True), [exc])
        sys.exit(EXIT_SPEC_ERROR)
    out = console()
    driver = f", driver pid {info['driver_pid']}" if info["driver_pid"] else ""
    out.print(f"{run_dir}: {info['state']}{driver}; last event {info['last_event_age_s']} s ago")
    table = Table(box=None, header_style="bold")
    walled = any(stage.get("stopped") for stage in info["stages"])  # a wall budget's stops
    for column in ("stage", "state", "completed", "failed", *(["stopped"] if walled else []),
                   "running"):
        table.add_column(column)
    for stage in info["stages"]:
        table.add_row(stage["name"], stage["state"], str(stage["completed"]),
                      str(stage["failed"]), *([str(stage.get("stopped", 0))] if walled else []),
                      str(stage["running"]))
    out.print(table)
    if walled:
        out.print("stopped: trials stopped at their stage's wall budget (search.budget.wall;"
                  f" `nestor results {run_dir}` says why each stage stopped)", soft_wrap=True)
    failed = [stage["name"] for stage in info["stages"] if stage["state"] == StageStatus.FAILED]
    if failed:
        out.print(f"every trial of {', '.join(failed)} failed; `nestor results {run_dir}`"
                  " lists each with its reason", soft_wrap=True)
    if info["state"] == StageStatus.INTERRUPTED:
        out.print(f"continue with: {interrupted_hint or f'nestor resume {run_dir}'}",
                  soft_wrap=True)


def verbosity_options(fn: Any) -> Any:
    """``-q/--quiet`` and ``-v/--verbose`` for a command that runs something; the
    command gets ``verbosity``: -1 quiet, 0 default, 1 verbose (see :func:`verbosity`)."""
    fn = click.option("-v", "--verbose", "verbose", is_flag=True,
                      help="Say more: a line as each trial starts, ends or fails (its"
                      " configuration, value, slot-seconds, why it failed) and as each stage"
                      " starts and ends.")(fn)
    return click.option("-q", "--quiet", "quiet", is_flag=True,
                        help="No progress bar or notices: only errors and the final"
                        " summary.")(fn)


def verbosity(quiet: bool, verbose: bool) -> int:
    """-1 (quiet), 0 or 1 (verbose); both at once is a usage error."""
    if quiet and verbose:
        raise click.UsageError("give at most one of -q/--quiet and -v/--verbose")
    return -1 if quiet else 1 if verbose else 0
