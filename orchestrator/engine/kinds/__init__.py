"""Stage kinds: each is one module here and one line in :data:`KINDS`.

A kind says how its stage runs (its runner: which trials, drawn from what, and
what its summary keeps of them) and the spec checks that span several of its
fields. How a finished stage is reported (its product, the lines ``nestor
results`` prints, its tables, plots, MLflow headline metrics and the model
``nestor predict`` loads) is the kind's report, the module of the same name in
``orchestrator/projections/kinds``. Everything else (the journal, retries,
gangs, the projector, MLflow) is the same for every kind, so nothing outside
these two packages asks which kind a stage is: it asks the kind.

A new kind is a module here that defines a :class:`StageKind` subclass and
what it adds to its trials (a :class:`~orchestrator.engine.trials.KindTrials`, held
by the :class:`~orchestrator.engine.trials.TrialRunner` that runs them), an entry
in :data:`KINDS`, its report (a module in
``orchestrator/projections/kinds``), and the kind's fields in the spec
(``orchestrator/spec/model.py``, a pydantic model in the ``Stage`` union).

Modules load on first use, so validating a spec or printing results does
not import what running a stage needs.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from orchestrator.engine.trials import TrialRunner

# kind name -> the module that defines it (as ``KIND``)
KINDS: dict[str, str] = {
    "hpo": "orchestrator.engine.kinds.hpo",
    "ensemble": "orchestrator.engine.kinds.ensemble",
    "transfer": "orchestrator.engine.kinds.transfer",
    "train": "orchestrator.engine.kinds.train",
}

Finding = tuple[tuple[Any, ...], str]  # (where in the spec, what is wrong)


class StageError(Exception):
    """A stage cannot run on what its sources produced; the message says why."""


class StageKind:
    """One kind of stage. Subclasses set ``name`` and override what differs. A kind
    keeps its own results in the stage summary under its name (``summary["transfer"]``),
    which its report (``orchestrator/projections/kinds``) reads."""

    name: ClassVar[str]
    # Its trials come from a search, so its best trial is its product and
    # other stages (an ensemble) may draw members from it.
    searches: ClassVar[bool] = False
    # The simulated backend can run it (its trials need no real outputs).
    simulated: ClassVar[bool] = False

    def runner(self, workflow: Any, stage: Any, sources: list[dict[str, Any]],
               **kwargs: Any) -> TrialRunner:
        """The stage's runner, holding the kind's part; ``sources`` are the summaries
        of its ``from:`` stages."""
        raise NotImplementedError

    def check(self, workflow: Any, here: tuple[Any, ...], stage: Any) -> Iterator[Finding]:
        """Spec errors that span several fields or stages (pydantic checks the rest)."""
        return iter(())


def stage_kind(name: str) -> StageKind:
    """The kind called ``name`` (a KeyError names the known kinds)."""
    if name not in KINDS:
        raise KeyError(f"unknown stage kind {name!r} (known: {', '.join(KINDS)})")
    kind: StageKind = importlib.import_module(KINDS[name]).KIND
    return kind
