"""Successive halving that continues trials: ASHA, Hyperband and BOHB-style.

The budget of a trial (``Trial.budget``) is in whatever unit the stage trains
by (epochs unless it maps the budget to another trainer setting), from
``min_budget`` up to ``max_budget`` in rungs a factor ``reduction_factor``
(η) apart, counted down from max_budget and rounded to whole numbers where
both ends are whole (1-100, η = 3: 1, 4, 11, 33, 100; see :func:`rung_budgets`).
A trial promoted from rung i to rung i + 1 is a new trial
with the same configuration, ``continue_from`` the trial it promotes and
``budget`` the next rung's: the trainer loads that checkpoint (weights and
optimizer state) and trains on up to the new budget, so no epoch is paid for
twice. ``budget`` (the searcher's) counts trials, promotions included; the
training they ask for is :attr:`budget_used` (a promotion from 3 to 9 epochs
costs 6).

Where Optuna serves and where it does not: new configurations can be drawn by
Optuna's ``TPESampler`` (``sampler="tpe"``, BOHB-style), through the same
ask/tell on an in-memory study that the Bayesian search uses. The model is
fitted on the results of the highest rung that has at least ``startup_trials``
successful trials. Hyperband (BOHB) takes the paper's pair of rules together
(Falkner et al., 2018, section 4.2): N_min + 2 = d + 3 results for d searched
parameters, so a higher rung's model takes over as soon as it can, and the
random fraction ``random_fraction`` (ρ = 1/3 of new configurations drawn at
random), which keeps that early, thin model from narrowing the search.

ASHA has no random fraction, and its rungs fill asynchronously: a higher
rung's first results arrive long before it holds many, and they are the few
configurations the rungs below promoted, alike and picked on the cheap results
that mislead most. Fitted on d + 3 of them (6 in 3-D; Optuna's 10 % split makes
one of them the whole "good" density), TPE keeps proposing around one promoted
configuration and feeds the rung more of its kind. So ASHA moves
its model up a rung only once that rung has 10 results, Optuna's own minimum
before TPE is fitted (``n_startup_trials``), and until then fits it on the rung
below, which holds η times as many results that ASHA has not yet filtered as
hard. (Issue 41: with d + 3, ASHA-TPE fell from first to seventh of 13
searches on an outside multi-fidelity suite. On the dev suite,
``bench/multifidelity_dev_bench.py``, 5 seeds, 10 results gave the lower
median regret on 3 of its 4 problems, within the seeds' spread on most.)
The sampler is seeded
from (seed, proposal number) so a restored search proposes the
same. Optuna's ``SuccessiveHalvingPruner`` and ``HyperbandPruner`` do not
serve the scheduling: a pruner only answers "stop this running trial now?";
it cannot pause a trial and later promote it to continue from its checkpoint,
nor choose between a promotion and a new configuration for a free slot. That
decision is what these searchers make at every ask.

Failed trials rank below every success at their rung and are never promoted
(they have no checkpoint). Several objectives are refused: promotion ranks on
one number.
"""

from __future__ import annotations

import math
import random
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from nestor.search import _optuna
from nestor.search._base import Observation, Searcher, Trial
from nestor.search._fidelity import (
    RANKS_ON_ONE,
    budget_used,
    check_int,
    check_number,
    check_one_objective,
)
from nestor.search._registry import register
from nestor.search._sampling import MAX_DRAWS, sample_config, too_tight
from nestor.search._settings import SearchSettings, setting
from nestor.search.space import Scalar, SearchSpace


def rung_budgets(min_budget: float, max_budget: float, reduction_factor: int) -> list[float]:
    """The rungs' budgets from ``min_budget`` to ``max_budget``, a factor η apart.

    They are counted down from the top, max_budget / η^i for as long as that
    stays at least min_budget, so the last rung is always max_budget whatever
    the range (Hyperband's R η^-s): a 1-100 epoch range splits into whole rungs
    without forcing fractional epochs (100 / 81 = 1.23) on the trainer. Where
    both ends are whole numbers the rungs are rounded to whole numbers (epochs,
    steps); a fractional end means the fidelity is continuous (a share of the
    data, half epochs) and the rungs are kept exact.

    >>> rung_budgets(1, 27, 3), rung_budgets(1, 100, 3), rung_budgets(0.5, 4.5, 3)
    ([1, 3, 9, 27], [1, 4, 11, 33, 100], [0.5, 1.5, 4.5])
    """
    check_number("min_budget", min_budget)
    check_number("max_budget", max_budget)
    check_int("reduction_factor", reduction_factor, 2)
    if not max_budget > min_budget:
        raise ValueError(
            f"max_budget must be greater than min_budget ({min_budget}), but got {max_budget}"
        )
    whole = float(min_budget).is_integer() and float(max_budget).is_integer()
    budgets: list[float] = []
    exact = float(max_budget)
    while exact >= min_budget * (1 - 1e-9):
        value: float = int(max(math.floor(exact + 0.5), min_budget)) if whole else exact
        if not budgets or value < budgets[0]:
            budgets.insert(0, value)
        exact /= reduction_factor
    if len(budgets) < 2:
        raise ValueError(
            f"max_budget must be at least min_budget x reduction_factor"
            f" ({min_budget * reduction_factor:g}) for two rungs, but got {max_budget}"
        )
    return budgets


def hyperband_brackets(rungs: int, reduction_factor: int) -> list[list[int]]:
    """Trials per stage of each Hyperband bracket, most aggressive first.

    Bracket s (s = rungs − 1 down to 0) starts n = ⌈rungs / (s + 1) · η^s⌉
    configurations at rung rungs − 1 − s and keeps ⌊n / η^j⌋ of them at its
    stage j (Li et al., 2018, Algorithm 1 with R = η^(rungs − 1)):

    >>> hyperband_brackets(4, 3)
    [[27, 9, 3, 1], [12, 4, 1], [6, 2], [4]]
    """
    brackets = []
    for s in range(rungs - 1, -1, -1):
        n = -(-(rungs * reduction_factor**s) // (s + 1))
        brackets.append([n // reduction_factor**j for j in range(s + 1)])
    return brackets


@dataclass(frozen=True)
class HalvingSettings(SearchSettings):
    """What ASHA and Hyperband both take."""

    min_budget: float = setting(1, "the first rung's budget (epochs)", gt=0)
    max_budget: float = setting(
        27, "the top rung's; the rungs are max_budget / eta^i down to min_budget, rounded"
        " where both are whole", gt=0)
    reduction_factor: int = setting(3, "eta: keep 1 in this many per rung", ge=2)
    sampler: Literal["random", "tpe"] = setting(
        "random", "new configurations: random, or TPE on the top full rung (BOHB)")
    startup_trials: int | None = setting(
        None, "results on a rung before TPE fits it (default: asha 10, Optuna's own"
        " minimum; hyperband d + 3 for d searched parameters, the BOHB paper's N_min + 2,"
        " paired with its random_fraction)", ge=1)


@dataclass(frozen=True)
class HyperbandSettings(HalvingSettings):
    iterations: int | None = setting(
        None, "rounds of every bracket; default: as many as budget needs", ge=1)
    random_fraction: float = setting(
        1 / 3, "sampler tpe: share of new configurations drawn at random (BOHB's rho)",
        ge=0, lt=1)


class _SuccessiveHalving(Searcher):
    """What ASHA and Hyperband share: rungs, proposals (random or TPE), ranking.

    Its constructor checks the settings both take (:class:`HalvingSettings`); a
    subclass declares only its own (Hyperband's ``iterations``) and checks them.
    """

    Settings: ClassVar[type] = HalvingSettings
    continues_trials = True

    @classmethod
    def one_objective(cls, settings: Mapping[str, Any]) -> str | None:
        return RANKS_ON_ONE

    def __init__(self, space: SearchSpace, objectives: Any, **settings: Any) -> None:
        s = self.Settings(**settings)
        seed, budget, min_budget, max_budget = s.seed, s.budget, s.min_budget, s.max_budget
        reduction_factor, sampler, startup_trials = s.reduction_factor, s.sampler, s.startup_trials
        super().__init__(space, objectives, seed=seed, budget=budget)
        check_one_objective(self.algorithm, self.objectives)
        self.rungs = rung_budgets(min_budget, max_budget, reduction_factor)
        if not space.searched:
            raise ValueError("space must have at least one searched (non-constant) parameter")
        self.reduction_factor, self.sampler = reduction_factor, sampler
        self.startup_trials = (
            startup_trials if startup_trials is not None
            else self._default_startup_trials(len(space.searched))
        )
        self.random_fraction = 0.0  # Hyperband (BOHB) draws this share at random
        self._settings.update(
            min_budget=min_budget, max_budget=max_budget, reduction_factor=reduction_factor,
            sampler=sampler, startup_trials=startup_trials,
        )  # fmt: skip
        self._rng = random.Random(seed)
        self._optuna = _optuna.import_optuna("sampler tpe") if sampler == "tpe" else None
        self._results: list[list[Observation]] = [[] for _ in self.rungs]  # per rung
        self._seeds: list[dict[str, Scalar]] = []
        self._proposals = 0

    def _default_startup_trials(self, searched: int) -> int:
        """The results a rung needs before TPE is fitted on it (see the module's
        docstring): ASHA's 10, Optuna's own minimum; Hyperband overrides it."""
        return 10

    @property
    def budget_used(self) -> float:
        """Budget units (epochs) all asked trials train, promotions counted from their
        checkpoint: what the search cost."""
        return budget_used(self._book.trials)

    def _tell(self, trial: Trial, observation: Observation) -> None:
        self._results[trial.generation].append(observation)

    def _continuable(self) -> set[str]:
        """Successes below the top rung that no asked trial continues yet: each may
        still be promoted (a trial a closed Hyperband bracket left behind is kept
        too; the cost is disk, never a promotion without its checkpoint)."""
        continued = {t.continue_from for t in self._book.trials.values()}
        return {o.trial.id for rung in self._results[:-1] for o in rung
                if o.values is not None and o.trial.id not in continued}

    def _ranked(self, observations: Sequence[Observation]) -> list[Observation]:
        """Successful observations best first (ties: the earlier trial first)."""
        done = [o for o in observations if o.values is not None]
        return sorted(done, key=lambda o: (self._key(o.values), int(o.trial.id)))  # type: ignore[arg-type]

    def _promotion(self, source: Trial, **extra: Any) -> Trial:
        rung = source.generation + 1
        return self._new_trial(
            {p.name: self._whole(source.config)[p.name] for p in self.space.searched},
            generation=rung,
            parents=(source.id,),
            origin="promotion",
            continue_from=source.id,
            budget=self.rungs[rung],
            **extra,
        )

    def _fresh(self, rung: int, **extra: Any) -> Trial:
        """A new configuration, trained from scratch up to ``rung``'s budget."""
        config, origin = self._propose()
        return self._new_trial(
            config, generation=rung, origin=origin, budget=self.rungs[rung], **extra
        )

    def _propose(self) -> tuple[dict[str, Scalar], str]:
        index = self._proposals
        self._proposals += 1
        if self._seeds:
            return self._seeds.pop(0), "warm-start"
        rung = self.model_rung()
        if rung is not None and not (
            self.random_fraction and self._rng.random() < self.random_fraction
        ):
            told = [o for o in self._results[rung] if o.values is not None]
            return self._recorded_proposal() or self._tpe(told, index), "model"
        return sample_config(self.space, self._rng), "random"

    def model_rung(self) -> int | None:
        """The rung whose results TPE is fitted on now: the highest with at least
        ``startup_trials`` successes (None: random search, or too few anywhere)."""
        if self.sampler != "tpe":
            return None
        for rung in range(len(self.rungs) - 1, -1, -1):
            if sum(o.values is not None for o in self._results[rung]) >= self.startup_trials:
                return rung
        return None

    def _recorded_proposal(self) -> dict[str, Scalar] | None:
        """While restoring, the journal's TPE proposal for the trial being made.

        Refitting TPE for every replayed proposal would make a long search's
        restore quadratic; everything else (which rung, promotions, random
        draws) is still recomputed and checked against the journal."""
        recorded = (self._recorded or {}).get(str(self.n_asked))
        if recorded is None or recorded.origin != "model":
            return None
        return {p.name: self._whole(recorded.config)[p.name] for p in self.space.searched}

    def _tpe(self, told: list[Observation], index: int) -> dict[str, Scalar]:
        """One TPE proposal from the results at one budget.

        Configurations asked and not yet told are in the study as RUNNING, so
        the constant liar spreads a batch of proposals instead of repeating one.
        """
        optuna = self._optuna
        distributions = _optuna.distributions(optuna, self.space)
        sampler = self._tpe_sampler(index)
        direction = "minimize" if self.objectives[0].mode == "min" else "maximize"
        running = [t for t in self._book.pending.values() if t.continue_from is None]
        with _optuna.quiet(optuna):
            study = optuna.create_study(direction=direction, sampler=sampler)
            for o in told:
                study.add_trial(
                    optuna.trial.create_trial(
                        state=optuna.trial.TrialState.COMPLETE,
                        value=o.value,
                        params=_optuna.encode(self.space, o.config),
                        distributions=_optuna.of(
                            distributions, _optuna.encode(self.space, o.config)),
                    )
                )
            for t in running:
                study.add_trial(
                    optuna.trial.create_trial(
                        state=optuna.trial.TrialState.RUNNING,
                        params=_optuna.encode(self.space, t.config),
                        distributions=_optuna.of(
                            distributions, _optuna.encode(self.space, t.config)),
                    )
                )
            asked: Any = None
            for retry in range(MAX_DRAWS):
                if retry:  # the proposal broke a constraint: pruned, and a fresh sampler
                    study.tell(asked.number, state=optuna.trial.TrialState.PRUNED)
                    study.sampler = self._tpe_sampler(index, retry)
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                    if self.space.conditions:  # define-by-run: the active parameters only
                        asked = study.ask()
                        params = _optuna.suggest(self.space, asked, distributions)
                    else:
                        asked = study.ask(distributions)
                        params = asked.params
                config = _optuna.decode(self.space, params)
                if not self.space.constraints or self.space.satisfies(
                        self.space.project({**config, **self.space.constants()})):
                    return config
        raise too_tight(self.space)

    def _tpe_sampler(self, index: int, retry: int = 0) -> Any:
        optuna = self._optuna
        extra = {"group": True} if self.space.conditions else {}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            return optuna.samplers.TPESampler(
                seed=_optuna.sampler_seed(self.seed, index, retry),
                n_startup_trials=0,
                multivariate=True,
                constant_liar=True,
                **extra,
            )

    def _warm_start(self, observations: list[Observation]) -> None:
        """The previous run's best configurations are the first new ones (re-run
        from scratch: the old checkpoints are not this search's)."""
        good = [o for o in observations if o.values is not None]
        good.sort(key=lambda o: self._key(o.values))  # type: ignore[arg-type]
        self._seeds = [
            {p.name: self._whole(o.config)[p.name] for p in self.space.searched}
            for o in good[: max(1, self.planned // 4)]
        ]


@register
class ASHASearch(_SuccessiveHalving):
    """Asynchronous successive halving (Li et al., 2020) as a scheduler.

    At each ask, from the highest rung down: if a rung has a trial among its
    top ⌊n / η⌋ results (n: results told at that rung, failures included) that
    was not promoted yet, the ask promotes the best such trial; otherwise it
    starts a new configuration at the bottom rung. No barrier: a free slot
    always gets work. ``budget`` counts trials (new and promoted); left out,
    it is the trial count of one Hyperband bracket from the bottom rung
    (40 for rungs 1, 3, 9, 27).

    >>> from nestor.search.space import FloatParam, SearchSpace
    >>> asha = ASHASearch(SearchSpace([FloatParam("x", 0.0, 1.0)]), [("loss", "min")])
    >>> [t.budget for t in asha.ask(3)], asha.planned
    ([1, 1, 1], 40)
    """

    algorithm = "asha"

    @classmethod
    def title(cls, settings: Mapping[str, Any]) -> str:
        return "ASHA"

    def __init__(self, space: SearchSpace, objectives: Any, **settings: Any) -> None:
        super().__init__(space, objectives, **settings)
        self._promoted: set[str] = set()

    @property
    def planned(self) -> int:
        if self.budget is not None:
            return self.budget
        return sum(hyperband_brackets(len(self.rungs), self.reduction_factor)[0])

    def promotable(self, rung: int) -> list[Trial]:
        """Trials of ``rung`` in its top ⌊n / η⌋ not yet promoted, best first."""
        results = self._results[rung]
        top = self._ranked(results)[: len(results) // self.reduction_factor]
        return [o.trial for o in top if o.trial.id not in self._promoted]

    def _sources(self) -> list[Trial | None]:
        """What the next ask may do, in ASHA's order: promote the best promotable
        trial of each rung from the highest down, else (None) start a new
        configuration at the bottom rung."""
        found = (c[0] for r in range(len(self.rungs) - 2, -1, -1) if (c := self.promotable(r)))
        return [*found, None]

    def _source_size(self, source: Trial | None) -> float:
        if source is None:
            return float(self.rungs[0])
        return float(self.rungs[source.generation + 1] - self.rungs[source.generation])

    def _next_source(self) -> Trial | None:
        """The trial the next ask promotes (the highest rung's first), or None for a
        new configuration. Under a cost budget, the first in that order that still
        fits: a promotion too costly for what is left gives way to a cheaper one or
        to a new bottom-rung trial, so the search stops with less than one
        bottom-rung trial's worth unspent rather than a whole promotion's."""
        sources = self._sources()
        if self._costs is None:
            return sources[0]
        return next((s for s in sources if self._costs.fits(self._source_size(s))), None)

    def _next_size(self) -> float | None:
        return self._source_size(self._next_source())

    def _ask(self, n: int) -> list[Trial]:
        trials = []
        for _ in range(n):
            source = self._next_source()
            if source is not None:
                self._promoted.add(source.id)
                trials.append(self._promotion(source))
            else:
                trials.append(self._fresh(0))
        return trials


@dataclass
class _Bracket:
    """One bracket of synchronous successive halving."""

    number: int
    first_rung: int
    sizes: list[int]  # trials per stage
    stage: int = 0
    asked: int = 0  # in this stage
    queue: list[Trial] = field(default_factory=list)  # promotions decided, not yet asked
    told: list[Observation] = field(default_factory=list)  # this stage's results
    over: bool = False


@register
class HyperbandSearch(_SuccessiveHalving):
    """Hyperband (Li et al., 2018): brackets of successive halving; with
    ``sampler="tpe"``, BOHB-style (Falkner et al., 2018).

    Brackets run from the most aggressive (many configurations at
    ``min_budget``) to the most conservative (few at ``max_budget``); for
    rungs 1, 3, 9, 27 (η = 3) they hold 27/9/3/1, 12/4/1, 6/2 and 4 trials
    per stage, 69 trials in one iteration. Within a bracket the halving is
    synchronous: a stage's top ⌊n_j / η⌋ are promoted once all its results
    are in, as in the paper. Brackets overlap: when every open bracket is
    waiting for results, an ask opens the next bracket rather than leave a
    slot idle, so parallel workers stay busy.

    ``iterations`` repeats the sequence of brackets; left out, as many as
    ``budget`` (trials) needs, 1 without a budget. A stage whose successful
    trials are fewer than it promotes promotes all of them, and
    :attr:`planned` drops by the promotions that cannot happen.
    """

    algorithm = "hyperband"

    @classmethod
    def title(cls, settings: Mapping[str, Any]) -> str:
        """With TPE proposals it is BOHB (Falkner et al., 2018)."""
        return "BOHB" if settings.get("sampler") == "tpe" else "Hyperband"

    Settings = HyperbandSettings

    def _default_startup_trials(self, searched: int) -> int:
        """BOHB's N_min + 2, N_min = d + 1: the fewest results a rung's KDE is fitted
        on, safe here because a third of new configurations are drawn at random."""
        return searched + 3

    def __init__(self, space: SearchSpace, objectives: Any, **settings: Any) -> None:
        super().__init__(space, objectives, **settings)
        s = self.Settings(**settings)
        iterations, random_fraction = s.iterations, s.random_fraction
        budget = self.budget
        self.random_fraction = float(random_fraction)
        self._settings["iterations"] = iterations
        if random_fraction != 1 / 3:
            self._settings["random_fraction"] = random_fraction
        self.brackets = hyperband_brackets(len(self.rungs), self.reduction_factor)
        per_iteration = sum(sum(b) for b in self.brackets)
        if iterations is not None:
            if (budget is not None and budget > iterations * per_iteration
                    and self.cost_budget is None):
                raise ValueError(
                    f"budget must be at most {iterations * per_iteration} ({iterations}"
                    f" iteration(s) of {per_iteration} trials), but got {budget}: set iterations"
                    f" to {-(-budget // per_iteration)}, or leave iterations out to plan them"
                    " from the budget"
                )
        else:
            iterations = 1 if budget is None else -(-budget // per_iteration)
        self.iterations = iterations
        self._open: list[_Bracket] = []
        self._opened = 0
        self._shortfall = 0  # promotions that could not happen (too few successes)

    @property
    def planned(self) -> int:
        planned = self.iterations * sum(sum(b) for b in self.brackets) - self._shortfall
        return min(planned, self.budget) if self.budget is not None else planned

    def _ask(self, n: int) -> list[Trial]:
        trials: list[Trial] = []
        while len(trials) < n:
            if self._costs is not None:
                bracket, shape, _ = self._choice()
                if bracket is None:
                    if self._opened >= self.iterations * len(self.brackets):
                        break
                    bracket = self._open_bracket(shape)
                trial = self._from(bracket)
                assert trial is not None  # _choice offers only brackets that give one
                trials.append(trial)
                continue
            trial = next((t for b in self._open if (t := self._from(b)) is not None), None)
            if trial is None:
                if self._opened >= self.iterations * len(self.brackets):
                    break
                self._open_bracket(self._opened % len(self.brackets))
                continue
            trials.append(trial)
        return trials

    def _bracket_size(self, bracket: _Bracket) -> float | None:
        """What the bracket's next trial would train (see _from); None while it waits."""
        if bracket.over:
            return None
        if bracket.stage == 0 and bracket.asked < bracket.sizes[0]:
            return float(self.rungs[bracket.first_rung])
        if bracket.queue:
            rung = bracket.queue[0].generation
            return float(self.rungs[rung + 1] - self.rungs[rung])
        return None

    def _choice(self) -> tuple[_Bracket | None, int, float]:
        """Where the next trial comes from: (an open bracket, -1, its size), or
        (None, shape, size) for a new bracket of ``self.brackets[shape]``.

        In Hyperband's order, the first open bracket that gives a trial, else the
        next bracket of the cycle. Under a cost budget, the first of those that
        still fits; when none does, a new bracket of the most aggressive shape
        (its first trials train the bottom rung, the cheapest there is), so the
        search stops with less than one bottom-rung trial's worth unspent rather
        than a whole promotion's or a conservative bracket's first trial."""
        options: list[tuple[_Bracket | None, int, float]] = [
            (b, -1, size) for b in self._open if (size := self._bracket_size(b)) is not None
        ]
        shape = self._opened % len(self.brackets)
        first_rung = len(self.rungs) - len(self.brackets[shape])
        options.append((None, shape, float(self.rungs[first_rung])))
        if self._costs is None:
            return options[0]
        cheapest = (None, 0, float(self.rungs[0]))
        return next((o for o in [*options, cheapest] if self._costs.fits(o[2])), cheapest)

    def _next_size(self) -> float | None:
        """What the next trial would train (see _choice)."""
        return self._choice()[2]

    def _open_bracket(self, shape: int) -> _Bracket:
        first_rung = len(self.rungs) - len(self.brackets[shape])
        bracket = _Bracket(self._opened, first_rung, list(self.brackets[shape]))
        self._open.append(bracket)
        self._opened += 1
        return bracket

    def _from(self, bracket: _Bracket) -> Trial | None:
        """The bracket's next trial, or None while it waits (or is over)."""
        if bracket.over:
            return None
        if bracket.stage == 0 and bracket.asked < bracket.sizes[0]:
            bracket.asked += 1
            return self._fresh(bracket.first_rung, deme=bracket.number)
        if bracket.queue:
            bracket.asked += 1
            return self._promotion(bracket.queue.pop(0), deme=bracket.number)
        return None

    def _tell(self, trial: Trial, observation: Observation) -> None:
        super()._tell(trial, observation)
        bracket = next(b for b in self._open if b.number == trial.deme)
        bracket.told.append(observation)
        if len(bracket.told) < bracket.sizes[bracket.stage]:
            return
        # The stage is complete: promote its top, or close the bracket.
        if bracket.stage + 1 == len(bracket.sizes):
            bracket.over = True
        else:
            keep = bracket.sizes[bracket.stage + 1]
            winners = [o.trial for o in self._ranked(bracket.told)[:keep]]
            bracket.stage += 1
            bracket.asked, bracket.told, bracket.queue = 0, [], winners
            if len(winners) < keep:
                # Too few successes: these promotions, and the later stages'
                # beyond what they can hold, will not happen.
                shrunk = [min(size, len(winners)) for size in bracket.sizes[bracket.stage :]]
                self._shortfall += sum(bracket.sizes[bracket.stage :]) - sum(shrunk)
                bracket.sizes[bracket.stage :] = shrunk
            bracket.over = not winners
        if bracket.over:
            self._open.remove(bracket)
