"""A genetic search's self-adaptation: the mutation's step and differential evolution's F and CR.

Why apart from the generational loop: a fixed step (a share of each range) cannot
refine near an optimum, and the rules that adapt it (Rechenberg's one-fifth rule,
JADE's means of F and CR) are each a function of the results told, in order, that
the loop only feeds (a told child) and asks once a generation (adapt); apart, each
rule reads as published and a restored search replays it exactly.
"""

from __future__ import annotations

import math
import random
import statistics
from typing import Any

from nestor.search._genetic_genome import Individual
from nestor.search._genetic_view import GeneticView
from nestor.search._records import Observation


class DEControl:
    """JADE's adaptation of differential evolution's F and CR (Zhang and Sanderson,
    2009): each child draws F from Cauchy(mu_F, 0.1) (redrawn while <= 0, cut at 1)
    and CR from Normal(mu_CR, 0.1) cut to [0, 1]; once per generation the means move
    a tenth of the way to the Lehmer mean of the F (the arithmetic mean of the CR)
    of the children that beat their targets. Large F survive that mean, so the
    step does not collapse early. A function of the results told, in order, so a
    restored search replays it."""

    def __init__(self) -> None:
        self.mu_f, self.mu_cr = 0.5, 0.5
        self._f: list[float] = []
        self._cr: list[float] = []

    def draw(self, rng: random.Random) -> tuple[float, float]:
        f = 0.0
        while f <= 0.0:
            f = self.mu_f + 0.1 * math.tan(math.pi * (rng.random() - 0.5))
        return min(f, 1.0), min(max(rng.gauss(self.mu_cr, 0.1), 0.0), 1.0)

    def score(self, ind: Any) -> None:
        """Keep a told DE child's F and CR if it beat its target (no worse)."""
        target, drawn = getattr(ind, "target", None), getattr(ind, "de", None)
        if target is None or drawn is None or ind.failed or not target.fitness.valid:
            return
        if not ind.fitness < target.fitness:
            self._f.append(drawn[0])
            self._cr.append(drawn[1])

    def adapt(self, c: float = 0.1) -> None:
        if self._f:
            lehmer = sum(f * f for f in self._f) / sum(self._f)
            self.mu_f = (1 - c) * self.mu_f + c * lehmer
            self.mu_cr = (1 - c) * self.mu_cr + c * statistics.fmean(self._cr)
        self._f, self._cr = [], []


class StepControl:
    """The Gaussian mutation's step (a share of each gene's range) and JADE's F and CR."""

    def __init__(self, search: GeneticView) -> None:
        self.search = search
        self.scale = 1.0  # the one-fifth rule's factor on sigma
        self.de = DEControl()  # crossover "de": JADE's adapted F and CR
        self.mutated = 0  # mutated children told since the last adaptation...
        self.successes = 0  # ...and how many of them beat their parents

    @property
    def mutation_step(self) -> float:
        """The Gaussian mutation's sigma now, as a share of each gene's range."""
        return self.search.sigma * self.scale

    def told(self, ind: Individual, observation: Observation) -> None:
        """Score a told child for both rules."""
        self.count_success(ind, observation)
        self.de.score(ind)

    def count_success(self, ind: Individual, observation: Observation) -> None:
        """Score a mutated child for the one-fifth rule: did it beat its deme?

        A success is a child better than the best member of its deme (with
        several objectives: dominated by none of them), as in the (1+1)
        evolution strategy the rule comes from, where the parent is the best so
        far. Measured against "better than its own parents" (easy while the
        parents are poor, so the step kept growing): the deme's best made the
        step shrink as the search closed in. A failed trial is a miss.
        """
        if "mutation" not in ind.origin:
            return
        s = self.search
        if s.multi_objective:
            members = [p for p in s._parents[ind.deme] if p.fitness.valid]
            best = None
        else:
            best = s._deme_best(ind.deme)
            members = [] if best is None else [best]
        if not members:
            return
        self.mutated += 1
        if observation.values is None:
            return
        if s.multi_objective:
            success = not any(p.fitness.dominates(ind.fitness) for p in members)
        else:
            success = ind.fitness > best
        self.successes += success

    def adapt(self) -> None:
        """Rechenberg's one-fifth success rule, once per generation (of results).

        A fixed step (a share of each range) cannot refine near an optimum: the
        search keeps jumping over it. The rule widens the step while more than
        a fifth of mutated children beat their deme's best (the search is far
        from an optimum and bigger steps pay) and narrows it while fewer do, in
        the smooth form sigma *= exp((rate - 1/5) / (1 - 1/5)) (Kern et al. 2004).
        The factor is a function of the results told, in order, so a restored
        search replays it exactly.
        The step stays between 1e-4 and 1 of the range: wider jumps are random
        search, narrower ones cannot be told apart by a trainer's noise.
        """
        self.de.adapt()
        sigma = self.search.sigma
        if self.search.sigma_rule != "one_fifth" or not self.mutated:
            return
        rate = self.successes / self.mutated
        scale = self.scale * math.exp((rate - 0.2) / 0.8)
        self.scale = min(max(scale, 1e-4 / sigma), 1.0 / sigma)
        self.mutated = self.successes = 0
