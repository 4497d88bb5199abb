"""A cost budget's gate: ask while the next trial still fits, stop once none does.

Why apart from the searcher: a budget of slot-seconds, hours or epochs works the same
for every algorithm (a trial's span from the book, the spend told or estimated, the
trials still running counted as expected), and algorithms that pick what to continue
by what fits (successive halving) ask the same gate. Without a cost budget a search
has no gate (``Searcher._costs`` is None): its trial budget is its plan.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from nestor.search._budget import CostBudget, Spend
from nestor.search._records import Trial


class Costs:
    """What a search under a cost budget has spent, and whether a trial still fits."""

    def __init__(self, budget: CostBudget, trials: Mapping[str, Trial],
                 pending: Mapping[str, Trial]) -> None:
        """``trials`` and ``pending``: the book's (search/_book.py), read as they grow."""
        self.budget = budget
        self.spend = Spend(budget)
        self._trials, self._pending = trials, pending

    def size(self, trial: Trial) -> float | None:
        """The fidelity units ``trial`` trains (None: in full)."""
        if trial.budget is None:
            return None
        start = 0.0
        if trial.continue_from is not None:
            source = self._trials[trial.continue_from].budget
            start = float(source) if source is not None else 0.0
        return float(trial.budget) - start

    def fits(self, size: float | None) -> bool:
        """Whether a trial training ``size`` fits beside the spend and the pending."""
        return self.spend.fits((self.size(t) for t in self._pending.values()), size)

    def ask_within(self, ask: Callable[[int], list[Trial]],
                   next_size: Callable[[], float | None], n: int) -> list[Trial]:
        """One trial at a time while the next still fits the cost budget."""
        trials: list[Trial] = []
        while len(trials) < n and self.fits(next_size()):
            got = ask(1)
            if not got:
                break
            trials += got
        return trials

    def check(self, trial_id: str, cost: float | None) -> None:
        """Refuse a pending trial's untold cost where nothing can estimate it."""
        self.spend.check(trial_id, self.size(self._pending[trial_id]), cost)

    def record(self, trial: Trial, cost: float | None) -> None:
        self.spend.record(trial.id, self.size(trial), cost)

    def spent_reason(self, size: float | None) -> str | None:
        """Why the search ends when the next trial (training ``size``) does not fit;
        None while it does."""
        if self.fits(size):
            return None
        spend, budget = self.spend, self.budget
        return (
            f"the budget of {budget.describe()} is spent as far as a trial fits"
            f" ({budget.describe(spend.spent)} used; the next trial would need about"
            f" {budget.describe(spend.estimate(size))})")
