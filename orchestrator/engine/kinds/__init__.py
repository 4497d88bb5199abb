"""Stage kinds: each is one module here, named like the kind of stage it runs.

A kind says how its stage runs (its runner: which trials, drawn from what) and
what the stage makes of them: its product, the lines ``nestor results``
prints, the detail table of its summary, its plots, its MLflow headline
metrics, and the model ``nestor predict`` loads. What the spec knows of a kind
(its fields, whether its trials come from a search, its checks that span several
fields) is its model in ``orchestrator/spec/model.py``. Everything else (the
journal, retries, gangs, the projector, MLflow) is the same for every kind, so
nothing outside this package asks which kind a stage is: it asks the kind.

A new kind is its model in the spec (a pydantic model in the ``Stage`` union)
and a module here, named like the kind, that defines a :class:`StageKind`
subclass (as ``KIND``) and its runner; :data:`KINDS` lists a module for each
kind the spec accepts.

Modules load on first use, so validating a spec or printing results does
not import what running a stage needs.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from orchestrator.spec.model import STAGE_KINDS

if TYPE_CHECKING:
    from orchestrator.engine.trials import TrialRunner
    from orchestrator.projections.products import Product
    from orchestrator.projections.tables import Report

# kind name -> the module that defines it (as ``KIND``): one for each kind of stage
# the spec accepts
KINDS: dict[str, str] = {name: f"{__name__}.{name}" for name in STAGE_KINDS}
PlotMaker = tuple[str, Callable[[], "Path | None"]]  # (what it shows, draw it)


class StageError(Exception):
    """A stage cannot run on what its sources produced; the message says why."""


class StageKind:
    """One kind of stage. Subclasses set ``name`` and override what differs;
    the defaults suit a stage whose product is one trial's model. A kind keeps
    its own results in the stage summary under its name (``summary["transfer"]``);
    their numbers become metrics of the stage's MLflow run."""

    name: ClassVar[str]  # a kind of stage the spec accepts (orchestrator.spec.model.STAGE_KINDS)
    # The simulated backend can run it (its trials need no real outputs).
    simulated: ClassVar[bool] = False
    # Its product combines several models: ``nestor predict``'s default stage.
    combines: ClassVar[bool] = False

    # -- running ----------------------------------------------------------------------

    def runner(self, workflow: Any, stage: Any, sources: list[dict[str, Any]],
               **kwargs: Any) -> TrialRunner:
        """The stage's runner; ``sources`` are the summaries of its ``from:`` stages."""
        raise NotImplementedError

    # -- what it made -----------------------------------------------------------------

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
        from orchestrator.projections.tables import trials_table

        if summary.get("trials"):
            trials_table(report, summary["trials"], objectives)

    def plots(self, summary: dict[str, Any], stage: Any, objectives: list[Any],
              events: list[dict[str, Any]], run_dir: Path) -> list[PlotMaker]:
        """The kind's own plots (every kind also gets its slot use)."""
        return []

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
        """Checkpoints and weights that predict like the product (``nestor predict``)."""
        from orchestrator.predict import PredictError

        checkpoint = self.checkpoint(summary)
        if not checkpoint or not Path(checkpoint).is_file():
            raise PredictError(f"stage {summary.get('name')!r} has no saved model to predict"
                               " with (function and command trainers save none; or its trials"
                               " failed)")
        return [Path(checkpoint)], [1.0]


def stage_kind(name: str) -> StageKind:
    """The kind called ``name`` (a KeyError names the known kinds)."""
    if name not in KINDS:
        raise KeyError(f"unknown stage kind {name!r} (known: {', '.join(KINDS)})")
    kind: StageKind = importlib.import_module(KINDS[name]).KIND
    return kind


def kind_of(summary: dict[str, Any]) -> StageKind:
    """The kind of a stage's summary (results.json; an old one without ``kind`` is hpo)."""
    return stage_kind(str(summary.get("kind") or "hpo"))
