"""The width a running stage's search is built for: the trials it can run at once.

Where the spec leaves ``search.parallel`` out, a search that sizes itself by width
(``algorithm: auto``: its pick and the pick's population) plans for the backend's
slots over the ranks of one of the stage's trials (``orchestrator.spec.width``).
That width is journalled (``SearchSized``) before the search's first ask, and a
resumed driver builds the search at the journalled width whatever slots it has
now: the search's state on disk is the state of the search that width picked.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from nestor.orchestrator.journal.events import Event, SearchLogged, SearchSized
from nestor.orchestrator.spec import concurrent_trials
from nestor.orchestrator.spec.width import SearchWidth, search_width, sized_by_width

BEFORE_WIDTHS = "what nestor planned for before it read the slots"


def kept_width(stage: Any, mine: Iterable[Event]) -> SearchWidth | None:
    """The width a resumed stage's search was built for (None: a new search, or one
    that does not size itself by width): the first journalled; a search that asked
    before widths were journalled planned for 1 unless its spec said otherwise."""
    if not sized_by_width(stage):
        return None
    asked = False
    for event in mine:
        if isinstance(event, SearchSized):
            return SearchWidth(event.width, event.source)
        asked = asked or isinstance(event, SearchLogged)
    if not asked:
        return None
    given = stage.search.settings()["parallel"]
    return SearchWidth(int(given), "search.parallel") if given else SearchWidth(1, BEFORE_WIDTHS)


def run_width(runner: Any) -> SearchWidth | None:
    """The width the stage's search plans for on this backend: its slots over the
    ranks of the stage's next trial (for ``parallel: auto``, the planner's shape)."""
    backend = runner.backend
    return search_width(runner.workflow, runner.stage.name, backend.slots,
                        backend.slots_source, runner.shape.ranks)


def sized_event(runner: Any, width: SearchWidth, resumed: bool) -> SearchSized:
    """The journal's record of the width the search was built for, what it picked
    there, and, for a resumed driver, the trials its own slots run at once."""
    choice = getattr(runner.searcher, "auto_choice", None)
    pick = choice.label() if choice is not None else str(runner.stage.search.algorithm)
    at_once = concurrent_trials(runner.backend.slots, runner.shape.ranks) if resumed else None
    return SearchSized(stage=runner.stage.name, width=width.trials, source=width.source,
                       pick=pick, why=choice.reason if choice is not None else "",
                       resumed_at=at_once)
