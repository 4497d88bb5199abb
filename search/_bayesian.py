"""Bayesian search through Optuna's ask/tell: TPE, GP or CMA-ES.

Optuna is imported when a BayesianSearch is built, not with ``search``: it is
heavy, and its GP sampler pulls in torch.

Reproducible and resumable: each ask uses a sampler seeded from (seed, ask
number), so what a sampler proposes depends only on the study's trials and
that number, never on an RNG that has advanced in a process that crashed.
``restore`` therefore rebuilds the study from the recorded trials (their
parameters, results and the sampler's per-trial notes, e.g. CMA-ES's
optimizer state) in in-memory storage without running a sampler, and the next
ask is the one an uninterrupted search would have made.

Parallel asks: a batch of n must not be n copies of the same best guess.
Trials asked and not yet told stay RUNNING in the study, and TPE uses the
constant-liar strategy on them; Optuna's GP sampler conditions its batch
acquisition (qLogEI) on them, which serves the same end; CMA-ES draws a batch
from its search distribution, which is already spread out.

CMA-ES waits at the end of each generation instead of wasting a trial: its
update takes exactly one population of results, so once a generation's
last members are asked, a trial asked before they are told would be drawn
from the old distribution and never used by the update (Optuna keeps the
population's first members and drops the rest). With 2 at once that was one
trial in every population_size + 1; ``ask`` returns nothing instead, and the
free slot costs no more time than the wasted trial did (the next generation
starts when the last result of this one arrives either way).
"""

from __future__ import annotations

import json
import math
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from nestor.search import _optuna
from nestor.search._base import Observation, Searcher, Trial
from nestor.search._optuna import quiet as _quiet
from nestor.search._registry import register
from nestor.search._sampling import MAX_DRAWS, too_tight
from nestor.search._settings import SearchSettings, budget_setting, setting
from nestor.search.space import CategoricalParam, FloatParam, IntParam, Scalar, SearchSpace

SAMPLERS = ("tpe", "gp", "cmaes")  # and "lq-cmaes": search/_lq_cmaes.py, through make_searcher
_CMA_START = "nestor:cma_x0"  # the trial note that records where CMA-ES started
_CMA_GENERATION = "cma:generation"  # Optuna's note of the generation a trial belongs to
MODEL_RETRIES = 10  # proposals from the model before rejection draws at random
_REJECTED = "nestor:rejected"  # the trial note of the proposals before it that broke a constraint


@dataclass(frozen=True)
class BayesianSettings(SearchSettings):
    """The bayesian search's; ``sampler: lq-cmaes`` runs search/_lq_cmaes.py on them."""

    budget: int | dict[str, float] | None = budget_setting(20)
    sampler: Literal["tpe", "gp", "cmaes", "lq-cmaes"] = setting(
        "tpe", "tpe, gp, cmaes (Optuna's), or lq-cmaes (CMA-ES with a quadratic"
        " surrogate, pycma's: numbers only)")
    startup_trials: int | None = setting(
        None, "random trials before the model is used (default 10; cmaes and"
        " lq-cmaes 0: they start at the centre)", ge=0, words="at least 0")
    population: int | None = setting(
        None, "cmaes, lq-cmaes: trials per generation (default 4 + 3 ln n for"
        " n parameters)", ge=2)
    schedule: Literal["generational", "async"] = setting(
        "generational", "lq-cmaes: generational (each generation told whole; slots wait"
        " for its last trials) or async (every freed slot gets a candidate from the"
        " current distribution, which is updated whenever a population of results is in)")

    def check(self) -> None:
        if self.schedule == "async" and self.sampler != "lq-cmaes":
            raise ValueError("schedule async applies to sampler lq-cmaes only, but sampler"
                             f" is {self.sampler}")
        if self.population is not None and self.sampler not in ("cmaes", "lq-cmaes"):
            raise ValueError("population applies to samplers cmaes and lq-cmaes only, but"
                             f" sampler is {self.sampler}")
        if self.sampler == "lq-cmaes" and self.startup_trials not in (None, 0):
            raise ValueError(
                "startup_trials must be 0 for sampler lq-cmaes (it starts at the centre of"
                f" the space and models its own trials), but got {self.startup_trials!r}"
            )


@register
class BayesianSearch(Searcher):
    """Model-based search with one of Optuna's samplers.

    ``sampler``: "tpe" (default; multivariate TPE, for one objective and
    several alike, constant liar for parallel asks), "gp" (Gaussian process,
    log EI) or "cmaes" (one objective only). The first ``startup_trials``
    trials are random draws (default 10 for tpe and gp; 0 for cmaes);
    CMA-ES then starts from the better half of them, or with none from the
    centre of the space, as Optuna's own does. On the sine-fit problems
    (bench/auto_bench.py, 20 seeds) CMA-ES without them did better on all
    four: its own first generation explores more than 10 random draws buy.
    ``population`` (cmaes only) is CMA-ES's generation size, default Hansen's
    4 + floor(3 ln n): with more trials at once than that, the slots beyond
    it would idle through every generation, so set it to the trials at once
    (``algorithm: auto`` does).
    Failed trials are told to Optuna as failed: the model ignores them, and
    a region that keeps failing is not preferred.
    Warm start hands all of a previous run's observations to the model.
    """

    algorithm = "bayesian"

    Settings = BayesianSettings

    @classmethod
    def one_objective(cls, settings: Mapping[str, Any]) -> str | None:
        if settings.get("sampler") == "cmaes":
            return "CMA-ES optimizes one; sampler tpe or gp takes several"
        return None

    def __init__(self, space: SearchSpace, objectives: Any, **settings: Any) -> None:
        s = self.Settings(**settings)
        seed, budget, sampler = s.seed, s.budget, s.sampler
        startup_trials, population = s.startup_trials, s.population
        super().__init__(space, objectives, seed=seed, budget=budget)
        if sampler not in SAMPLERS:
            raise ValueError(f"sampler must be one of {', '.join(SAMPLERS)}, but got {sampler!r}")
        if startup_trials is None:
            startup_trials = 0 if sampler == "cmaes" else 10
        if sampler == "cmaes" and self.multi_objective:
            raise ValueError(
                "sampler must be tpe or gp for several objectives (CMA-ES optimizes one),"
                " but got 'cmaes'"
            )
        if not space.searched:
            raise ValueError("space must have at least one searched (non-constant) parameter")
        self.population = population
        optuna = self._optuna = _optuna.import_optuna("Bayesian search")
        self.sampler, self.startup_trials = sampler, startup_trials
        self._settings.update(sampler=sampler, startup_trials=startup_trials)
        if population is not None:  # only when set: older journals' states still restore
            self._settings["population"] = population
        self._distributions = _optuna.distributions(optuna, space)
        with _quiet(optuna):
            self._study = optuna.create_study(
                directions=["minimize" if o.mode == "min" else "maximize" for o in self.objectives],
                sampler=self._make_sampler(0),
            )
        self._numbers: dict[str, int] = {}
        self._notes: dict[str, dict[str, Any]] = {}
        self._replaying: list[tuple[Trial, dict[str, Any]]] | None = None
        self._queued: list[dict[str, Scalar]] = []  # search.enqueue's, asked first

    @property
    def planned(self) -> int:
        return self.budget if self.budget is not None else 20

    @property
    def study(self) -> Any:
        """The Optuna study (in-memory), e.g. for Optuna's plots."""
        return self._study

    def _make_sampler(self, index: int, retry: int = 0) -> Any:
        samplers = self._optuna.samplers
        seed = _optuna.sampler_seed(self.seed, index, retry)
        if retry >= MODEL_RETRIES:
            # The model's proposals keep breaking a constraint: GP's acquisition, which
            # leaves rejected trials out, would propose the same point for ever. Draw
            # at random (define-by-run still) until one meets them.
            return samplers.RandomSampler(seed=seed)
        if self.sampler == "tpe":
            # multivariate=True said outright: Optuna's default (None) is
            # multivariate for one objective but independent for several. In a
            # conditional space, group=True: one multivariate model per set of
            # parameters that occur together (Optuna's answer to define-by-run).
            extra = {"group": True} if self.space.conditions else {}
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", self._optuna.exceptions.ExperimentalWarning)
                return samplers.TPESampler(
                    seed=seed,
                    n_startup_trials=self.startup_trials,
                    multivariate=True,
                    constant_liar=True,
                    **extra,
                )
        if self.sampler == "gp":
            return samplers.GPSampler(
                seed=seed, n_startup_trials=self.startup_trials, warn_independent_sampling=False
            )
        # x0 is deprecated since Optuna 4.9 (removal planned for 6.0) but is the
        # one way in the pinned 5.0 to centre CMA-ES somewhere: source_trials
        # (warm-starting CMA-ES) is experimental and keeps the best 10 % of the
        # trials, so it refuses fewer than 10 (startup_trials may be fewer).
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            return samplers.CmaEsSampler(
                x0=self._cma_start(),
                seed=seed,
                n_startup_trials=self.startup_trials,
                warn_independent_sampling=False,
                popsize=self._cma_population(),
            )

    def _cma_population(self) -> int:
        """CMA-ES's population: its default 4 + floor(3 ln n) for the n numeric
        parameters it searches (categoricals are drawn at random), said to
        Optuna outright so that the generation barrier counts the same; or the
        ``population`` asked for."""
        if self.population is not None:
            return self.population
        n = sum(not isinstance(p, CategoricalParam) for p in self.space.searched)
        return 4 + math.floor(3 * math.log(max(n, 1)))

    def _cma_waiting(self) -> bool:
        """True while the current CMA-ES generation is fully asked but not told.

        The generation is the newest one any trial belongs to; it waits when
        its told trials and those still running make a whole population. A
        member that failed leaves a gap, so the next ask refills it (as
        Optuna does) rather than wait for a result that will never come.
        """
        state = self._optuna.trial.TrialState
        members = [
            (t.system_attrs[_CMA_GENERATION], t.state)
            for t in self._study.get_trials(deepcopy=False)
            if _CMA_GENERATION in t.system_attrs
        ]
        if not members:
            return False
        newest = max(g for g, _ in members)
        told = sum(g == newest and s == state.COMPLETE for g, s in members)
        running = sum(g == newest and s == state.RUNNING for g, s in members)
        return told < self._cma_population() <= told + running

    def _cma_start(self) -> dict[str, Any] | None:
        """Where CMA-ES starts: the weighted mean of the better half of the
        trials told before its first proposal.

        Optuna starts at the centre of the space, whatever the random startup
        trials found, which wastes them. The start is chosen once, when CMA-ES
        first proposes, and kept in that trial's notes (the journal), so every
        later ask and a restored search use the same start even after better
        results arrive (Optuna re-creates its optimizer from x0 until its first
        generation is complete). None (the centre) until a startup trial is
        complete, and always with ``startup_trials=0``: then CMA-ES proposes
        from its first result on (Optuna needs one result to learn the space;
        the trials asked before it are random draws), and neither that draw
        nor CMA-ES's own results may move the start, which would make the
        first generation depend on when its results arrive.
        Warm-start results count: a warm-started CMA-ES starts near the old best.
        """
        if not hasattr(self, "_study"):
            return None  # the sampler the study is created with asks nothing
        for trial in self._study.get_trials(deepcopy=False):
            if _CMA_START in trial.system_attrs:
                return dict(trial.system_attrs[_CMA_START])
        complete = [
            t
            for t in self._study.get_trials(
                deepcopy=False, states=(self._optuna.trial.TrialState.COMPLETE,)
            )
            if t.user_attrs.get("nestor_warm_start")
            or (self.startup_trials > 0 and _CMA_GENERATION not in t.system_attrs)
        ]
        if not complete:
            return None
        # CMA-ES's own mean update, applied to the trials so far as if they were
        # its generation 0: log-weighted recombination of the better half.
        # Measured against the best trial alone and against the centre, over 10
        # seeds (100 trials, 4 at once): the best trial alone is a noisy start
        # (worse than the centre on a sphere with a random optimum); the better
        # half's weighted mean beat the centre wherever the optimum is not at
        # the centre of the box.
        sign = 1.0 if self.objectives[0].mode == "min" else -1.0
        ranked = sorted(complete, key=lambda t: (sign * t.value, t.number))
        top = ranked[: max(1, len(ranked) // 2)]
        weights = [math.log(len(top) + 0.5) - math.log(i + 1) for i in range(len(top))]
        total = sum(weights)
        start: dict[str, Any] = {}
        for param in self.space.searched:
            if isinstance(param, CategoricalParam):
                continue  # CMA-ES leaves categoricals to random draws
            assert isinstance(param, FloatParam | IntParam)
            have = [(w, t.params[param.name]) for w, t in zip(weights, top, strict=True)
                    if param.name in t.params]
            if not have:
                continue  # inactive in every trial so far (a conditional space)
            total = sum(w for w, _ in have)
            if param.log:  # CMA-ES searches log parameters in log space
                mean = math.exp(sum(w * math.log(v) for w, v in have) / total)
            else:
                mean = sum(w * v for w, v in have) / total
            if isinstance(param, IntParam):
                mean = round(mean)
            start[param.name] = min(max(mean, param.low), param.high)
        return start

    # --- ask/tell -------------------------------------------------------------------------

    def _encode(self, config: Mapping[str, Scalar]) -> dict[str, Any]:
        return _optuna.encode(self.space, config)

    def _decode(self, params: Mapping[str, Any]) -> dict[str, Scalar]:
        return _optuna.decode(self.space, params)

    def _ask(self, n: int) -> list[Trial]:
        optuna = self._optuna
        trials = []
        for _ in range(n):
            if self._replaying is not None:
                if not self._replaying:
                    break  # the recorded ask returned fewer (CMA-ES's generation barrier)
                recorded, notes = self._replaying.pop(0)
                if self._queued:  # asked from the queue then: it is spent
                    self._queued.pop(0)
                own = {k: v for k, v in notes.items() if k != _REJECTED}  # Optuna's
                self._add_rejected(notes.get(_REJECTED, []))
                params = self._encode(recorded.config)
                frozen = optuna.trial.create_trial(
                    state=optuna.trial.TrialState.RUNNING,
                    params=params,
                    distributions=_optuna.of(self._distributions, params),
                    system_attrs=own,
                )
                with _quiet(optuna):
                    self._study.add_trial(frozen)
                number = len(self._study.get_trials(deepcopy=False)) - 1
                origin = recorded.origin
            else:
                complete = (optuna.trial.TrialState.COMPLETE,)
                told = len(self._study.get_trials(deepcopy=False, states=complete))
                if self.sampler == "cmaes" and told >= self.startup_trials and self._cma_waiting():
                    break  # the end of a generation: see the module's docstring
                queued = bool(self._queued)
                if queued:  # Optuna asks an enqueued trial's params before sampling
                    with _quiet(optuna):
                        self._study.enqueue_trial(self._encode(self._queued.pop(0)))
                asked, rejected = self._propose()
                number = asked.number
                if self.sampler == "cmaes" and told >= self.startup_trials:
                    self._keep_cma_start(asked._trial_id)
                notes = self._study._storage.get_trial_system_attrs(asked._trial_id)
                notes = json.loads(json.dumps(notes))  # the journal holds JSON
                if rejected:
                    notes[_REJECTED] = rejected
                origin = "model" if told >= self.startup_trials else "random"
                if self.sampler == "cmaes" and _CMA_GENERATION not in notes:
                    origin = "random"  # Optuna draws at random before any result
                if queued:
                    origin = "enqueued"
                params = asked.params
            trial = self._new_trial(self._decode(params), origin=origin)
            self._numbers[trial.id] = number
            self._notes[trial.id] = notes
            trials.append(trial)
        return trials

    def _propose(self) -> tuple[Any, list[dict[str, Any]]]:
        """A trial from the sampler, with its parameters; and the parameters of the
        proposals before it that broke a constraint.

        A conditional space is asked define-by-run (``_optuna.suggest``): the trial
        has exactly its active parameters. A proposal that breaks a constraint is
        told to Optuna as pruned (TPE ranks a pruned trial below every complete one,
        so it learns to avoid the region; CMA-ES and GP leave it out), and another
        is asked from a sampler seeded afresh (after ``MODEL_RETRIES`` of them, from a
        random sampler: GP would propose the same point again), up to
        ``MAX_DRAWS`` in all; the rejected ones go into the trial's notes, so a
        restored study holds them too and proposes what this one would."""
        optuna = self._optuna
        rejected: list[dict[str, Any]] = []
        for retry in range(MAX_DRAWS):
            self._study.sampler = self._make_sampler(self.n_asked, retry)
            with _quiet(optuna):
                if self.space.conditions:
                    asked = self._study.ask()
                    params = _optuna.suggest(self.space, asked, self._distributions)
                else:
                    asked = self._study.ask(self._distributions)
                    params = asked.params
            if not self.space.constraints or self.space.satisfies(
                    self.space.project({**self._decode(params), **self.space.constants()})):
                return asked, rejected
            with _quiet(optuna):
                self._study.tell(asked.number, state=optuna.trial.TrialState.PRUNED)
            rejected.append(json.loads(json.dumps(params)))
        raise too_tight(self.space)

    def _add_rejected(self, rejected: list[dict[str, Any]]) -> None:
        """The journal's rejected proposals into the study again, as pruned trials."""
        optuna = self._optuna
        for params in rejected:
            frozen = optuna.trial.create_trial(
                state=optuna.trial.TrialState.PRUNED, params=params,
                distributions=_optuna.of(self._distributions, params))
            with _quiet(optuna):
                self._study.add_trial(frozen)

    def _keep_cma_start(self, trial_id: int) -> None:
        """Note CMA-ES's start on the first trial it proposed from it."""
        trials = self._study.get_trials(deepcopy=False)
        if any(_CMA_START in t.system_attrs for t in trials):
            return
        start = self._cma_start()
        if start is not None:
            self._study._storage.set_trial_system_attr(trial_id, _CMA_START, start)

    def _event_extra(self, trials: list[Trial]) -> dict[str, Any]:
        return {"notes": {t.id: self._notes[t.id] for t in trials}}

    def _replay_ask(self, n: int, recorded: list[Trial], event: Mapping[str, Any]) -> None:
        """Rebuild the recorded trials in the study; no sampler runs."""
        notes = event.get("notes", {})
        self._replaying = [(t, dict(notes.get(t.id, {}))) for t in recorded]
        try:
            trials = self.ask(n)
        finally:
            self._replaying = None
        if [t.id for t in trials] != [t.id for t in recorded]:
            raise ValueError(
                f"restore must replay the recorded search, but ask returned ids"
                f" {[t.id for t in trials]} where the state recorded {[t.id for t in recorded]}"
            )

    def _tell(self, trial: Trial, observation: Observation) -> None:
        optuna = self._optuna
        with _quiet(optuna):
            if observation.values is None:
                self._study.tell(self._numbers[trial.id], state=optuna.trial.TrialState.FAIL)
            else:
                self._study.tell(self._numbers[trial.id], list(observation.values))

    def _enqueue(self, configs: list[dict[str, Scalar]]) -> None:
        self._queued.extend(configs)

    def _warm_start(self, observations: list[Observation]) -> None:
        optuna = self._optuna
        for o in observations:
            frozen = optuna.trial.create_trial(
                state=optuna.trial.TrialState.FAIL
                if o.values is None
                else optuna.trial.TrialState.COMPLETE,
                values=None if o.values is None else list(o.values),
                params=self._encode(o.config),
                distributions=_optuna.of(self._distributions, self._encode(o.config)),
                user_attrs={"nestor_warm_start": True},
            )
            with _quiet(optuna):
                self._study.add_trial(frozen)
