"""Where a stage's trials come from, as the engine sees it: a search
(``nestor.search.Searcher``) or a fixed plan (:class:`~orchestrator.engine.plan.Plan`).

:class:`TrialSource` is the ask/tell surface both have, and all the
:class:`~orchestrator.engine.trials.TrialRunner` and its parts ask of either;
:class:`LoggedSearch` is what a search adds (a log of its asks and tells, and a
snapshot of its internals), which the search log journals; a plan has neither and is
journalled whole. Both are Protocols, declared here on the engine's side: ``search/``
imports nothing of the orchestrator, so its searchers meet them by their shape, which
mypy checks (the end of this module) and ``isinstance`` tells apart at run time.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from nestor.search import Trial

__all__ = ["Best", "LoggedSearch", "TrialSource"]


class Best(Protocol):
    """A source's best trial so far with its value (a search's Observation, a plan's
    Outcome): what the summary and the progress line name."""

    @property
    def trial(self) -> Trial: ...

    @property
    def value(self) -> float: ...


class TrialSource(Protocol):
    """Trials to run, asked a few at a time and told each one's result."""

    @property
    def pending(self) -> list[Trial]:
        """Asked and not yet told, oldest first."""
        ...

    @property
    def planned(self) -> int:
        """How many trials it means to run in all."""
        ...

    @property
    def n_asked(self) -> int:
        """How many it has handed out so far."""
        ...

    @property
    def stop_reason(self) -> str | None:
        """Why it ended (None while it goes on)."""
        ...

    def ask(self, n: int = 1) -> list[Trial]:
        """Up to ``n`` trials to run now; [] while it waits (a barrier) or when done."""
        ...

    def tell(self, trial_id: str, result: Any, *, cost: float | None = None) -> object:
        """A trial's result: its value(s), or a ``search.Failure``; ``cost``: what it
        cost, for a source under a cost budget."""
        ...

    def done(self) -> bool: ...

    def best(self) -> Best | None: ...

    def state(self) -> dict[str, Any]:
        """Enough to rebuild it (``restore``): JSON."""
        ...

    def restore(self, state: dict[str, Any]) -> object: ...


@runtime_checkable
class LoggedSearch(Protocol):
    """What a search adds to a :class:`TrialSource`: its asks and tells are a log whose
    replay rebuilds it, journalled entry by entry; a snapshot of its internals shortens
    the replay on resume. Methods only, so that ``isinstance`` (which tells a search
    from a plan) reads no property: on Python 3.11 it would evaluate them."""

    def log_since(self, start: int) -> list[dict[str, Any]]:
        """The log's entries from ``start`` on."""
        ...

    def snapshot(self) -> dict[str, Any] | None:
        """Its internals now (None: it keeps none apart from its log)."""
        ...

    def state(self) -> dict[str, Any]:
        """Its log and what rebuilds it (``restore``): JSON."""
        ...

    def restore(self, state: Mapping[str, Any],
                snapshot: Mapping[str, Any] | None = None) -> int:
        """Rebuilt from ``state`` (its log in ``events``), from ``snapshot`` on where one
        is given; how many of the log's entries the snapshot covered (0: replayed all)."""
        ...




if TYPE_CHECKING:  # mypy checks that both kinds of source meet the Protocols
    from nestor.orchestrator.engine.plan import Plan
    from nestor.search import Searcher

    def _conform(plan: Plan, search: Searcher) -> tuple[TrialSource, LoggedSearch]:
        return plan, search
