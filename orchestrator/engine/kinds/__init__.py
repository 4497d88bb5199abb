"""Stage kinds: each is one module here, named like the kind of stage it runs.

A kind says how its stage runs (its runner: which trials, drawn from what, and
what its summary keeps of them). What the spec knows of a kind (its fields,
whether its trials come from a search, its checks that span several fields) is
its model in ``orchestrator/spec/model.py``. How a finished stage is reported
(its product, the lines ``nestor results`` prints, its tables, plots, MLflow
headline metrics and the model ``nestor predict`` loads) is the kind's report,
the module of the same name in ``orchestrator/projections/kinds``. Everything
else (the journal, retries, gangs, the projector, MLflow) is the same for every
kind, so nothing outside these packages asks which kind a stage is: it asks the
kind.

A new kind is its model in the spec (a pydantic model in the ``Stage`` union),
a module here, named like the kind, that defines a :class:`StageKind` subclass
(as ``KIND``) and what it adds to its trials (a
:class:`~orchestrator.engine.trials.KindTrials`, held by the
:class:`~orchestrator.engine.trials.TrialRunner` that runs them), and its report
(a module in ``orchestrator/projections/kinds``); :data:`KINDS` lists a module
for each kind the spec accepts.

Modules load on first use, so validating a spec or printing results does
not import what running a stage needs.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any, ClassVar

from nestor.orchestrator.spec.model import STAGE_KINDS

if TYPE_CHECKING:
    from nestor.orchestrator.engine.trials import TrialRunner

# kind name -> the module that defines it (as ``KIND``): one for each kind of stage
# the spec accepts
KINDS: dict[str, str] = {name: f"{__name__}.{name}" for name in STAGE_KINDS}


class StageError(Exception):
    """A stage cannot run on what its sources produced; the message says why."""


class StageKind:
    """One kind of stage. Subclasses set ``name`` and override what differs. A kind
    keeps its own results in the stage summary under its name (``summary["transfer"]``),
    which its report (``orchestrator/projections/kinds``) reads."""

    name: ClassVar[str]  # a kind of stage the spec accepts (orchestrator.spec.model.STAGE_KINDS)
    # The simulated backend can run it (its trials need no real outputs).
    simulated: ClassVar[bool] = False

    def runner(self, workflow: Any, stage: Any, sources: list[dict[str, Any]],
               **kwargs: Any) -> TrialRunner:
        """The stage's runner, holding the kind's part; ``sources`` are the summaries
        of its ``from:`` stages."""
        raise NotImplementedError


def stage_kind(name: str) -> StageKind:
    """The kind called ``name`` (a KeyError names the known kinds)."""
    if name not in KINDS:
        raise KeyError(f"unknown stage kind {name!r} (known: {', '.join(KINDS)})")
    kind: StageKind = importlib.import_module(KINDS[name]).KIND
    return kind
