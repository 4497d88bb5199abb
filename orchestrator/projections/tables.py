"""A stage's summary as tables people read: Markdown (diffs, terminals) and
HTML (MLflow's artifact view shows it as a page).

Both come from one ``Report`` (headline facts and a detail table, the latter
drawn by the stage's kind), so the two formats cannot disagree.
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass, field
from typing import Any

from nestor.orchestrator.journal.status import TrialStatus
from nestor.orchestrator.projections.products import objective_label


@dataclass
class Report:
    title: str
    facts: list[tuple[str, str]] = field(default_factory=list)
    columns: list[str] = field(default_factory=list)
    rows: list[list[str]] = field(default_factory=list)
    caption: str = ""


def fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return f"{value:.4g}" if math.isfinite(value) else str(value)
    if isinstance(value, list | tuple):
        return ", ".join(fmt(v) for v in value)
    return str(value)


def best_first(trials: list[dict[str, Any]], mode: str) -> list[dict[str, Any]]:
    """Completed trials by the first objective, best first, then the rest in order."""
    sign = -1.0 if mode == "max" else 1.0

    def key(trial: dict[str, Any]) -> tuple[int, float]:
        value = trial.get("value")
        first = value[0] if isinstance(value, list) and value else value
        if trial.get("status") == TrialStatus.COMPLETED and isinstance(first, int | float):
            return (0, sign * first)
        return (1, 0.0)

    return sorted(trials, key=key)


def trials_table(report: Report, trials: list[dict[str, Any]], objectives: list[Any]) -> None:
    """Every trial, best first (completed ones by the first objective), then the rest."""
    mode = objectives[0].mode if objectives else "max"
    names = sorted({k for t in trials for k in (t.get("config") or {})})
    metric = ", ".join(objective_label(o.metric, o.mode) for o in objectives) or "value"
    report.columns = ["trial", "generation", "deme", "status", metric, "attempts",
                      "slot-s", *names, "failure"]
    for trial in best_first(trials, mode):
        config = trial.get("config") or {}
        report.rows.append([
            fmt(trial.get("id")), fmt(trial.get("generation")), fmt(trial.get("deme")),
            fmt(trial.get("status")), fmt(trial.get("value")), fmt(trial.get("attempts")),
            fmt(trial.get("slot_seconds")), *[fmt(config.get(n)) for n in names],
            fmt(trial.get("reason")),
        ])
    report.caption = f"{len(trials)} trials, best first"


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def to_markdown(report: Report) -> str:
    lines = [f"# {report.title}", "", "| | |", "|---|---|"]
    lines += [f"| {_md_cell(k)} | {_md_cell(v)} |" for k, v in report.facts]
    if report.columns:
        lines += ["", f"## {report.caption}" if report.caption else "", ""]
        lines.append("| " + " | ".join(_md_cell(c) for c in report.columns) + " |")
        lines.append("|" + "---|" * len(report.columns))
        lines += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in report.rows]
    return "\n".join(lines) + "\n"


STYLE = """body{font-family:sans-serif;margin:1.5em;color:#222}
table{border-collapse:collapse;margin:.5em 0 1.5em}
th,td{border:1px solid #ccc;padding:.25em .6em;text-align:right;font-size:.9em}
th{background:#f0f0f0}td:first-child,th:first-child{text-align:left}"""


def to_html(report: Report) -> str:
    e = html.escape
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>{e(report.title)}"
             f"</title><style>{STYLE}</style></head><body><h1>{e(report.title)}</h1><table>"]
    parts += [f"<tr><th>{e(k)}</th><td>{e(v)}</td></tr>" for k, v in report.facts]
    parts.append("</table>")
    if report.columns:
        parts.append(f"<h2>{e(report.caption)}</h2><table><tr>")
        parts += [f"<th>{e(c)}</th>" for c in report.columns]
        parts.append("</tr>")
        for row in report.rows:
            parts.append("<tr>" + "".join(f"<td>{e(c)}</td>" for c in row) + "</tr>")
        parts.append("</table>")
    parts.append("</body></html>\n")
    return "".join(parts)
