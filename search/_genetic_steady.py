"""A genetic search's asynchronous schedule: breed as each result returns (steady state).

``schedule="async"`` breeds a child from the deme's current members whenever a slot
is free and inserts each result as it arrives, dropping the deme's worst, so no slot
idles behind a straggler; a "generation" is then that many results.

Why apart from the generational loop: the two schedules share the genome, the
variation and the demes, but not their rhythm: the generational loop waits at a
barrier and replaces a deme at once, this one asks and replaces one individual at a
time, with its own bookkeeping (births per deme, the deme served next, each deme's
members kept by fitness).
"""

from __future__ import annotations

import bisect
import heapq

from nestor.search._genetic_genome import Individual
from nestor.search._genetic_view import GeneticView
from nestor.search._records import Trial
from nestor.search._sampling import sample_config


class SteadyState:
    """Asks and inserts one individual at a time, for ``schedule="async"``."""

    def __init__(self, search: GeneticView) -> None:
        self.search = search
        self.births = [0] * search.demes
        self.next_deme = 0
        # Each deme's members by fitness, for the steady-state replacement; rebuilt
        # after anything but insert changes a deme (forget_orders).
        self.orders: dict[int, DemeOrder] = {}

    def forget_orders(self) -> None:
        """The demes changed other than by :meth:`insert`: their orders no longer hold."""
        self.orders.clear()

    def ask(self, n: int) -> list[Trial]:
        s = self.search
        trials: list[Trial] = []
        while len(trials) < n:
            if s._queue:
                trials.append(s._trial_for(s._queue.pop(0), 0))
                continue
            bred = self.breed_one()
            if bred is None:
                # No deme has a result to breed from yet: a slot left idle until one
                # returns costs as much as a trial, so draw another random member (an
                # ask of 64 from a population of 16 gets 64); it joins its deme when
                # told, and the deme's worst leaves.
                deme = self.next_deme
                self.next_deme = (deme + 1) % s.demes
                genes = s._encode(sample_config(s.space, s._rng))
                bred = s._individual(genes, deme, (), "random"), 0
            trials.append(s._trial_for(*bred))
        return trials

    def breed_one(self) -> tuple[Individual, int] | None:
        s = self.search
        for offset in range(s.demes):
            deme = (self.next_deme + offset) % s.demes
            if s._parents[deme]:
                child = s._variation.vary_or(s._parents[deme], deme)
                generation = 1 + self.births[deme] // s._brood_sizes[deme]
                self.births[deme] += 1
                self.next_deme = (deme + 1) % s.demes
                return child, generation
        return None

    def told(self, ind: Individual) -> None:
        """A result joins its deme; once a generation's worth of results has come
        since the first generation, migrate, adapt the step and judge progress."""
        s = self.search
        self.insert(ind)
        if s._failures_in_row >= s.population:
            s._stop(
                f"the last {s._failures_in_row} trials (a generation's worth) all failed"
                f" (last: {s._last_failure}); check the trainer before searching on"
            )
        elif s._results >= s.population and (
            (s._results - s.population) % s._generation_size == 0
        ):
            # A generation's worth of results since the first generation.
            done = 1 + (s._results - s.population) // s._generation_size
            if s.demes > 1 and done % s.migration_interval == 0:
                s._migrate()
            s._steps.adapt()
            s._check_progress()

    def insert(self, ind: Individual) -> None:
        """Steady state: a result joins its deme and the deme's worst leaves.

        A failed child would be the worst (its imputed value is the deme's worst),
        so it is dropped at once instead.
        """
        if ind.failed:
            return
        s = self.search
        deme = s._parents[ind.deme]
        cached = s._best_by_deme.get(ind.deme)
        fresh = cached is not None and cached[0] == s._parents_changed
        target = getattr(ind, "target", None)
        at = (next((k for k, p in enumerate(deme) if p is target), None)
              if target is not None and not s.multi_objective else None)
        if at is not None and target is not None:
            # Differential evolution's one-to-one selection: the child replaces the
            # member it was built on if it is no worse, else it leaves.
            if not ind.fitness < target.fitness:
                deme[at] = ind
                s._parents_changed += 1
                self.orders.pop(ind.deme, None)  # the kept order no longer holds
            return
        if s.multi_objective:
            deme.append(ind)
            if len(deme) > s._deme_sizes[ind.deme]:
                worst = s._variation.worst(deme, 1)[0]
                del deme[next(k for k, i in enumerate(deme) if i is worst)]
        else:
            order = self.orders.get(ind.deme)
            if order is None:
                order = self.orders[ind.deme] = DemeOrder(deme)
            deme.append(ind)
            order.add(ind)
            if len(deme) > s._deme_sizes[ind.deme]:
                del deme[order.pop_worst()]
        s._parents_changed += 1
        if fresh and not s.multi_objective:
            # The deme's best after it: the newcomer if better (dropping the worst of
            # two or more leaves the best value), so a result costs no scan for it.
            best = cached[1]  # type: ignore[index]
            if best is None or ind.fitness.wvalues > best.wvalues:
                best = ind.fitness
            s._best_by_deme[ind.deme] = (s._parents_changed, best)


class DemeOrder:
    """A deme's members by weighted fitness, for the steady-state replacement: the
    worst leaves in O(log n) instead of a scan of a 2,048-strong deme per result.

    The worst is the first of the worst in the deme's list order, as ``min`` finds
    it: members are keyed by (weighted values, position), positions counting up as
    members are appended, which keeps list order (a deletion keeps the others' order).
    """

    def __init__(self, deme: list[Individual]) -> None:
        self.heap = [(i.fitness.wvalues, k, i) for k, i in enumerate(deme)]
        heapq.heapify(self.heap)
        self.positions = list(range(len(deme)))  # each member's, in list order (sorted)
        self.next = len(deme)

    def add(self, ind: Individual) -> None:
        heapq.heappush(self.heap, (ind.fitness.wvalues, self.next, ind))
        self.positions.append(self.next)
        self.next += 1

    def pop_worst(self) -> int:
        """Forget the worst member; its index in the deme's list."""
        _, position, _ = heapq.heappop(self.heap)
        index = bisect.bisect_left(self.positions, position)
        del self.positions[index]
        return index
