"""A genetic search's variation and selection: DEAP's operators on its genome and RNG.

Numbers cross over with DEAP's blend or bounded simulated-binary crossover (or
differential evolution's, JADE's current-to-pbest/1) and mutate with its Gaussian
mutation (sigma a share of the gene's range, adapted by
:class:`~nestor.search._genetic_step.StepControl`); categoricals cross over
uniformly and mutate by redrawing another value; integers are rounded after every
change and a mutation moves them by at least one step. Parents are chosen by
tournament (on (front, crowding) for several objectives, NSGA-II).

Why apart from the generational loop: how one child is made from parents, and
which individuals are picked, is the same for the generational and the
steady-state schedule, and each is a well-known operator, not the loop.
"""

from __future__ import annotations

import math
from operator import attrgetter
from typing import Any

from deap import tools

from nestor.search._genetic_genome import Gene, Individual, using
from nestor.search._genetic_view import GeneticView
from nestor.search.space import IntParam, Scalar

_FITNESS = attrgetter("fitness")
DE_PBEST = 0.2  # the share of a deme whose members a DE child is pulled towards
DE_MEMBERS = 4  # results a deme needs before differences mean anything


class Variation:
    """Breeds children from a deme's parents, and selects among individuals."""

    def __init__(self, search: GeneticView) -> None:
        self.search = search

    def clone(self, ind: Individual, deme: int) -> Individual:
        return self.search._individual(
            list(ind), deme, (ind.trial_id,) if ind.trial_id else (), "copy")

    def cross(self, a: Individual, b: Individual) -> None:
        s = self.search
        with using(s._rng):
            if s._numeric:
                xa, xb = [a[i] for i in s._numeric], [b[i] for i in s._numeric]
                if s.crossover == "blend":
                    tools.cxBlend(xa, xb, s.alpha)
                else:
                    lows = [s._genes[i].low for i in s._numeric]
                    highs = [s._genes[i].high for i in s._numeric]
                    tools.cxSimulatedBinaryBounded(xa, xb, s.eta, lows, highs)
                for j, i in enumerate(s._numeric):
                    a[i], b[i] = s._genes[i].snap(xa[j]), s._genes[i].snap(xb[j])
            if s._categorical:
                ca, cb = [a[i] for i in s._categorical], [b[i] for i in s._categorical]
                tools.cxUniform(ca, cb, 0.5)
                for j, i in enumerate(s._categorical):
                    a[i], b[i] = ca[j], cb[j]
        parents = tuple(dict.fromkeys(a.parents + b.parents))
        a.parents = b.parents = parents
        a.origin = b.origin = "crossover"

    def mutate(self, ind: Individual) -> None:
        """Mutate genes drawn with probability 1/len each (at least one).

        Under the one-fifth rule every number also takes a Gaussian step (the
        rule adapts one step for a move in all directions, as in the (1+1)
        evolution strategy it comes from); the drawn genes are the ones that
        must change: an integer among them moves at least one step, and a
        categorical among them is redrawn. With a fixed step only the drawn
        genes move, as before.
        """
        s = self.search
        rng, genes = s._rng, s._genes
        drawn = [i for i in range(len(ind)) if rng.random() < 1.0 / len(ind)]
        if not drawn:
            drawn = [rng.randrange(len(ind))]
        moving = range(len(ind)) if s.sigma_rule == "one_fifth" else drawn
        numeric = [i for i in moving if not genes[i].categorical]
        if numeric:
            before = [ind[i] for i in numeric]
            moved = list(before)
            step = s.mutation_step
            sigmas = [step * (genes[i].high - genes[i].low) for i in numeric]
            # DEAP's mutGaussian(moved, 0.0, sigmas, indpb=1.0) on this RNG directly
            # (its draw against indpb kept, so the stream is DEAP's): through the
            # module forwarder each draw was a context-variable lookup.
            for j, sigma in enumerate(sigmas):
                rng.random()
                moved[j] += rng.gauss(0.0, sigma)
            for old, new, i in zip(before, moved, numeric, strict=True):
                ind[i] = self.step(genes[i], old, new, must_change=i in drawn)
        for i in drawn:
            gene = genes[i]
            if gene.categorical:
                count = round(gene.high) + 1
                if count > 1:
                    pick = rng.randrange(count - 1)
                    ind[i] = float(pick + 1 if pick >= round(ind[i]) else pick)
        ind.origin = "crossover+mutation" if ind.origin.startswith("crossover") else "mutation"

    @staticmethod
    def step(gene: Gene, old: float, new: float, must_change: bool = True) -> float:
        """The mutated gene; an integer that must change moves at least one step
        (towards the draw)."""
        moved = gene.snap(new)
        param = gene.param
        if (
            must_change
            and isinstance(param, IntParam)
            and gene.decode(moved) == gene.decode(old)
        ):
            value = gene.decode(old)
            step = 1 if new >= old else -1
            if not param.low <= value + step <= param.high:  # type: ignore[operator]
                step = -step
            moved = gene.encode(value + step)  # type: ignore[operator]
        return moved

    def vary_and(self, parents: list[Individual], count: int, deme: int) -> list[Individual]:
        """DEAP's varAnd: pairs cross over, then each child may mutate (``de``: a
        differential-evolution child per slot)."""
        s = self.search
        if s.crossover == "de":
            return [self.de_child(parents, deme) for _ in range(count)]
        chosen = self.select(parents, count)
        children = [self.clone(p, deme) for p in chosen]
        for i in range(1, len(children), 2):
            if s._rng.random() < s.crossover_rate:
                self.cross(children[i - 1], children[i])
        for child in children:
            if s._rng.random() < s.mutation_rate or self.is_copy(child):
                self.mutate(child)
        return children

    def vary_or(self, parents: list[Individual], deme: int) -> Individual:
        """DEAP's varOr for one child: crossover or mutation (never a bare copy);
        with ``crossover="de"``, a differential-evolution child (:meth:`de_child`)."""
        s = self.search
        if s.crossover == "de":
            return self.de_child(parents, deme)
        if len(parents) > 1 and s._rng.random() < s.crossover_rate:
            a, b = (self.clone(p, deme) for p in self.select(parents, 2))
            self.cross(a, b)
            child = a
        else:
            child = self.clone(self.select(parents, 1)[0], deme)
            self.mutate(child)
        if self.is_copy(child):
            self.mutate(child)
        return child

    def de_child(self, parents: list[Individual], deme: int) -> Individual:
        """A child by differential evolution, JADE's DE/current-to-pbest/1/bin
        (Zhang and Sanderson, 2009), for ``crossover="de"``.

        Why: at 16 or more trials at once the search has only a few results per
        slot, and a Gaussian step of a share of each range (even one adapted by
        the one-fifth rule, once per generation) moves every child as far in a
        flat direction as in a steep one. A difference of two members is a step
        the population itself scales and orients: wide while it is spread out,
        short and along the valley once it has closed in. The mutant
        v = x + F (x_pbest - x) + F (x_r1 - x_r2) pulls the target x towards one
        of the best ``DE_PBEST`` of its deme; DEAP's uniform crossover then takes
        each gene from the mutant with probability CR (one gene always), which is
        DE's binomial crossover. F and CR are drawn per child around means that
        follow the values of the children that beat their targets (JADE's
        self-adaptation; :class:`~nestor.search._genetic_step.DEControl`). A gene
        the mutant pushes out of its range lands halfway between the target and
        the bound. A categorical takes the best member's value with probability F
        (else the target's), and an integer or a categorical is snapped to a value.
        Until a deme has ``DE_MEMBERS`` results a differential has nothing to
        measure, so the child is the usual mutation of a selected parent.
        """
        s = self.search
        valid = [p for p in parents if p.fitness.valid]
        if len(valid) < DE_MEMBERS or s.multi_objective:
            child = self.clone(self.select(parents, 1)[0], deme)
            self.mutate(child)
            return child
        rng = s._rng
        target = rng.choice(valid)
        ranked = sorted(valid, key=attrgetter("fitness"), reverse=True)
        pbest = rng.choice(ranked[: max(2, math.ceil(DE_PBEST * len(ranked)))])
        r1, r2 = rng.sample([p for p in valid if p is not target], 2)
        f, cr = s._steps.de.draw(rng)
        mutant = list(target)
        for i, gene in enumerate(s._genes):
            if gene.categorical:
                mutant[i] = pbest[i] if rng.random() < f else target[i]
                continue
            v = target[i] + f * (pbest[i] - target[i]) + f * (r1[i] - r2[i])
            if v < gene.low:
                v = (gene.low + target[i]) / 2
            elif v > gene.high:
                v = (gene.high + target[i]) / 2
            mutant[i] = gene.snap(v)
        child = self.clone(target, deme)
        with using(rng):
            tools.cxUniform(child, mutant, cr)
        forced = rng.randrange(len(child))
        child[forced] = mutant[forced]
        child.parents = tuple(dict.fromkeys(
            p.trial_id for p in (target, pbest, r1, r2) if p.trial_id))  # fmt: skip
        child.origin, child.target, child.de = "differential", target, (f, cr)
        if s._decode(child) == s._decode(target):
            self.mutate(child)
            child.origin = "differential+mutation"
        return child

    def is_copy(self, child: Individual) -> bool:
        config = self.search._decode(child)
        members = self.search._members
        return any(
            self.config_of(members[p]) == config for p in child.parents
            if p in members
        )  # fmt: skip

    def config_of(self, member: Individual) -> dict[str, Scalar]:
        """A member's config, decoded once per genome: a member is a parent many
        times, and decoding it for every child was most of :meth:`is_copy`."""
        genes = tuple(member)
        if member.decoded is None or member.decoded[0] != genes:
            member.decoded = (genes, self.search._decode(member))
        return member.decoded[1]

    def select(self, pool: list[Individual], k: int) -> list[Individual]:
        s = self.search
        if not s.multi_objective:
            # DEAP's selTournament (k tournaments of tournament_size drawn with
            # rng.choice, the fittest of each by Fitness order), drawing from the RNG
            # directly: through the module forwarder, each draw was a context-variable
            # lookup, and selection a twentieth of an ask at 32,768 slots.
            rng, size = s._rng, s.tournament_size
            return [max([rng.choice(pool) for _ in range(size)], key=_FITNESS)
                    for _ in range(k)]
        with using(s._rng):
            fronts = tools.sortNondominated(pool, len(pool))
            for rank, front in enumerate(fronts):
                tools.emo.assignCrowdingDist(front)
                for ind in front:
                    ind.rank_fitness = s._rank_fitness((rank, ind.fitness.crowding_dist))
            return tools.selTournament(pool, k, s.tournament_size, fit_attr="rank_fitness")

    def survivors(self, pool: list[Individual], k: int) -> list[Individual]:
        if self.search.multi_objective:
            return tools.selNSGA2(pool, k)
        return tools.selBest(pool, k)

    def worst(self, pool: list[Individual], k: int) -> list[Individual]:
        if self.search.multi_objective:
            return tools.selNSGA2(pool, len(pool))[len(pool) - k :]
        if k == 1:  # each async result: a scan, not a sort of the deme (selWorst's first)
            return [pool[worst_index(pool)]]
        return tools.selWorst(pool, k)


def worst_index(pool: list[Any]) -> int:
    """Where the first of the worst is (as ``min`` by fitness finds it): DEAP's
    Fitness compares its weighted values, so compare those, in C."""
    keys = [i.fitness.wvalues for i in pool]
    return keys.index(min(keys))
