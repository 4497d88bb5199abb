"""Reading and showing a run's results.json."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import IO, Any

from rich.console import Console
from rich.table import Table

from nestor.orchestrator.journal.journal import DamagedRun
from nestor.orchestrator.journal.results_file import read_results
from nestor.orchestrator.journal.text import first_line


def load_results(run_dir: Path, lazy: bool = False) -> dict[str, Any]:
    """The run's results.json; ``lazy``: each stage's trials are parsed only when read
    (``orchestrator.journal.results_file``: the tables of a million-event run read a
    few KiB of its 200 MiB), not for writing the results out again."""
    path = run_dir / "results.json"
    if not path.exists():  # not finished (interrupted, or running): what its journal says
        from nestor.orchestrator.projections.unfinished import unfinished_results

        results = unfinished_results(run_dir)
        if results is None:
            raise FileNotFoundError(f"{run_dir} has neither results.json nor a journal of a"
                                    " run: not a nestor run directory, or its run never started")
        return results
    try:
        return read_results(path, lazy=lazy)
    except (ValueError, KeyError, TypeError) as exc:
        raise DamagedRun(f"{path} does not read as results ({first_line(exc)[:120]}): it is"
                         " damaged. Move it aside: `nestor results` then shows the run from its"
                         " journal") from None


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, list):
        return ", ".join(_fmt(v) for v in value)
    return str(value)


def render_results(console: Console, results: dict[str, Any]) -> None:
    """Two tables: what each stage produced (its product's validation value and test
    accuracy, against what it is compared with), then what each stage cost."""
    from nestor.orchestrator.projections.kinds import stage_product
    from nestor.orchestrator.projections.products import metric_label

    if results.get("unfinished"):
        why = f"interrupted ({results['interrupted']})" if results.get("interrupted") \
            else "not finished (running, or stopped)"
        console.print(f"{why}: results so far, read from its journal; `nestor resume"
                      f" {results.get('run_dir')}` finishes the run", soft_wrap=True)
    made = Table(title=f"workflow {results['workflow']}: what each stage produced",
                 title_justify="left", header_style="bold", box=None, pad_edge=False)
    for column in ("stage", "product", "metric", "value", "test acc.", "compared with",
                   "its test acc."):
        made.add_column(column, justify="right" if column in (
            "value", "test acc.", "its test acc.") else "left")
    for stage in results["stages"]:
        product = stage_product(stage)
        made.add_row(stage["name"], product.what, metric_label(stage, product.metric),
                     _fmt(product.value),
                     _fmt(product.test), product.baseline or "-", _fmt(product.baseline_test))
    console.print(made)
    cost = Table(title="what it cost (every training run counted)", title_justify="left",
                 header_style="bold", box=None)
    for column in ("stage", "trials", "runs", "failed", "slot-s", "wall s", "to threshold s"):
        cost.add_column(column, justify="left" if column == "stage" else "right")
    for stage in results["stages"]:
        cost.add_row(
            stage["name"], str(stage["n_trials"]), str(stage["n_runs"]), str(stage["n_failed"]),
            _fmt(stage["slot_seconds"]), _fmt(stage["wall_time_s"]),
            _fmt(stage.get("time_to_threshold_s")),
        )
    console.print(cost)
    for stage in results["stages"]:
        for line in stage_lines(stage):
            console.print(line)
    if "n_runs" in results:
        console.print(f"all stages: {results['n_runs']} training runs,"
                      f" {_fmt(results['slot_seconds'])} slot-s,"
                      f" {_fmt(results.get('wall_time_s'))} s from start to results")


def render_trials(console: Console, results: dict[str, Any], limit: int) -> None:
    """Each stage's trials, best first, with status and failure reason (the table of the
    stage's summary.md); ``limit`` rows a stage (0: all). Reads every trial list, so
    apart from :func:`render_results`, whose tables read none."""
    from types import SimpleNamespace

    from nestor.orchestrator.projections.kinds import report_of
    from nestor.orchestrator.projections.tables import Report, trials_table

    for stage in results["stages"]:
        trials = list(stage.get("trials") or [])
        if not trials:
            continue
        objective = stage.get("objective") or {}
        objectives = ([SimpleNamespace(metric=objective["metric"], mode=objective.get("mode"))]
                      if objective.get("metric") else [])
        report = Report(stage["name"])
        trials_table(report, trials, objectives)
        rows = report.rows if limit == 0 else report.rows[:limit]
        statuses: dict[str, int] = {}
        for trial in trials:
            statuses[str(trial.get("status"))] = statuses.get(str(trial.get("status")), 0) + 1
        counts = ", ".join(f"{n} {status}" for status, n in statuses.items())
        table = Table(title=f"stage {stage['name']}: {len(trials)} trials ({counts}), best first",
                      title_justify="left", header_style="bold", box=None)
        for column in report.columns:
            table.add_column(column, overflow="fold")
        for row in rows:
            table.add_row(*row)
        console.print(table)
        if len(rows) < len(report.rows):
            console.print(f"... and {len(report.rows) - len(rows)} more (--trials 0 lists"
                          " all; --format csv writes every trial)")
        for line in report_of(stage).explained_lines(stage):
            console.print(line, soft_wrap=True)


def with_products(results: dict[str, Any]) -> dict[str, Any]:
    """results.json with each stage's ``product`` added (for --format json)."""
    from dataclasses import asdict

    from nestor.orchestrator.projections.kinds import stage_product

    return {**results, "stages": [{**stage, "product": asdict(stage_product(stage)),
                                   **explained(stage)} for stage in results["stages"]]}


def explained(stage: dict[str, Any]) -> dict[str, Any]:
    """A stage's parameter importance and Pareto front (trial ids) where its kind has
    them (a search), for JSON."""
    from nestor.orchestrator.projections.kinds import report_of

    return report_of(stage).explained(stage)


def stage_lines(stage: dict[str, Any]) -> list[str]:
    """What a person wants to know of a finished stage, as its kind's report says it."""
    from nestor.orchestrator.projections.kinds import report_of

    return report_of(stage).lines(stage)


def write_csv(results: dict[str, Any], out: IO[str]) -> None:
    writer = csv.writer(out)
    names = sorted({k for s in results["stages"] for t in s["trials"] for k in t["config"]})
    writer.writerow(["stage", "id", "status", "value", "attempts", "slot_seconds",
                     "generation", "reason", *names])
    for stage in results["stages"]:
        for trial in stage["trials"]:
            writer.writerow([stage["name"], trial["id"], trial["status"], _fmt(trial["value"]),
                             trial["attempts"], trial["slot_seconds"], trial["generation"],
                             trial.get("reason") or "",
                             *[trial["config"].get(n, "") for n in names]])
