"""How many trials at once a stage's search plans for (its width), and where that came from.

``algorithm: auto`` picks by width (``search.choose_search``: its rules for 16, 64 and
256 at once), and the search it picks sizes itself by it. A spec that sets
``search.parallel`` plans for that; otherwise the search plans for the trials the
stage can run at once: the slots it runs on (``resources.slots``, ``--slots``, the
cluster's at ``--address``) over the ranks of one trial (``parallel:``, or the
planner's shape for ``parallel: auto``). ``nestor validate`` works it out for the
slots it plans on; a run, for its backend's (``orchestrator.engine.kinds.hpo``, which
journals it, so that a resumed search keeps it).

>>> width = SearchWidth(32, "64 slots (resources.slots) / 2 ranks a trial")
>>> width.describe()
'32 trials at once (64 slots (resources.slots) / 2 ranks a trial)'
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .model import concurrent_trials

SPEC_SETS = "search.parallel"


@dataclass(frozen=True)
class SearchWidth:
    """``trials`` at once, and ``source``: where that number came from."""

    trials: int
    source: str

    def describe(self) -> str:
        plural = "trial" if self.trials == 1 else "trials"
        return f"{self.trials} {plural} at once ({self.source})"


def sized_by_width(stage: Any) -> bool:
    """Whether the stage's search takes a ``parallel`` (trials at once) the spec leaves
    out: then it plans for the width this module works out (today only ``auto``)."""
    settings = stage.search.settings() if getattr(stage, "searches", False) else {}
    return "parallel" in settings


def search_width(workflow: Any, name: str, slots: int, slots_source: str,
                 ranks: int | None = None) -> SearchWidth | None:
    """The width stage ``name``'s search plans for on ``slots`` slots (named by
    ``slots_source``), its trials of ``ranks`` ranks (default: the stage's shape on
    those slots, the planner's for ``parallel: auto``); None where its search does not
    size itself by width. Never below 1: an oversubscribed stage still runs one."""
    stage = workflow.stage(name)
    if not sized_by_width(stage):
        return None
    given = stage.search.settings()["parallel"]
    if given is not None:
        return SearchWidth(int(given), SPEC_SETS)
    if ranks is None:
        ranks = workflow.parallel_of(name, slots).ranks
    trials = max(1, concurrent_trials(slots, ranks))
    unit = "rank" if ranks == 1 else "ranks"
    return SearchWidth(trials, f"{slots} slots ({slots_source}) / {ranks} {unit} a trial")
