"""Genetic search on DEAP's operators: demes, elitism, NSGA-II, async breeding.

The genome is explicit: one float gene per searched parameter, in the space
the parameter varies in (log of the value for ``log`` parameters, the index of
the value for categoricals). Numbers cross over with DEAP's blend or bounded
simulated-binary crossover and mutate with its Gaussian mutation (sigma a
share of the gene's range, adapted by the one-fifth success rule);
categoricals cross over uniformly and mutate by redrawing another value;
integers are rounded after every change and a mutation moves them by at
least one step.

Randomness: DEAP's operators call the *module* ``random``. Seeding that global
would make two searchers in one process (or a test running beside the
orchestrator) disturb each other. Instead, DEAP's tool modules are given a
stand-in for ``random`` that forwards to the RNG of whichever searcher is
running an operator at that moment (a context variable, so threads and async
tasks each see their own), and to the real module otherwise. So each searcher
owns a seeded ``random.Random`` and DEAP's operators are used as published.
No ``creator.create`` either: each searcher builds its own Fitness class.
"""

from __future__ import annotations

import bisect
import contextlib
import heapq
import importlib
import math
import random
import statistics
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from operator import attrgetter
from typing import Any, Literal

from deap import base, tools

from nestor.search._base import Observation, Searcher, Trial, pareto_front
from nestor.search._registry import register
from nestor.search._sampling import repair, sample_config
from nestor.search._settings import SearchSettings, setting
from nestor.search.space import CategoricalParam, FloatParam, IntParam, Param, Scalar, SearchSpace

_current_rng: ContextVar[Any] = ContextVar("nestor_deap_rng", default=random)


class _RandomForwarder:
    """Stands in for the ``random`` module inside DEAP's tool modules."""

    def __getattr__(self, name: str) -> Any:
        return getattr(_current_rng.get(), name)


for _module in ("crossover", "mutation", "selection", "emo", "migration"):
    _deap_module = importlib.import_module(f"deap.tools.{_module}")
    if hasattr(_deap_module, "random"):
        _deap_module.random = _RandomForwarder()  # type: ignore[attr-defined]


@contextlib.contextmanager
def _using(rng: random.Random) -> Iterator[None]:
    token = _current_rng.set(rng)
    try:
        yield
    finally:
        _current_rng.reset(token)


@dataclass(frozen=True)
class _Gene:
    """How one parameter is encoded: a float in [low, high] of its search space."""

    param: Param
    low: float
    high: float

    @classmethod
    def of(cls, param: Param) -> _Gene:
        if isinstance(param, CategoricalParam):
            return cls(param, 0.0, float(len(param.values) - 1))
        assert isinstance(param, FloatParam | IntParam)
        if param.log:
            return cls(param, math.log(param.low), math.log(param.high))
        return cls(param, float(param.low), float(param.high))

    @property
    def categorical(self) -> bool:
        return isinstance(self.param, CategoricalParam)

    def encode(self, value: Scalar) -> float:
        param = self.param
        if isinstance(param, CategoricalParam):
            return float(
                next(i for i, v in enumerate(param.values) if type(v) is type(value) and v == value)
            )
        return math.log(value) if param.log else float(value)  # type: ignore[attr-defined,arg-type]

    def decode(self, gene: float) -> Scalar:
        param = self.param
        gene = min(max(gene, self.low), self.high)
        if isinstance(param, CategoricalParam):
            return param.values[round(gene)]
        value = math.exp(gene) if param.log else gene  # type: ignore[attr-defined]
        if isinstance(param, IntParam):
            return min(max(round(value), param.low), param.high)
        assert isinstance(param, FloatParam)
        return min(max(value, param.low), param.high)

    def snap(self, gene: float) -> float:
        """The gene of the value it decodes to (integers and categoricals are exact)."""
        if isinstance(self.param, FloatParam):
            return min(max(gene, self.low), self.high)
        return self.encode(self.decode(gene))


class _Individual(list):
    """A genome (a list of genes, as DEAP's operators expect) and its bookkeeping."""

    fitness: base.Fitness
    trial_id: str | None
    deme: int
    parents: tuple[str, ...]
    origin: str
    failed: bool
    target: _Individual | None = None  # a DE child's target (crossover "de")
    de: tuple[float, float] | None = None  # ...and the F and CR it was bred with
    decoded: tuple[tuple[float, ...], dict[str, Scalar]] | None = None  # genes, their config


_FITNESS = attrgetter("fitness")
DE_PBEST = 0.2  # the share of a deme whose members a DE child is pulled towards
DE_MEMBERS = 4  # results a deme needs before differences mean anything


class _DEControl:
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


def plan_generations(
    population: int,
    generations: int | None,
    budget: int | None,
    mode: str = "generational",
    offspring: int | None = None,
) -> int:
    """How many generations a genetic search runs, its budget taken into account.

    Without ``generations`` the search plans as many as its ``budget`` needs
    (10 without a budget either), so ``budget: 200`` runs 200 trials rather than
    the 160 of the default 10 generations of 16. With both, the budget is
    honoured: a budget above the generations' trials breeds the generations it
    needs (refusing it left a user who asked for 200 trials to do the sum), and
    a budget below them cuts the last generation short, as "most trials to run"
    says.

    >>> plan_generations(16, None, 200), plan_generations(16, 10, 100)
    (13, 10)
    >>> plan_generations(16, 7, 200)
    13
    """
    size = (offspring or population) if mode == "mu_plus_lambda" else population

    if generations is None:
        if budget is None:
            return 10
        return 1 + max(0, -(-(budget - population) // size))
    if budget is not None and budget > population + size * (generations - 1):
        return plan_generations(population, None, budget, mode, offspring)
    return generations


def _split(total: int, parts: int) -> list[int]:
    """``total`` shared as evenly as possible, the first parts taking the remainder."""
    return [total // parts + (1 if i < total % parts else 0) for i in range(parts)]



@dataclass(frozen=True)
class GeneticSettings(SearchSettings):
    population: int = setting(16, "individuals per generation (all demes)", ge=2)
    generations: int | None = setting(
        None, "generations to breed; default: as many as budget needs (10 without)", ge=1)
    mode: Literal["generational", "mu_plus_lambda"] = setting(
        "generational", "each generation replaces the last, or mu_plus_lambda: parents and"
        " children compete for the places")
    offspring: int | None = setting(
        None, "mu_plus_lambda: children per generation (lambda); default: population", ge=1)
    schedule: Literal["generational", "async"] = setting(
        "generational", "barrier per generation, or breed as each result returns")
    demes: int = setting(1, "islands evolving apart, with migration", ge=1)
    migration_interval: int = setting(5, "generations between migrations", ge=1)
    migration_size: int = setting(1, "individuals sent per migration", ge=1)
    mutation_rate: float = setting(0.3, "chance a child is mutated", ge=0.0, le=1.0)
    crossover_rate: float = setting(0.5, "chance two parents cross over", ge=0.0, le=1.0)
    crossover: Literal["blend", "sbx", "de"] = setting(
        "blend", "how numbers cross over: blend, simulated binary (sbx), or differential"
        " evolution (de: JADE's current-to-pbest/1, F and CR self-adapted)")
    tournament_size: int = setting(3, "individuals in each parent tournament", ge=2)
    elitism: int = setting(1, "best individuals kept unchanged (hall of fame)", ge=0)
    patience: int | None = setting(
        None, "stop after this many generations without improvement", ge=1)
    sigma: float = setting(0.1, "mutation step, a share of each gene's range", gt=0,
                           public=False)
    sigma_rule: Literal["one_fifth", "fixed"] = setting(
        "one_fifth", "mutation step: adapted by the one-fifth success rule, or fixed")
    alpha: float = setting(0.5, "blend crossover's alpha", gt=0, public=False)
    eta: float = setting(10.0, "sbx's crowding degree", gt=0, public=False)

    def check(self) -> None:
        if self.population < 2 * self.demes:
            raise ValueError(
                f"population must be at least 2 per deme ({2 * self.demes} for"
                f" {self.demes} demes), but got {self.population}"
            )
        if self.elitism >= self.population:
            raise ValueError(
                f"elitism must be less than population ({self.population}),"
                f" but got {self.elitism}"
            )
        if self.mode == "mu_plus_lambda" and self.crossover_rate + self.mutation_rate > 1:
            raise ValueError(
                "crossover_rate + mutation_rate must be at most 1 in mode mu_plus_lambda,"
                f" but got {self.crossover_rate + self.mutation_rate:g}"
            )


@register
class GeneticSearch(Searcher):
    """A genetic algorithm with islands, elitism, NSGA-II and an async schedule.

    Settings use the names of the workflow spec (``search:`` of an hpo stage):

    - ``population`` individuals per generation, shared among ``demes``
      islands that evolve apart and pass their ``migration_size`` best to the
      next island (a ring) every ``migration_interval`` generations;
    - ``mode="generational"``: each generation is ``population`` new children,
      bred by tournament selection (``tournament_size``), crossover (pairs,
      ``crossover_rate``) and mutation (``mutation_rate``); the ``elitism`` best
      of each deme so far (a hall of fame) replace its worst children as parents.
      ``mode="mu_plus_lambda"``: each generation breeds ``offspring`` children
      (crossover *or* mutation, as DEAP's varOr) and the best ``population`` of
      parents and children survive.
      A child identical to its parent would spend a trial on a known result,
      so it is mutated; every generation therefore runs exactly its size in
      trials: population × generations, or population + offspring ×
      (generations − 1). Leave ``generations`` out to plan as many as
      ``budget`` needs (10 without a budget); a ``budget`` above what the given
      generations run extends them (see :func:`plan_generations`).
    - ``schedule="generational"`` waits for the whole generation (``ask``
      returns [] at the barrier); ``schedule="async"`` breeds a child from the
      deme's current members whenever a slot is free and inserts each result
      as it arrives, dropping the deme's worst (steady state), so no slot
      idles behind a straggler. A "generation" is then that many results.
    - Mutation is DEAP's Gaussian mutation with a step of ``sigma`` times each
      gene's range. ``sigma_rule="one_fifth"`` (default) adapts that step once
      per generation by Rechenberg's one-fifth success rule and moves every
      number; ``"fixed"`` keeps it and moves one gene in len (the old search).
    - Stops after the planned trials, after ``patience`` generations without a
      better best (without a new Pareto-front member for several objectives),
      on an objective's threshold, or when a whole generation failed.
    - Several objectives: NSGA-II (non-dominated sorting and crowding) chooses
      the survivors in both modes, parents are chosen by tournament on
      (front, crowding), and :meth:`pareto_front` gives the trade-off.

    A failed trial gets the worst value of its generation (per objective), so
    it stays in the population but is rarely chosen as a parent.
    """

    algorithm = "genetic"
    renamed_settings = {"mode": "replacement"}  # noqa: RUF012 - a ClassVar (Searcher)

    Settings = GeneticSettings

    def __init__(self, space: SearchSpace, objectives: Any, **settings: Any) -> None:
        s = self.Settings(**settings)
        seed, budget, population, generations = s.seed, s.budget, s.population, s.generations
        mode, offspring, schedule, demes = s.mode, s.offspring, s.schedule, s.demes
        migration_interval, migration_size = s.migration_interval, s.migration_size
        mutation_rate, crossover_rate, crossover = s.mutation_rate, s.crossover_rate, s.crossover
        tournament_size, elitism, patience = s.tournament_size, s.elitism, s.patience
        sigma, sigma_rule, alpha, eta = s.sigma, s.sigma_rule, s.alpha, s.eta
        super().__init__(space, objectives, seed=seed, budget=budget)
        if not space.searched:
            raise ValueError("space must have at least one searched (non-constant) parameter")
        self._settings.update(
            population=population, generations=generations, mode=mode, offspring=offspring,
            schedule=schedule, demes=demes, migration_interval=migration_interval,
            migration_size=migration_size, mutation_rate=mutation_rate,
            crossover_rate=crossover_rate, crossover=crossover,
            tournament_size=tournament_size, elitism=elitism, patience=patience,
            sigma=sigma, sigma_rule=sigma_rule, alpha=alpha, eta=eta,
        )  # fmt: skip
        self.offspring = offspring if offspring is not None else population
        self.population, self.mode = population, mode
        self.generations = plan_generations(population, generations, self.budget, mode,
                                            offspring)
        self.schedule, self.demes = schedule, demes
        self.migration_interval, self.migration_size = migration_interval, migration_size
        self.mutation_rate, self.crossover_rate = float(mutation_rate), float(crossover_rate)
        self.crossover, self.tournament_size = crossover, tournament_size
        self.elitism, self.patience = elitism, patience
        self.sigma, self.alpha, self.eta = float(sigma), float(alpha), float(eta)
        self.sigma_rule = sigma_rule
        self._step_scale = 1.0  # the one-fifth rule's factor on sigma
        self._de = _DEControl()  # crossover "de": JADE's adapted F and CR
        self._mutated = 0  # mutated children told since the last adaptation...
        self._successes = 0  # ...and how many of them beat their parents

        self._rng = random.Random(seed)
        self._genes = [_Gene.of(p) for p in space.searched]
        self._numeric = [i for i, g in enumerate(self._genes) if not g.categorical]
        self._categorical = [i for i, g in enumerate(self._genes) if g.categorical]
        # Maximize weights +1, minimize -1: DEAP's fitness compares weighted values.
        weights = tuple(-o.sign for o in self.objectives)
        self._fitness = type("Fitness", (base.Fitness,), {"weights": weights})
        self._rank_fitness = type("RankFitness", (base.Fitness,), {"weights": (-1.0, 1.0)})
        self._deme_sizes = _split(population, demes)
        self._brood_sizes = (
            _split(self.offspring, demes) if mode == "mu_plus_lambda" else self._deme_sizes
        )
        self._parents: list[list[_Individual]] = [[] for _ in range(demes)]
        # Bumped whenever a deme's parents change; _deme_best caches by it, so a
        # result is not compared with every parent of a 2,048-strong deme.
        self._parents_changed = 0
        self._best_by_deme: dict[int, tuple[int, Any]] = {}
        # Each deme's members by fitness, for the steady-state replacement; rebuilt
        # after anything but _insert changes a deme.
        self._orders: dict[int, _DemeOrder] = {}
        self._halls = [tools.HallOfFame(max(1, min(elitism, s - 1))) for s in self._deme_sizes]
        self._members: dict[str, _Individual] = {}
        self._queue: list[_Individual] = []
        self._batch: list[_Individual] = []  # the current generation, once asked
        self._seeds: list[dict[str, Scalar]] = []
        self._generation = 0
        self._started = False
        self._stall = 0
        self._best_mark: Any = None
        # best()'s key, kept as results come (see _best_key): observations looked at so
        # far, the least key among them, and whether any had a training budget
        self._best_seen = 0
        self._best_key_so_far: tuple[float, ...] | None = None
        self._budgeted = False
        self._failures_in_row = 0
        self._last_failure = ""
        self._births = [0] * demes
        self._next_deme = 0
        self._results = 0

    # --- sizes --------------------------------------------------------------------------

    @property
    def planned(self) -> int:
        if self.mode == "mu_plus_lambda":
            planned = self.population + self.offspring * (self.generations - 1)
        else:
            planned = self.population * self.generations
        return min(planned, self.budget) if self.budget is not None else planned

    @property
    def mutation_step(self) -> float:
        """The Gaussian mutation's sigma now, as a share of each gene's range."""
        return self.sigma * self._step_scale

    @property
    def generation(self) -> int:
        """The generation being evaluated (generational schedule)."""
        return self._generation

    @property
    def _generation_size(self) -> int:
        return self.offspring if self.mode == "mu_plus_lambda" else self.population

    # --- encoding -----------------------------------------------------------------------

    def _individual(
        self, genes: list[float], deme: int, parents: tuple[str, ...] = (), origin: str = "random"
    ) -> _Individual:
        ind = _Individual(genes)
        ind.fitness = self._fitness()
        ind.trial_id, ind.deme, ind.parents, ind.origin, ind.failed = (
            None,
            deme,
            parents,
            origin,
            False,
        )
        return ind

    def _decode(self, ind: list[float]) -> dict[str, Scalar]:
        return {g.param.name: g.decode(x) for g, x in zip(self._genes, ind, strict=True)}

    def _encode(self, config: dict[str, Scalar]) -> list[float]:
        if self.space.conditions:  # a configuration lacks its inactive parameters
            config = self.space.fill(config)
        return [g.encode(config[g.param.name]) for g in self._genes]

    def _clone(self, ind: _Individual, deme: int) -> _Individual:
        return self._individual(list(ind), deme, (ind.trial_id,) if ind.trial_id else (), "copy")

    # --- variation (DEAP operators, this searcher's RNG) ----------------------------------

    def _cross(self, a: _Individual, b: _Individual) -> None:
        with _using(self._rng):
            if self._numeric:
                xa, xb = [a[i] for i in self._numeric], [b[i] for i in self._numeric]
                if self.crossover == "blend":
                    tools.cxBlend(xa, xb, self.alpha)
                else:
                    lows = [self._genes[i].low for i in self._numeric]
                    highs = [self._genes[i].high for i in self._numeric]
                    tools.cxSimulatedBinaryBounded(xa, xb, self.eta, lows, highs)
                for j, i in enumerate(self._numeric):
                    a[i], b[i] = self._genes[i].snap(xa[j]), self._genes[i].snap(xb[j])
            if self._categorical:
                ca, cb = [a[i] for i in self._categorical], [b[i] for i in self._categorical]
                tools.cxUniform(ca, cb, 0.5)
                for j, i in enumerate(self._categorical):
                    a[i], b[i] = ca[j], cb[j]
        parents = tuple(dict.fromkeys(a.parents + b.parents))
        a.parents = b.parents = parents
        a.origin = b.origin = "crossover"

    def _mutate(self, ind: _Individual) -> None:
        """Mutate genes drawn with probability 1/len each (at least one).

        Under the one-fifth rule every number also takes a Gaussian step (the
        rule adapts one step for a move in all directions, as in the (1+1)
        evolution strategy it comes from); the drawn genes are the ones that
        must change: an integer among them moves at least one step, and a
        categorical among them is redrawn. With a fixed step only the drawn
        genes move, as before.
        """
        rng = self._rng
        drawn = [i for i in range(len(ind)) if rng.random() < 1.0 / len(ind)]
        if not drawn:
            drawn = [rng.randrange(len(ind))]
        moving = range(len(ind)) if self.sigma_rule == "one_fifth" else drawn
        numeric = [i for i in moving if not self._genes[i].categorical]
        if numeric:
            before = [ind[i] for i in numeric]
            moved = list(before)
            step = self.mutation_step
            sigmas = [step * (self._genes[i].high - self._genes[i].low) for i in numeric]
            # DEAP's mutGaussian(moved, 0.0, sigmas, indpb=1.0) on this RNG directly
            # (its draw against indpb kept, so the stream is DEAP's): through the
            # module forwarder each draw was a context-variable lookup.
            for j, sigma in enumerate(sigmas):
                rng.random()
                moved[j] += rng.gauss(0.0, sigma)
            for old, new, i in zip(before, moved, numeric, strict=True):
                ind[i] = self._step(self._genes[i], old, new, must_change=i in drawn)
        for i in drawn:
            gene = self._genes[i]
            if gene.categorical:
                count = round(gene.high) + 1
                if count > 1:
                    pick = rng.randrange(count - 1)
                    ind[i] = float(pick + 1 if pick >= round(ind[i]) else pick)
        ind.origin = "crossover+mutation" if ind.origin.startswith("crossover") else "mutation"

    @staticmethod
    def _step(gene: _Gene, old: float, new: float, must_change: bool = True) -> float:
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

    def _vary_and(self, parents: list[_Individual], count: int, deme: int) -> list[_Individual]:
        """DEAP's varAnd: pairs cross over, then each child may mutate (``de``: a
        differential-evolution child per slot)."""
        if self.crossover == "de":
            return [self._de_child(parents, deme) for _ in range(count)]
        chosen = self._select(parents, count)
        children = [self._clone(p, deme) for p in chosen]
        for i in range(1, len(children), 2):
            if self._rng.random() < self.crossover_rate:
                self._cross(children[i - 1], children[i])
        for child in children:
            if self._rng.random() < self.mutation_rate or self._is_copy(child):
                self._mutate(child)
        return children

    def _vary_or(self, parents: list[_Individual], deme: int) -> _Individual:
        """DEAP's varOr for one child: crossover or mutation (never a bare copy);
        with ``crossover="de"``, a differential-evolution child (:meth:`_de_child`)."""
        if self.crossover == "de":
            return self._de_child(parents, deme)
        if len(parents) > 1 and self._rng.random() < self.crossover_rate:
            a, b = (self._clone(p, deme) for p in self._select(parents, 2))
            self._cross(a, b)
            child = a
        else:
            child = self._clone(self._select(parents, 1)[0], deme)
            self._mutate(child)
        if self._is_copy(child):
            self._mutate(child)
        return child

    def _de_child(self, parents: list[_Individual], deme: int) -> _Individual:
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
        self-adaptation; :class:`_DEControl`). A gene the mutant pushes out of its
        range lands halfway between the target and the bound. A categorical takes
        the best member's value with probability F (else the target's), and an
        integer or a categorical is snapped to a value. Until a deme has
        ``DE_MEMBERS`` results a differential has nothing to measure, so the
        child is the usual mutation of a selected parent.
        """
        valid = [p for p in parents if p.fitness.valid]
        if len(valid) < DE_MEMBERS or self.multi_objective:
            child = self._clone(self._select(parents, 1)[0], deme)
            self._mutate(child)
            return child
        rng = self._rng
        target = rng.choice(valid)
        ranked = sorted(valid, key=attrgetter("fitness"), reverse=True)
        pbest = rng.choice(ranked[: max(2, math.ceil(DE_PBEST * len(ranked)))])
        r1, r2 = rng.sample([p for p in valid if p is not target], 2)
        f, cr = self._de.draw(rng)
        mutant = list(target)
        for i, gene in enumerate(self._genes):
            if gene.categorical:
                mutant[i] = pbest[i] if rng.random() < f else target[i]
                continue
            v = target[i] + f * (pbest[i] - target[i]) + f * (r1[i] - r2[i])
            if v < gene.low:
                v = (gene.low + target[i]) / 2
            elif v > gene.high:
                v = (gene.high + target[i]) / 2
            mutant[i] = gene.snap(v)
        child = self._clone(target, deme)
        with _using(rng):
            tools.cxUniform(child, mutant, cr)
        forced = rng.randrange(len(child))
        child[forced] = mutant[forced]
        child.parents = tuple(dict.fromkeys(
            p.trial_id for p in (target, pbest, r1, r2) if p.trial_id))  # fmt: skip
        child.origin, child.target, child.de = "differential", target, (f, cr)
        if self._decode(child) == self._decode(target):
            self._mutate(child)
            child.origin = "differential+mutation"
        return child

    def _is_copy(self, child: _Individual) -> bool:
        config = self._decode(child)
        return any(
            self._config_of(self._members[p]) == config for p in child.parents
            if p in self._members
        )  # fmt: skip

    def _config_of(self, member: _Individual) -> dict[str, Scalar]:
        """A member's config, decoded once per genome: a member is a parent many
        times, and decoding it for every child was most of :meth:`_is_copy`."""
        genes = tuple(member)
        if member.decoded is None or member.decoded[0] != genes:
            member.decoded = (genes, self._decode(member))
        return member.decoded[1]

    def _select(self, pool: list[_Individual], k: int) -> list[_Individual]:
        if not self.multi_objective:
            # DEAP's selTournament (k tournaments of tournament_size drawn with
            # rng.choice, the fittest of each by Fitness order), drawing from the RNG
            # directly: through the module forwarder, each draw was a context-variable
            # lookup, and selection a twentieth of an ask at 32,768 slots.
            rng, size = self._rng, self.tournament_size
            return [max([rng.choice(pool) for _ in range(size)], key=_FITNESS)
                    for _ in range(k)]
        with _using(self._rng):
            fronts = tools.sortNondominated(pool, len(pool))
            for rank, front in enumerate(fronts):
                tools.emo.assignCrowdingDist(front)
                for ind in front:
                    ind.rank_fitness = self._rank_fitness((rank, ind.fitness.crowding_dist))
            return tools.selTournament(pool, k, self.tournament_size, fit_attr="rank_fitness")

    def _survivors(self, pool: list[_Individual], k: int) -> list[_Individual]:
        if self.multi_objective:
            return tools.selNSGA2(pool, k)
        return tools.selBest(pool, k)

    def _worst(self, pool: list[_Individual], k: int) -> list[_Individual]:
        if self.multi_objective:
            return tools.selNSGA2(pool, len(pool))[len(pool) - k :]
        if k == 1:  # each async result: a scan, not a sort of the deme (selWorst's first)
            return [pool[_worst_index(pool)]]
        return tools.selWorst(pool, k)

    # --- ask ------------------------------------------------------------------------------

    def _initial(self) -> list[_Individual]:
        """Generation 0: warm-start seeds first, then random draws; demes interleaved."""
        per_deme: list[list[_Individual]] = [[] for _ in range(self.demes)]
        for deme, size in enumerate(self._deme_sizes):
            for _ in range(size):
                if self._seeds:
                    genes, origin = self._encode(self._seeds.pop(0)), "warm-start"
                else:
                    genes, origin = self._encode(sample_config(self.space, self._rng)), "random"
                per_deme[deme].append(self._individual(genes, deme, (), origin))
        return _interleave(per_deme)

    def _trial_for(self, ind: _Individual, generation: int) -> Trial:
        config = self._decode(ind)
        if self.space.constraints:
            # A child that breaks a constraint is never asked: it is replaced by a
            # random configuration that meets them, written back into its genes.
            config, replaced = repair(self.space, config, self._rng)
            if replaced:
                ind[:] = self._encode(config)
                config = self._decode(ind)
                ind.origin = f"{ind.origin}+repair"
        # Inactive genes stay in the genome (dormant: crossover and mutation carry
        # them), and the trial gets the active parameters only (Searcher._new_trial).
        trial = self._new_trial(
            config, generation=generation, deme=ind.deme, parents=ind.parents,
            origin=ind.origin,
        )  # fmt: skip
        ind.trial_id = trial.id
        self._members[trial.id] = ind
        return trial

    def _ask(self, n: int) -> list[Trial]:
        if not self._started:
            self._queue, self._started = self._initial(), True
        trials = []
        if self.schedule == "generational":
            while len(trials) < n and self._queue:
                ind = self._queue.pop(0)
                self._batch.append(ind)
                trials.append(self._trial_for(ind, self._generation))
            return trials
        while len(trials) < n:
            if self._queue:
                trials.append(self._trial_for(self._queue.pop(0), 0))
                continue
            bred = self._breed_one()
            if bred is None:
                # No deme has a result to breed from yet: a slot left idle until one
                # returns costs as much as a trial, so draw another random member (an
                # ask of 64 from a population of 16 gets 64); it joins its deme when
                # told, and the deme's worst leaves.
                deme = self._next_deme
                self._next_deme = (deme + 1) % self.demes
                genes = self._encode(sample_config(self.space, self._rng))
                bred = self._individual(genes, deme, (), "random"), 0
            trials.append(self._trial_for(*bred))
        return trials

    def _breed_one(self) -> tuple[_Individual, int] | None:
        for offset in range(self.demes):
            deme = (self._next_deme + offset) % self.demes
            if self._parents[deme]:
                child = self._vary_or(self._parents[deme], deme)
                generation = 1 + self._births[deme] // self._brood_sizes[deme]
                self._births[deme] += 1
                self._next_deme = (deme + 1) % self.demes
                return child, generation
        return None

    # --- tell -----------------------------------------------------------------------------

    def _tell(self, trial: Trial, observation: Observation) -> None:
        ind = self._members[trial.id]
        self._results += 1
        if observation.values is None:
            ind.failed = True
            self._failures_in_row += 1
            self._last_failure = observation.failure or "failed"
        else:
            ind.fitness.values = observation.values
            self._failures_in_row = 0
        self._count_success(ind, observation)
        self._de.score(ind)
        if self.schedule == "generational":
            if not self._queue and not any(i.trial_id in self._book.pending for i in self._batch):
                self._end_generation()
            return
        self._insert(ind)
        if self._failures_in_row >= self.population:
            self._stop(
                f"the last {self._failures_in_row} trials (a generation's worth) all failed"
                f" (last: {self._last_failure}); check the trainer before searching on"
            )
        elif self._results >= self.population and (
            (self._results - self.population) % self._generation_size == 0
        ):
            # A generation's worth of results since the first generation.
            done = 1 + (self._results - self.population) // self._generation_size
            if self.demes > 1 and done % self.migration_interval == 0:
                self._migrate()
            self._adapt_step()
            self._check_progress()

    def _count_success(self, ind: _Individual, observation: Observation) -> None:
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
        if self.multi_objective:
            members = [p for p in self._parents[ind.deme] if p.fitness.valid]
            best = None
        else:
            best = self._deme_best(ind.deme)
            members = [] if best is None else [best]
        if not members:
            return
        self._mutated += 1
        if observation.values is None:
            return
        if self.multi_objective:
            success = not any(p.fitness.dominates(ind.fitness) for p in members)
        else:
            success = ind.fitness > best
        self._successes += success

    def _deme_best(self, deme: int) -> Any:
        """The best valid fitness among a deme's parents (None: none), cached until
        the parents change."""
        cached = self._best_by_deme.get(deme)
        if cached is None or cached[0] != self._parents_changed:
            # Fitness compares its weighted values: max over them in C, not 2,048
            # calls of Fitness.__gt__ (the same first maximum).
            valid = [p.fitness for p in self._parents[deme] if p.fitness.wvalues]
            keys = [f.wvalues for f in valid]
            cached = (self._parents_changed, valid[keys.index(max(keys))] if valid else None)
            self._best_by_deme[deme] = cached
        return cached[1]

    def _adapt_step(self) -> None:
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
        self._de.adapt()
        if self.sigma_rule != "one_fifth" or not self._mutated:
            return
        rate = self._successes / self._mutated
        scale = self._step_scale * math.exp((rate - 0.2) / 0.8)
        self._step_scale = min(max(scale, 1e-4 / self.sigma), 1.0 / self.sigma)
        self._mutated = self._successes = 0

    def _insert(self, ind: _Individual) -> None:
        """Steady state: a result joins its deme and the deme's worst leaves.

        A failed child would be the worst (its imputed value is the deme's worst),
        so it is dropped at once instead.
        """
        if ind.failed:
            return
        deme = self._parents[ind.deme]
        cached = self._best_by_deme.get(ind.deme)
        fresh = cached is not None and cached[0] == self._parents_changed
        target = getattr(ind, "target", None)
        at = (next((k for k, p in enumerate(deme) if p is target), None)
              if target is not None and not self.multi_objective else None)
        if at is not None:
            # Differential evolution's one-to-one selection: the child replaces the
            # member it was built on if it is no worse, else it leaves.
            if not ind.fitness < target.fitness:
                deme[at] = ind
                self._parents_changed += 1
                self._orders.pop(ind.deme, None)  # the kept order no longer holds
            return
        if self.multi_objective:
            deme.append(ind)
            if len(deme) > self._deme_sizes[ind.deme]:
                worst = self._worst(deme, 1)[0]
                del deme[next(k for k, i in enumerate(deme) if i is worst)]
        else:
            order = self._orders.get(ind.deme)
            if order is None:
                order = self._orders[ind.deme] = _DemeOrder(deme)
            deme.append(ind)
            order.add(ind)
            if len(deme) > self._deme_sizes[ind.deme]:
                del deme[order.pop_worst()]
        self._parents_changed += 1
        if fresh and not self.multi_objective:
            # The deme's best after it: the newcomer if better (dropping the worst of
            # two or more leaves the best value), so a result costs no scan for it.
            best = cached[1]  # type: ignore[index]
            if best is None or ind.fitness.wvalues > best.wvalues:
                best = ind.fitness
            self._best_by_deme[ind.deme] = (self._parents_changed, best)

    def _end_generation(self) -> None:
        batch, generation = self._batch, self._generation
        ok = [i for i in batch if not i.failed]
        if not ok:
            self._stop(
                f"every trial of generation {generation} failed ({len(batch)} trials;"
                f" last: {self._last_failure}); check the trainer before searching on"
            )
            return
        worst = tuple(
            max(o.sign * i.fitness.values[j] for i in ok) * o.sign
            for j, o in enumerate(self.objectives)
        )
        for ind in batch:
            if ind.failed:
                ind.fitness.values = worst  # imputed: the worst of its generation
        for deme in range(self.demes):
            children = [i for i in batch if i.deme == deme]
            self._halls[deme].update([i for i in children if not i.failed])
            size = self._deme_sizes[deme]
            if (self.multi_objective or self.mode == "mu_plus_lambda" or generation == 0
                    or self.crossover == "de"):
                self._parents[deme] = self._survivors(self._parents[deme] + children, size)
            else:
                self._parents[deme] = self._with_elites(children, deme)
        self._parents_changed += 1
        self._orders.clear()
        self._batch = []
        self._generation += 1
        self._adapt_step()
        if self.demes > 1 and self._generation % self.migration_interval == 0:
            self._migrate()
        self._check_progress()
        if self._stop_reason is None and self.n_asked < self.planned:
            broods = [
                self._vary_and(self._parents[d], self._brood_sizes[d], d)
                if self.mode == "generational"
                else [self._vary_or(self._parents[d], d) for _ in range(self._brood_sizes[d])]
                for d in range(self.demes)
            ]
            self._queue = _interleave(broods)

    def _with_elites(self, children: list[_Individual], deme: int) -> list[_Individual]:
        """The children, the deme's best so far replacing its worst children."""
        parents = list(children)
        keep = min(self.elitism, self._deme_sizes[deme] - 1)
        for elite in list(self._halls[deme])[:keep]:
            if any(list(elite) == list(p) for p in parents):
                continue
            worst = min(parents, key=lambda p: p.fitness)
            if elite.fitness > worst.fitness:
                parents[next(k for k, p in enumerate(parents) if p is worst)] = elite
        return parents

    def _migrate(self) -> None:
        """DEAP's ring migration: each deme's best replace the next deme's worst."""
        if any(len(p) <= self.migration_size for p in self._parents):
            return
        tools.migRing(self._parents, self.migration_size, self._survivors, self._worst)
        self._orders.clear()
        self._parents_changed += 1

    def _check_progress(self) -> None:
        if self.multi_objective:
            mark: Any = frozenset(o.trial.id for o in self.pareto_front())
            improved = self._best_mark is None or not mark <= self._best_mark
        else:
            mark = self._best_key()
            improved = mark is not None and (self._best_mark is None or mark < self._best_mark)
        if improved:
            self._best_mark, self._stall = mark, 0
            return
        self._stall += 1
        if self.patience is not None and self._stall >= self.patience:
            self._stop(f"no improvement in the last {self._stall} generations (patience)")

    # --- snapshot (restore without recomputing the log's asks) ----------------------------

    def _internals(self) -> dict[str, Any] | None:
        """Every individual the search can still reach (each once, by its place in a
        table, so the demes, halls of fame, queue and batch share them as here), the
        RNG's state and the counters. Not kept: caches rebuilt on use (each deme's
        order and best, decoded configs), a told child's DE target (read only when it
        is told) and members no structure holds (only looked up as parents of a
        child bred from the current demes, which the table holds)."""
        table: list[_Individual] = []
        places: dict[int, int] = {}

        def place(ind: _Individual) -> int:
            at = places.get(id(ind))
            if at is None:
                at = places[id(ind)] = len(table)
                table.append(ind)
            return at

        pending = self._book.pending
        for hall in self._halls:
            items = list(reversed(hall.items))
            if len(hall.keys) != len(items) or any(
                    k is not i.fitness for k, i in zip(hall.keys, items, strict=True)):
                return None  # DEAP's hall of fame kept otherwise: replay the log instead
        parents = [[place(i) for i in deme] for deme in self._parents]
        halls = [[place(i) for i in hall.items] for hall in self._halls]
        queue, batch = [place(i) for i in self._queue], [place(i) for i in self._batch]
        waiting = [place(self._members[t]) for t in pending]
        members = {t: place(self._members[t])
                   for t in dict.fromkeys(i.trial_id for i in list(table) if i.trial_id)}
        untold = [i.trial_id is None or i.trial_id in pending for i in table]
        targets = [place(i.target) if told and i.target is not None else None
                   for i, told in zip(list(table), untold, strict=True)]
        rows = [[list(i), list(i.fitness.wvalues), i.trial_id, i.deme, list(i.parents),
                 i.origin, i.failed, target, None if i.de is None else list(i.de)]
                for i, target in zip(table, targets + [None] * (len(table) - len(targets)),
                                     strict=True)]
        version, internal, gauss = self._rng.getstate()
        mark = self._best_mark
        return {
            "individuals": rows, "parents": parents, "halls": halls, "queue": queue,
            "batch": batch, "waiting": waiting, "members": members,
            "rng": [version, list(internal), gauss],
            "step_scale": self._step_scale, "mutated": self._mutated,
            "successes": self._successes,
            "de": [self._de.mu_f, self._de.mu_cr, list(self._de._f), list(self._de._cr)],
            "generation": self._generation, "started": self._started, "stall": self._stall,
            "best_mark": (None if mark is None else {"front": sorted(mark)}
                          if isinstance(mark, frozenset) else {"key": list(mark)}),
            "failures_in_row": self._failures_in_row, "last_failure": self._last_failure,
            "births": list(self._births), "next_deme": self._next_deme,
            "results": self._results, "seeds": list(self._seeds),
            "parents_changed": self._parents_changed,
        }

    def _resume(self, internals: Any) -> Any:
        data = dict(internals)
        table = []
        for genes, wvalues, trial_id, deme, parents, origin, failed, _, de in data["individuals"]:
            ind = self._individual(list(genes), int(deme), tuple(parents), str(origin))
            ind.fitness.wvalues = tuple(float(v) for v in wvalues)
            ind.trial_id, ind.failed = trial_id, bool(failed)
            if de is not None:
                ind.de = (float(de[0]), float(de[1]))
            table.append(ind)
        for ind, row in zip(table, data["individuals"], strict=True):
            if row[7] is not None:
                ind.target = table[row[7]]
        parents = [[table[k] for k in deme] for deme in data["parents"]]
        halls = [[table[k] for k in hall] for hall in data["halls"]]
        if len(parents) != self.demes or len(halls) != len(self._halls):
            raise ValueError(f"a snapshot must have {self.demes} demes, but got {len(parents)}")
        queue, batch = [table[k] for k in data["queue"]], [table[k] for k in data["batch"]]
        members = {str(t): table[k] for t, k in data["members"].items()}
        if any(members.get(table[k].trial_id) is not table[k] for k in data["waiting"]):
            raise ValueError("a snapshot's pending trials must be its members")
        version, internal, gauss = data["rng"]
        rng_state = (int(version), tuple(int(x) for x in internal),
                     None if gauss is None else float(gauss))
        random.Random().setstate(rng_state)  # malformed: raises here, before any change
        de_state = data["de"]
        mark = data["best_mark"]
        best_mark: Any = (None if mark is None else frozenset(mark["front"]) if "front" in mark
                          else tuple(float(v) for v in mark["key"]))
        births = [int(b) for b in data["births"]]
        scalars = {key: data[key] for key in (
            "step_scale", "mutated", "successes", "generation", "started", "stall",
            "failures_in_row", "last_failure", "next_deme", "results", "seeds",
            "parents_changed")}

        def resume() -> None:
            self._parents, self._queue, self._batch = parents, queue, batch
            for hall, items in zip(self._halls, halls, strict=True):
                hall.items = list(items)
                hall.keys = [i.fitness for i in reversed(items)]
            self._members = members
            self._rng.setstate(rng_state)
            self._de.mu_f, self._de.mu_cr = float(de_state[0]), float(de_state[1])
            self._de._f, self._de._cr = list(de_state[2]), list(de_state[3])
            self._best_mark, self._births = best_mark, births
            self._step_scale = scalars["step_scale"]
            self._mutated, self._successes = scalars["mutated"], scalars["successes"]
            self._generation, self._started = scalars["generation"], scalars["started"]
            self._stall, self._failures_in_row = scalars["stall"], scalars["failures_in_row"]
            self._last_failure, self._next_deme = scalars["last_failure"], scalars["next_deme"]
            self._results, self._seeds = scalars["results"], list(scalars["seeds"])
            self._parents_changed = scalars["parents_changed"]
            self._best_by_deme.clear()
            self._orders.clear()
            # _best_key's running minimum: derived from the book, scanned again once
            self._best_seen, self._best_key_so_far, self._budgeted = 0, None, False

        return resume

    def _best_key(self) -> tuple[float, ...] | None:
        """The key of :meth:`best`'s observation (one objective), from the observations
        told since the last look: ``best`` scans all of them, and asked once a
        generation it cost a run's trials squared (at 32,768 simulated slots, CPU per
        event that grew with the run). Trials with a training budget (where ``best``
        compares the longest-trained only) take ``best`` itself."""
        observations = self._book.observations
        for index in range(self._best_seen, len(observations)):
            observation = observations[index]
            if observation.values is None:
                continue
            self._budgeted = self._budgeted or observation.trial.budget is not None
            key = self._key(observation.values)
            if self._best_key_so_far is None or key < self._best_key_so_far:
                self._best_key_so_far = key  # the first of the least, as min() keeps
        self._best_seen = len(observations)
        if self._budgeted:
            best = self.best()
            return None if best is None else self._key(best.values)  # type: ignore[arg-type]
        return self._best_key_so_far

    # --- warm start -----------------------------------------------------------------------

    def _warm_start(self, observations: list[Observation]) -> None:
        good = [o for o in observations if o.values is not None]
        if self.multi_objective:
            ordered: list[Observation] = []
            rest = good
            while rest and len(ordered) < self.population:
                front = pareto_front(rest, self.objectives)
                ordered += front
                rest = [o for o in rest if o not in front]
            good = ordered
        else:
            good.sort(key=lambda o: self._key(o.values))  # type: ignore[arg-type]
        unique: list[dict[str, Scalar]] = []
        for o in good:
            full = self.space.fill(o.config)
            config = {p.name: full[p.name] for p in self.space.searched}
            if config not in unique:
                unique.append(config)
        self._seeds = unique[: self.population]


def _interleave(groups: list[list[_Individual]]) -> list[_Individual]:
    """Round-robin over demes, so a partial ask serves every deme."""
    result = []
    for i in range(max((len(g) for g in groups), default=0)):
        result.extend(g[i] for g in groups if i < len(g))
    return result


class _DemeOrder:
    """A deme's members by weighted fitness, for the steady-state replacement: the
    worst leaves in O(log n) instead of a scan of a 2,048-strong deme per result.

    The worst is the first of the worst in the deme's list order, as ``min`` finds
    it: members are keyed by (weighted values, position), positions counting up as
    members are appended, which keeps list order (a deletion keeps the others' order).
    """

    def __init__(self, deme: list[_Individual]) -> None:
        self.heap = [(i.fitness.wvalues, k, i) for k, i in enumerate(deme)]
        heapq.heapify(self.heap)
        self.positions = list(range(len(deme)))  # each member's, in list order (sorted)
        self.next = len(deme)

    def add(self, ind: _Individual) -> None:
        heapq.heappush(self.heap, (ind.fitness.wvalues, self.next, ind))
        self.positions.append(self.next)
        self.next += 1

    def pop_worst(self) -> int:
        """Forget the worst member; its index in the deme's list."""
        _, position, _ = heapq.heappop(self.heap)
        index = bisect.bisect_left(self.positions, position)
        del self.positions[index]
        return index


def _worst_index(pool: list[Any]) -> int:
    """Where the first of the worst is (as ``min`` by fitness finds it): DEAP's
    Fitness compares its weighted values, so compare those, in C."""
    keys = [i.fitness.wvalues for i in pool]
    return keys.index(min(keys))
