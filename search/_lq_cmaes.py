"""lq-CMA-ES (Hansen, 2019) as an ask/tell search: CMA-ES with a global
linear-quadratic surrogate, through pycma's own pieces.

Why: on a smooth objective of a few numbers (the seed's sine-fit, whose error
is a quadratic of its coefficients; a well-behaved validation loss near its
optimum), CMA-ES spends hundreds of trials learning a shape that a quadratic
model fitted to the trials already run describes exactly. lq-CMA-ES fits that
model (linear at first, then diagonal, then full, weighted by rank) and ranks
each generation on it; only the candidates the model ranks best are run for
real, a few at a time, until the model's ranking of the trials run agrees
with their results (Kendall's tau at least 0.85). Where the model is poor
(noise, plateaus, many optima) the agreement never comes, every candidate is
run, and the search is plain CMA-ES. On sine-fit (7 coefficients, 130 trials,
2 at once) it found errors thousands of times below CMA-ES's
(``bench/auto_bench.py``).

pycma (Hansen's reference implementation, package ``cma``) supplies the
strategy (``CMAEvolutionStrategy``: ask, tell, inject, bounds), the model
(``fitness_models.LQModel``), its settings and the bookkeeping of a
generation (``SurrogatePopulation`` and its ``EvaluationManager``). Its
driver (``SurrogatePopulation.__call__``) evaluates one candidate after the
other through a function call; here the same steps run as a state machine
driven by ask and tell, so trials run on the cluster:

1. a generation starts: ``es.ask()`` draws its candidates, and the model (once
   it has two points) orders them;
2. the first ``k`` candidates not yet run are asked (pycma's count: 2 % of the
   generation, or what the model needs to reach 3 points), at least as many as
   the ask offers slots, so no slot idles while the model waits for one trial;
3. when they are all told, their results join the model; if tau >= 0.85 (or
   every candidate has run) the generation ends: the strategy is told the
   model's values, shifted so that none is better than the best true result
   (the true ones where all ran), and the model's optimum is injected into the
   next generation; otherwise ``k`` grows by half and step 2 repeats with the
   model reordered.

Parameters are scaled to [0, 1] (log parameters in log space, integers
rounded when a trial is made) and CMA-ES keeps inside with pycma's bound
transform; it starts at the centre with a step of 0.3. A failed trial is
left out of the model and ranked last in its generation. When the strategy
stops (its step or the spread of its values has collapsed) and budget is
left, it restarts with twice the population and a fresh model (IPOP, as
``cma.fmin_lq_surr2``).

Deterministic and resumable: pycma draws from NumPy's global generator, so
every call into it runs with this search's own generator state swapped in
(seeded from ``seed``), and nothing else in the process can change what it
asks next. ``restore`` replays the journalled asks and tells.
"""

from __future__ import annotations

import contextlib
import math
import random
import warnings
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from nestor.search._base import Observation, Searcher, Trial
from nestor.search._bayesian import BayesianSettings
from nestor.search._registry import variant
from nestor.search._sampling import repair
from nestor.search.space import (
    CategoricalParam,
    FloatParam,
    IntParam,
    SearchSpace,
    from_unit,
    to_unit,
)

SIGMA0 = 0.3  # initial step, in units of each parameter's (scaled) range
RESTART_POPULATION_FACTOR = 2  # IPOP


def _worse_than(values: Iterable[float]) -> float:
    """What a failed trial is told CMA-ES it scored: worse than every finite value
    (CMA-ES takes no missing values; one objective, minimised)."""
    finite = [v for v in values if math.isfinite(v)]
    worst = max(finite) if finite else 0.0
    return worst + abs(worst) + 1.0


def _import_cma() -> Any:
    try:
        import cma
        import cma.fitness_models
    except ImportError as exc:  # pragma: no cover - cma is a dependency
        raise ImportError("sampler lq-cmaes needs the cma package (pycma)") from exc
    return cma


class _Generation:
    """One CMA-ES generation: its candidates, which ran, which run, and the
    evaluation count it aims at before the model is checked again."""

    def __init__(self, cma: Any, candidates: list[Any], order: list[int], target: int) -> None:
        self.evals = cma.fitness_models.SurrogatePopulation.EvaluationManager(candidates)
        self.order = order  # the model's ranking of the candidates, best first
        self.target = target  # evaluations (told) after which the model is checked
        self.running: dict[str, int] = {}  # trial id -> candidate index
        self.failed: set[int] = set()

    def next_candidates(self) -> list[int]:
        started = {i for i, done in enumerate(self.evals.evaluated) if done}
        started |= set(self.running.values())
        return [i for i in self.order if i not in started]


def one_dimension(name: str) -> str:
    """Why lq-CMA-ES cannot search ``name`` alone: pycma's CMA-ES has no one-dimensional
    form (its first update fails), so a space must search two numbers or more."""
    return (f"sampler lq-cmaes searches two or more parameters (CMA-ES has no"
            f" one-dimensional form), but the space searches one, {name}: use sampler tpe"
            " or gp, or search another parameter")


@variant("bayesian", sampler="lq-cmaes")
class LQCMAESSearch(Searcher):
    """CMA-ES with a linear-quadratic surrogate (``sampler: lq-cmaes``).

    One objective, numeric parameters only (floats and integers).
    ``population`` is CMA-ES's generation size (default Hansen's
    4 + floor(3 ln n)). Takes the bayesian search's settings so that
    ``algorithm: bayesian, sampler: lq-cmaes`` reads like the other samplers;
    ``startup_trials`` must be 0 (it starts at the centre of the space and
    builds its model from its own trials).
    """

    algorithm = "bayesian"

    Settings = BayesianSettings

    @classmethod
    def one_objective(cls, settings: Mapping[str, Any]) -> str | None:
        return "lq-CMA-ES optimizes one; sampler tpe or gp takes several"

    def __init__(self, space: SearchSpace, objectives: Any, **settings: Any) -> None:
        s = self.Settings(**{"sampler": "lq-cmaes", **settings})
        seed, budget, sampler = s.seed, s.budget, s.sampler
        population, schedule = s.population, s.schedule
        super().__init__(space, objectives, seed=seed, budget=budget)
        if sampler != "lq-cmaes":
            raise ValueError(f"sampler must be lq-cmaes for this search, but got {sampler!r}")
        if self.multi_objective:
            raise ValueError(
                "sampler must be tpe or gp for several objectives (lq-CMA-ES optimizes one),"
                " but got 'lq-cmaes'"
            )
        if not space.searched:
            raise ValueError("space must have at least one searched (non-constant) parameter")
        categorical = [p.name for p in space.searched if isinstance(p, CategoricalParam)]
        if categorical:
            raise ValueError(
                "sampler lq-cmaes searches numbers only, but the space has categorical"
                f" parameter(s) {', '.join(categorical)}: use sampler tpe"
            )
        if len(space.searched) < 2:
            raise ValueError(one_dimension(space.searched[0].name))
        self.sampler, self.startup_trials, self.population = "lq-cmaes", 0, population
        self.schedule = schedule
        self._settings.update(sampler="lq-cmaes", startup_trials=0)
        if population is not None:
            self._settings["population"] = population
        if schedule != "generational":  # only when set: older journals' states still restore
            self._settings["schedule"] = schedule
        self._cma = _import_cma()
        import numpy as np

        self._np = np
        self._params: list[FloatParam | IntParam] = list(space.searched)  # type: ignore[arg-type]
        self._rng_state = np.random.RandomState(seed).get_state()
        self._x0 = [0.5] * len(self._params)
        self._popsize = population
        self._restarts = 0
        self._es: Any = None
        self._surrogate: Any = None
        self._generation: _Generation | None = None
        # The async schedule's: each running trial's candidate and the distribution it
        # came from (restart, iteration); the results in since the strategy's last update.
        self._steady: dict[str, tuple[Any, tuple[int, int]]] = {}
        self._arrived: list[tuple[Any, float | None, tuple[int, int]]] = []
        self._optimum: Any = None  # the model's optimum, to be asked next
        self._drawn = False  # whether pycma has drawn since its last update

    @property
    def planned(self) -> int:
        return self.budget if self.budget is not None else 20

    @property
    def restarts(self) -> int:
        """How many times CMA-ES has restarted with a larger population."""
        return self._restarts

    # --- pycma, with this search's own random state ----------------------------------------

    @contextlib.contextmanager
    def _own_rng(self) -> Iterator[None]:
        """Run pycma on this search's generator state, not the process's, and keep
        its warnings (a flat generation, an all-failed one) off the driver's console:
        what they say is in the trials' results."""
        np = self._np
        outside = np.random.get_state()
        np.random.set_state(self._rng_state)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                yield
        finally:
            self._rng_state = np.random.get_state()
            np.random.set_state(outside)

    def _start_strategy(self) -> None:
        cma = self._cma
        options: dict[str, Any] = {"bounds": [0.0, 1.0], "seed": float("nan"), "verbose": -9,
                                   "verb_log": 0, "verb_disp": 0}  # fmt: skip
        if self._popsize is not None:
            options["popsize"] = self._popsize
        if self.schedule == "async":
            options["CMA_mirrors"] = 0  # mirrors come through injection, in asks of 2+ only
        self._es = cma.CMAEvolutionStrategy(list(self._x0), SIGMA0, options)
        self._popsize = self._es.popsize
        self._surrogate = cma.fitness_models.SurrogatePopulation(None)
        self._surrogate.settings.logging_push = False

    def _restart(self) -> None:
        """IPOP: the strategy afresh, its population RESTART_POPULATION_FACTOR times larger."""
        self._restarts += 1
        self._popsize = int(self._popsize * RESTART_POPULATION_FACTOR)
        self._start_strategy()

    def _trial_of(self, x: Any) -> Trial:
        """A new trial of the candidate ``x`` (unit coordinates) of the current strategy."""
        config = {p.name: from_unit(p, float(u)) for p, u in zip(self._params, x, strict=True)}
        origin = "lq-cmaes"
        if self.space.constraints:
            # A candidate that breaks a constraint is not asked: a random configuration
            # that meets them is, and its result is told for the candidate (repair
            # without write-back: CMA-ES's distribution learns the candidate's region
            # is worth that much). Drawn from (seed, trial number): the same on replay.
            rng = random.Random(f"{self.seed}:{self.n_asked}:repair")
            config, replaced = repair(self.space, config, rng)
            origin = "lq-cmaes+repair" if replaced else origin
        return self._new_trial(config, generation=self._es.countiter, deme=self._restarts,
                               origin=origin)

    def _start_generation(self) -> _Generation:
        if self._es is None:
            self._start_strategy()
        elif self._es.stop():
            self._restart()
        candidates = self._es.ask()
        model, settings = self._surrogate.model, self._surrogate.settings
        if settings.model_max_size_factor * len(candidates) > model.settings.max_absolute_size:
            if model.settings.max_absolute_size:
                model.reset()  # the population grew: pycma starts the model afresh
            model.settings.max_absolute_size = settings.model_max_size_factor * len(candidates)
        target = int(1 + max(len(candidates) * settings.min_evals_percent / 100,
                             3 / model.settings.truncation_ratio - model.size))  # fmt: skip
        return _Generation(self._cma, candidates, self._order(candidates), target)

    def _order(self, candidates: list[Any]) -> list[int]:
        model = self._surrogate.model
        if model.size <= 1:
            return list(range(len(candidates)))
        return [int(i) for i in self._np.argsort([model.eval(x) for x in candidates])]

    # --- ask/tell -------------------------------------------------------------------------

    def _ask(self, n: int) -> list[Trial]:
        if self.schedule == "async":
            return self._ask_async(n)
        with self._own_rng():
            if self._generation is None:
                self._generation = self._start_generation()
            generation = self._generation
            evals = generation.evals
            if not generation.running:
                # A step starts: run at least as many as there are slots to fill.
                generation.target = max(generation.target, min(evals.evaluations + n, len(evals.X)))
            room = generation.target - evals.evaluations - len(generation.running)
            chosen = generation.next_candidates()[: max(0, min(n, room))]
        trials = []
        for index in chosen:
            trial = self._trial_of(evals.X[index])
            generation.running[trial.id] = index
            trials.append(trial)
        return trials

    def _tell(self, trial: Trial, observation: Observation) -> None:
        if self.schedule == "async":
            self._tell_async(trial, observation)
            return
        generation = self._generation
        if generation is None or trial.id not in generation.running:
            return  # a trial of a generation already closed (cannot happen: see _ask)
        index = generation.running.pop(trial.id)
        evals, model = generation.evals, self._surrogate.model
        with self._own_rng():
            if observation.values is None:
                evals.evaluated[index] = True
                generation.failed.add(index)
            else:
                value = self._key(observation.values)[0]
                evals.add_eval(index, value)
                model.add_data_row(evals.X[index], value)
            if generation.running or (
                evals.evaluations < generation.target and evals.remaining
            ):
                return
            self._check(generation)

    def _check(self, generation: _Generation) -> None:
        """All asked candidates are told: end the generation, or run more of it."""
        evals, model, settings = generation.evals, self._surrogate.model, self._surrogate.settings
        model.sort(generation.target)
        tau = model.kendall(settings.n_for_tau(len(evals.X), evals.evaluations))
        if evals.remaining and tau < settings.tau_truth_threshold:
            generation.target += math.ceil(generation.target / 2)
            generation.order = self._order(evals.X)
            return
        model.sort(settings.model_sort_globally or evals.evaluations)
        model.adapt_max_relative_size(tau)
        values = list(evals.surrogate_values(model.eval, settings.return_true_fitnesses))
        if generation.failed:
            penalty = _worse_than(v for i, v in enumerate(values)
                                  if i not in generation.failed)
            for i in generation.failed:
                values[i] = penalty
        self._es.tell(evals.X, values)
        if model.size > 1:
            self._es.inject([model.xopt])
        self._generation = None

    # --- the async schedule -----------------------------------------------------------------

    def _ask_async(self, n: int) -> list[Trial]:
        """Every slot offered gets a candidate drawn from the current distribution
        (the model's optimum first, where one was injected): no slot waits for the rest
        of a generation."""
        with self._own_rng():
            if self._es is None:
                self._start_strategy()
                self._size_model()
            drawn = []
            if self._optimum is not None:
                drawn.append(self._optimum)
                self._optimum = None
            if n > len(drawn):
                drawn.extend(self._es.ask(n - len(drawn)))
                self._drawn = True
        born = (self._restarts, self._es.countiter)
        trials = []
        for x in drawn:
            trial = self._trial_of(x)
            self._steady[trial.id] = (x, born)
            trials.append(trial)
        return trials

    def _tell_async(self, trial: Trial, observation: Observation) -> None:
        """A result joins the model at once; when a population of results is in, the
        strategy is told them (those drawn from an earlier distribution clipped to a
        step it could have made, pycma's check) and the model's optimum is injected."""
        if trial.id not in self._steady:
            return
        x, born = self._steady.pop(trial.id)
        value = None if observation.values is None else self._key(observation.values)[0]
        with self._own_rng():
            if value is not None:
                self._surrogate.model.add_data_row(x, value)
            self._arrived.append((x, value, born))
            # pycma updates once per draw: results beyond a population wait for the next.
            if len(self._arrived) >= self._popsize and self._drawn:
                self._update_async()

    def _update_async(self) -> None:
        arrived = self._arrived[: self._popsize]
        self._arrived, self._drawn = self._arrived[self._popsize :], False
        penalty = _worse_than(v for _, v, _ in arrived if v is not None)
        values = [v if v is not None and math.isfinite(v) else penalty
                  for _, v, _ in arrived]  # fmt: skip
        now = (self._restarts, self._es.countiter)
        stale = [i for i, (_, _, born) in enumerate(arrived) if born != now]
        self._es.tell([x for x, _, _ in arrived], values, check_points=stale or None)
        model = self._surrogate.model
        model.sort()
        if model.size > 1:  # asked next, outside pycma (which injects in asks of 2+ only)
            self._optimum = self._np.clip(model.xopt, 0.0, 1.0)
        if self._es.stop():
            self._restart()
            self._size_model()
            self._optimum = None

    def _size_model(self) -> None:
        """The model's largest size for this population, as pycma's. The async schedule
        keeps the model's rows across an IPOP restart (results of the same objective;
        pycma's prune keeps the model within this size as rows arrive); the generational
        one starts the model afresh when the population grows, as pycma does
        (``_start_generation``)."""
        model, settings = self._surrogate.model, self._surrogate.settings
        model.settings.max_absolute_size = settings.model_max_size_factor * self._popsize

    def _warm_start(self, observations: list[Observation]) -> None:
        """Start at the best previous result."""
        done = [o for o in observations if o.values is not None]
        if done:
            best = min(done, key=lambda o: self._key(o.values))  # type: ignore[arg-type]
            self._x0 = [to_unit(p, self._whole(best.config)[p.name]) for p in self._params]
