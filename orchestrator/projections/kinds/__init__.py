"""How each stage kind is reported: one module here per kind, named after it
(``hpo.py`` for the hpo kind), defining ``REPORT``, a :class:`KindReport`.

A kind's report says what the stage made of its trials: its product (with the
figure it is compared against), the lines ``nestor results`` prints, the detail
table of its summary.md/html, its plots, its MLflow headline metrics and
best checkpoint, and the model ``nestor predict`` loads. How the stage runs
(its trials, what it writes into its summary) is the kind's in
``orchestrator/engine/kinds``; the reports only read the summary, the journal's
fold and the run directory, so the engine never imports them.

Modules load on first use: printing results imports no runner.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from nestor.orchestrator.engine.kinds import KINDS
from nestor.orchestrator.journal.safe import inside
from nestor.orchestrator.projections.products import Product, metric_label
from nestor.orchestrator.projections.tables import Report, fmt, trials_table

if TYPE_CHECKING:
    from nestor.orchestrator.journal.state import RunState

PlotMaker = tuple[str, Callable[[], "Path | None"]]  # (what it shows, draw it)


class NoModel(Exception):
    """A stage left nothing to predict with; the message says why."""


class KindReport:
    """One kind's reporting. Subclasses set ``name`` and override what differs;
    the defaults suit a stage whose product is one trial's model. A kind keeps
    its own results in the stage summary under its name (``summary["transfer"]``)."""

    name: ClassVar[str]
    # Its product combines several models: ``nestor predict``'s default stage.
    combines: ClassVar[bool] = False
    # Its trials come from a search: it has a best trial (``nestor best``, the Python
    # API's result) and can say which parameters mattered.
    searched: ClassVar[bool] = False

    def explained_lines(self, summary: dict[str, Any]) -> list[str]:
        """What ``nestor results`` says under the stage's trials to explain it (it reads
        the trials: never in the tables that read none)."""
        return []

    def explained(self, summary: dict[str, Any]) -> dict[str, Any]:
        """What ``nestor results --format json`` adds to explain the stage (a search's
        parameter importance and Pareto front); {} for a kind with nothing to add."""
        return {}

    def product(self, summary: dict[str, Any]) -> Product:
        """What the stage made, with the figure it is compared against."""
        raise NotImplementedError

    def product_trial(self, summary: dict[str, Any]) -> str | None:
        """The id of the trial whose model is the product, if one trial's is."""
        return None

    def lines(self, summary: dict[str, Any]) -> list[str]:
        """What a person wants to know of the finished stage, for ``nestor results``."""
        raise NotImplementedError

    def detail(self, report: Report, summary: dict[str, Any], objectives: list[Any]) -> None:
        """The detail table of the stage's summary.md/html: every trial, by default."""
        if summary.get("trials"):
            trials_table(report, summary["trials"], objectives)

    def plots(self, summary: dict[str, Any], stage: Any, objectives: list[Any],
              state: RunState, run_dir: Path) -> list[PlotMaker]:
        """The kind's own plots (every kind also gets its slot use); ``state`` is
        the journal's fold."""
        return []

    def summary_plot(self, summary: dict[str, Any], run_dir: Path,
                     draw: Callable[[str, Any, Path], Path | None]) -> list[PlotMaker]:
        """The one plot of what the kind keeps in the summary under its name
        (``summary[self.name]``), drawn by ``draw(stage name, that entry, path)`` into
        ``plots/STAGE.png``; none when the stage kept nothing."""
        if not summary.get(self.name):
            return []
        name = str(summary["name"])
        return [(self.name, partial(draw, name, summary[self.name],
                                    run_dir / "plots" / f"{name}.png"))]

    def headline(self, summary: dict[str, Any]) -> dict[str, Any]:
        """Metrics of the stage's MLflow run, so the runs table sorts stages by them:
        the product's, since a stage's best trial is not always what it made (a
        transfer stage's is its pretraining run)."""
        product = self.product(summary)
        return {"product_value": product.value, "product_test_value": product.test,
                "baseline_test_value": product.baseline_test}

    def checkpoint(self, summary: dict[str, Any]) -> str | None:
        """The checkpoint logged as the stage run's ``best_checkpoint``: the product's."""
        wanted = self.product_trial(summary)
        trial = next((t for t in summary.get("trials") or [] if t.get("id") == wanted), None)
        return (trial or {}).get("checkpoint")

    def model(self, run_dir: Path, summary: dict[str, Any]) -> tuple[list[Path], list[float]]:
        """Checkpoints and weights that predict like the product (``nestor predict``);
        :class:`NoModel` where there are none."""
        checkpoint = self.checkpoint(summary)
        if not checkpoint or not Path(checkpoint).is_file():
            raise NoModel(f"stage {summary.get('name')!r} has no saved model to predict"
                          " with (nestor predict loads built-in trainers' models, not a"
                          " function or command trainer's folder; or its trials failed)")
        return [inside(run_dir, checkpoint)], [1.0]  # results.json is data: not a way out


def kind_report(name: str) -> KindReport:
    """The report of the kind called ``name`` (a KeyError names the known kinds)."""
    if name not in KINDS:
        raise KeyError(f"unknown stage kind {name!r} (known: {', '.join(KINDS)})")
    report: KindReport = importlib.import_module(f"{__name__}.{name}").REPORT
    return report


def report_of(summary: dict[str, Any]) -> KindReport:
    """The report of a stage's summary's kind (results.json; an old one without
    ``kind`` is hpo)."""
    return kind_report(str(summary.get("kind") or "hpo"))


def stage_product(stage: dict[str, Any]) -> Product:
    """The product of a stage's summary, as its kind's report names it."""
    return report_of(stage).product(stage)


def stage_report(summary: dict[str, Any], objectives: list[Any] | None = None) -> Report:
    """The report for any stage kind; the detail table depends on the kind."""
    kind = summary.get("kind", "?")
    report = Report(f"stage {summary.get('name', '?')} ({kind})")
    for label, key in (("trials", "n_trials"), ("runs (attempts)", "n_runs"),
                       ("failed", "n_failed"), ("pruned", "n_pruned"),
                       ("stopped at the wall budget", "n_stopped"),
                       ("slot-seconds", "slot_seconds"), ("wall time s", "wall_time_s"),
                       ("time to threshold s", "time_to_threshold_s"),
                       ("stopped because", "stop_reason")):
        if key in summary:
            report.facts.append((label, fmt(summary[key])))
    product = stage_product(summary)
    report.facts.append(("product", product.what))
    report.facts.append((f"its {metric_label(summary, product.metric)}", fmt(product.value)))
    report.facts.append(("its test accuracy", fmt(product.test)))
    if product.baseline:
        report.facts.append((f"{product.baseline}: test accuracy", fmt(product.baseline_test)))
    report_of(summary).detail(report, summary, objectives or [])
    return report
