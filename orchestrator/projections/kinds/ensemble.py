"""The ensemble stage's report: the ensemble is the product, its best member
the baseline; one row per member is its detail, and ``nestor predict`` loads
the members with their weights."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from nestor.orchestrator.engine.kinds.summaries import EnsembleSummary
from nestor.orchestrator.journal.safe import inside
from nestor.orchestrator.journal.state import RunState
from nestor.orchestrator.projections.kinds import KindReport, NoModel, PlotMaker
from nestor.orchestrator.projections.products import Product
from nestor.orchestrator.projections.tables import Report, fmt


class EnsembleReport(KindReport):
    name = "ensemble"
    combines = True

    def product(self, summary: dict[str, Any]) -> Product:
        ensemble = _ensemble(summary)
        if ensemble is None:
            return Product("no ensemble (no member completed)", "val_accuracy", None, None)
        members = ensemble.members
        best = max(members, key=lambda m: m.val_value or 0.0, default=None)
        named = f" ({best.id})" if best else ""
        combine = f" ({ensemble.combine})" if ensemble.combine else ""
        return Product(f"ensemble of {len(members)}{combine}", "val_accuracy",
                       ensemble.val_value, ensemble.test_value,
                       f"best member{named}", ensemble.best_member_test_value)

    def checkpoint(self, summary: dict[str, Any]) -> str | None:
        """Its best member's (the ensemble itself is ensemble.json and the members)."""
        return (summary.get("best") or {}).get("checkpoint")

    def lines(self, summary: dict[str, Any]) -> list[str]:
        e, name = _ensemble(summary), summary["name"]
        if e is None:
            return [f"{name}: {summary.get('stop_reason')}"]
        weights = ", ".join(f"{m.id} {m.weight:.2f}" for m in e.members)
        return [f"{name}: ensemble ({e.combine}) test {fmt(e.test_value)} against its"
                f" best member's {fmt(e.best_member_test_value)} and the members' mean"
                f" {fmt(e.mean_member_test_value)}; weights {weights}"]

    def detail(self, report: Report, summary: dict[str, Any], objectives: list[Any]) -> None:
        """One row per member (the ensemble's own figures are the product's)."""
        ensemble = _ensemble(summary)
        if ensemble is None:
            return super().detail(report, summary, objectives)
        report.facts.append(("members' mean: test accuracy",
                             fmt(ensemble.mean_member_test_value)))
        members = ensemble.members
        names = sorted({k for m in members for k in (m.config or {})})
        report.columns = ["member", "seed", "weight", "validation", "test", *names,
                          "checkpoint"]
        for member in members:
            config = member.config or {}
            report.rows.append([
                fmt(member.id), fmt(member.seed), fmt(member.weight),
                fmt(member.val_value), fmt(member.test_value),
                *[fmt(config.get(n)) for n in names], fmt(member.checkpoint),
            ])
        report.caption = f"{len(members)} members"

    def plots(self, summary: dict[str, Any], stage: Any, objectives: list[Any],
              state: RunState, run_dir: Path) -> list[PlotMaker]:
        from nestor.orchestrator.projections.plots import plot_ensemble

        return self.summary_plot(summary, run_dir, plot_ensemble)

    def model(self, run_dir: Path, summary: dict[str, Any]) -> tuple[list[Path], list[float]]:
        """The members with a weight, weights summing to one."""
        from nestor.orchestrator.engine.kinds.ensemble import ensemble_file  # loaded when asked

        path = ensemble_file(run_dir, summary["name"])
        if not path.exists():
            raise NoModel(f"stage {summary['name']!r} made no ensemble"
                          f" ({summary.get('stop_reason')})")
        members = [m for m in json.loads(path.read_text())["members"] if m["weight"] > 0]
        if not all((run_dir / m["checkpoint"]).is_file() for m in members):
            raise NoModel(f"stage {summary['name']!r} is an ensemble of a function or command"
                          " trainer's models, which nestor predict cannot load (it loads"
                          " built-in trainers'); each member's predictions are in its"
                          " checkpoint folder's predictions.npz")
        total = sum(m["weight"] for m in members)
        return [inside(run_dir, m["checkpoint"]) for m in members], [m["weight"] / total
                                                               for m in members]


def _ensemble(summary: dict[str, Any]) -> EnsembleSummary | None:
    """What the ensemble kind kept in the summary; None where it made no ensemble."""
    kept = summary.get("ensemble")
    return EnsembleSummary.from_json(kept) if kept else None


REPORT = EnsembleReport()
