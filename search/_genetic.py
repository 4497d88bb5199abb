"""Genetic search on DEAP's operators: demes, elitism, NSGA-II, async breeding.

The search is composed of parts, one job each: the genome and DEAP's RNG plumbing
(search/_genetic_genome.py), variation and selection (search/_genetic_variation.py),
the self-adaptation of the mutation's step (search/_genetic_step.py), the
asynchronous steady-state schedule (search/_genetic_steady.py), the settings and the
generations they plan (search/_genetic_plan.py) and the population's snapshot
(search/_genetic_snapshot.py). :class:`GeneticSearch` holds the generational
algorithm: the demes, a generation's barrier, imputation of failures, elitism,
survivors, migration and patience.

No ``creator.create``: each searcher builds its own Fitness class.
"""

from __future__ import annotations

import random
from typing import Any

from deap import base, tools

from nestor.search._base import Observation, Searcher, Trial, pareto_front
from nestor.search._genetic_genome import Gene, Individual, interleave
from nestor.search._genetic_plan import GeneticSettings, plan_generations, split
from nestor.search._genetic_snapshot import internals, resume
from nestor.search._genetic_steady import SteadyState
from nestor.search._genetic_step import StepControl
from nestor.search._genetic_variation import Variation
from nestor.search._registry import register
from nestor.search._sampling import repair, sample_config
from nestor.search.space import Scalar, SearchSpace

__all__ = ["GeneticSearch", "GeneticSettings", "plan_generations"]


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
        self._steps = StepControl(self)  # the mutation's step, DE's F and CR
        self._variation = Variation(self)
        self._steady = SteadyState(self)  # schedule "async"

        self._rng = random.Random(seed)
        self._genes = [Gene.of(p) for p in space.searched]
        self._numeric = [i for i, g in enumerate(self._genes) if not g.categorical]
        self._categorical = [i for i, g in enumerate(self._genes) if g.categorical]
        # Maximize weights +1, minimize -1: DEAP's fitness compares weighted values.
        weights = tuple(-o.sign for o in self.objectives)
        self._fitness = type("Fitness", (base.Fitness,), {"weights": weights})
        self._rank_fitness = type("RankFitness", (base.Fitness,), {"weights": (-1.0, 1.0)})
        self._deme_sizes = split(population, demes)
        self._brood_sizes = (
            split(self.offspring, demes) if mode == "mu_plus_lambda" else self._deme_sizes
        )
        self._parents: list[list[Individual]] = [[] for _ in range(demes)]
        # Bumped whenever a deme's parents change; _deme_best caches by it, so a
        # result is not compared with every parent of a 2,048-strong deme.
        self._parents_changed = 0
        self._best_by_deme: dict[int, tuple[int, Any]] = {}
        self._halls = [tools.HallOfFame(max(1, min(elitism, s - 1))) for s in self._deme_sizes]
        self._members: dict[str, Individual] = {}
        self._queue: list[Individual] = []
        self._batch: list[Individual] = []  # the current generation, once asked
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
        self._results = 0

    # --- sizes --------------------------------------------------------------------------

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
        return self._steps.mutation_step

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
    ) -> Individual:
        ind = Individual(genes)
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

    # --- ask ------------------------------------------------------------------------------

    def _initial(self) -> list[Individual]:
        """Generation 0: warm-start seeds first, then random draws; demes interleaved."""
        per_deme: list[list[Individual]] = [[] for _ in range(self.demes)]
        for deme, size in enumerate(self._deme_sizes):
            for _ in range(size):
                if self._seeds:
                    genes, origin = self._encode(self._seeds.pop(0)), "warm-start"
                else:
                    genes, origin = self._encode(sample_config(self.space, self._rng)), "random"
                per_deme[deme].append(self._individual(genes, deme, (), origin))
        return interleave(per_deme)

    def _trial_for(self, ind: Individual, generation: int) -> Trial:
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
        if self.schedule != "generational":
            return self._steady.ask(n)
        trials = []
        while len(trials) < n and self._queue:
            ind = self._queue.pop(0)
            self._batch.append(ind)
            trials.append(self._trial_for(ind, self._generation))
        return trials

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
        self._steps.told(ind, observation)
        if self.schedule != "generational":
            self._steady.told(ind)
        elif not self._queue and not any(i.trial_id in self._book.pending for i in self._batch):
            self._end_generation()

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
        variation = self._variation
        for deme in range(self.demes):
            children = [i for i in batch if i.deme == deme]
            self._halls[deme].update([i for i in children if not i.failed])
            size = self._deme_sizes[deme]
            if (self.multi_objective or self.mode == "mu_plus_lambda" or generation == 0
                    or self.crossover == "de"):
                self._parents[deme] = variation.survivors(self._parents[deme] + children, size)
            else:
                self._parents[deme] = self._with_elites(children, deme)
        self._parents_changed += 1
        self._steady.forget_orders()
        self._batch = []
        self._generation += 1
        self._steps.adapt()
        if self.demes > 1 and self._generation % self.migration_interval == 0:
            self._migrate()
        self._check_progress()
        if self._stop_reason is None and self.n_asked < self.planned:
            broods = [
                variation.vary_and(self._parents[d], self._brood_sizes[d], d)
                if self.mode == "generational"
                else [variation.vary_or(self._parents[d], d) for _ in range(self._brood_sizes[d])]
                for d in range(self.demes)
            ]
            self._queue = interleave(broods)

    def _with_elites(self, children: list[Individual], deme: int) -> list[Individual]:
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
        variation = self._variation
        tools.migRing(self._parents, self.migration_size, variation.survivors, variation.worst)
        self._steady.forget_orders()
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


    # --- snapshot (restore without recomputing the log's asks) ----------------------------

    def _internals(self) -> dict[str, Any] | None:
        """The population (search/_genetic_snapshot.py)."""
        return internals(self)

    def _resume(self, internals: Any) -> Any:
        return resume(self, internals)

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

