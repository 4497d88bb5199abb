"""A live progress line per stage: trials done of planned, running, failed, best."""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.text import Text

from nestor.orchestrator.journal.status import TrialStatus
from nestor.orchestrator.projections.products import objective_label

# Seconds between two redraws of one stage's line while its trials run. Each redraw
# reads every record of the stage (done, failed, best), so redrawing at every event
# grew as trials x events: 1.6 s of the driver's CPU over 1,000 trivial trials, and
# a hundred times that over 10,000. rich repaints 10 times a second at most anyway.
REDRAW_S = 0.25


class StageProgress:
    def __init__(self, console: Console, redraw_s: float = REDRAW_S) -> None:
        self.progress = Progress(
            # Stage names are the user's: shown as they are, never read as markup.
            TextColumn("{task.fields[stage]}", style="bold", markup=False),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[detail]}", markup=False),
            TimeElapsedColumn(),
            console=console,
        )
        self.tasks: dict[str, Any] = {}
        self.redraw_s = redraw_s
        self._drawn: dict[str, float] = {}  # stage -> when its line was last redrawn

    def __enter__(self) -> StageProgress:
        self.progress.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.__exit__(*exc)

    def update(self, runner: Any) -> None:
        """Redraw the stage's line, at most every ``redraw_s`` while trials still run
        (a later event redraws it); always when none runs, so the last state shows."""
        name = runner.stage.name
        now = time.monotonic()
        if runner.running and now - self._drawn.get(name, -math.inf) < self.redraw_s:
            return
        self._drawn[name] = now
        if name not in self.tasks:
            # Under a cost budget the trial count is open: the cost ends the search.
            cost = getattr(runner.searcher, "cost_budget", None)
            total = None if cost is not None else runner.searcher.planned
            self.tasks[name] = self.progress.add_task("", total=total, stage=name, detail="")
        records = runner.records.values()
        done = sum(1 for r in records if r.status != TrialStatus.RUNNING)
        failed = sum(1 for r in records if r.status == TrialStatus.FAILED)
        best = runner.searcher.best()
        first = None if best is None else (
            best.value[0] if isinstance(best.value, list | tuple) else best.value)
        best_text = "-" if first is None else f"{first:.4g}"
        objective = runner.objectives[0]
        label = objective_label(objective.metric, objective.mode)  # "fom (min)": which way
        busy = runner.backend.busy_slots
        generation = max((r.generation for r in records), default=0)
        cost = getattr(runner.searcher, "cost_budget", None)
        spent = "" if cost is None else (
            f"  spent {runner.searcher.cost_spent:.4g}/{cost.describe()}")
        self.progress.update(
            self.tasks[name],
            completed=done,
            detail=f"gen {generation}  best {label} {best_text}  running {len(runner.running)}"
            f"  failed {failed}  slots {busy}/{runner.backend.slots}{spent}",
        )


def _config(trial: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                     for k, v in (trial.get("config") or {}).items()) or "-"


def event_line(record: dict[str, Any]) -> str | None:
    """A verbose run's line for a journalled event (`-v`): a trial's start (its
    configuration), end (status, value, slot-seconds, why it failed) or failed
    attempt, a stage's start and end; None for the others."""
    kind = record.get("event")
    stage = record.get("stage")
    trial = record.get("trial") if isinstance(record.get("trial"), dict) else {}
    label = f"{stage}: trial {trial.get('id')}"
    if kind == "trial_started":
        again = f" (attempt {record['attempt']})" if record.get("attempt", 1) > 1 else ""
        return f"{label} started{again}: {_config(trial)}"
    if kind == "trial_finished":
        value = record.get("value")
        shown = f"{value:.6g}" if isinstance(value, float) else str(value)
        why = f": {record['reason']}" if record.get("reason") else ""
        return (f"{label} {record.get('status')}, value {shown},"
                f" {record.get('slot_seconds', 0.0):.1f} slot-s{why}")
    if kind == "trial_attempt_failed":
        return f"{label} attempt {record.get('attempt')} failed: {record.get('reason')}"
    if kind == "stage_started":
        return f"stage {stage} ({record.get('stage_kind')}) started"
    if kind == "stage_finished":
        return f"stage {stage} finished"
    return None


class MlflowWait:
    """What a command still waits for once it printed its results: MLflow's copy of
    the journal. Shown with counts and an estimate, on one line that a terminal
    redraws (in a log, a line every ``EVERY_S``), never a silent wait."""

    EVERY_S = 5.0

    def __init__(self, console: Console) -> None:
        self.console = console
        self._status: Any = None
        self._last: float | None = None
        self.shown = False

    def report(self, written: int, of: int, seconds_left: float | None) -> None:
        line = f"MLflow: {written:,} of {of:,} events written"
        if seconds_left is not None:
            line += f", ~{math.ceil(seconds_left):,} s"
        line_hint = "" if self.shown else " (Ctrl-C stops waiting; nothing is lost)"
        now = time.monotonic()
        if self.console.is_terminal:
            if self._status is None:
                self._status = self.console.status(Text(line + line_hint))
                self._status.start()
            else:
                self._status.update(Text(line))
        elif self._last is None or now - self._last >= self.EVERY_S:
            self.console.print(line + line_hint, soft_wrap=True)
            self._last = now
        self.shown = True

    def finish(self, left: int, of: int, run_dir: Path, *, stopped: bool, uri: str) -> None:
        """Say how the wait ended: all written, or what is left and what writes it."""
        if self._status is not None:
            self._status.stop()
        if left:
            why = "stopped waiting" if stopped else f"MLflow at {uri} stopped taking events"
            self.console.print(
                f"MLflow: {why} with {left:,} of {of:,} events not written yet; the journal"
                f" keeps them, and `nestor resume {run_dir}` or `nestor ui {run_dir}`"
                " writes them", soft_wrap=True)
        elif self.shown:
            self.console.print(f"MLflow: all {of:,} events written", soft_wrap=True)


def wait_for_mlflow(projector: Any, console: Console) -> int:
    """Close ``projector`` (``orchestrator.projections.projector.Projector``), showing the wait;
    a Ctrl-C (or any stop request) ends the wait at once. Returns the events left."""
    from nestor.orchestrator.backends.stopping import stop_requested

    shown = MlflowWait(console)
    left = projector.close(report=shown.report, stop=lambda: stop_requested() is not None)
    shown.finish(left, projector.done + left, projector.run_dir,
                 stopped=stop_requested() is not None, uri=projector.uri)
    return left
