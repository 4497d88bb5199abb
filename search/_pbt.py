"""Population-based training (Jaderberg et al., 2017) as an ask/tell search.

A population of ``population`` members trains in intervals of ``interval``
budget units (epochs, unless the stage maps the budget to another trainer
setting). Each member is a chain of trials, one per interval: the trial for
interval k carries ``budget=(k + 1) * interval`` and ``continue_from`` the
trial whose checkpoint it starts from. After a member reports interval k:

- if it is in the bottom ``quantile`` of the members that have reported
  interval k, it *exploits* a member drawn from the top ``quantile`` (its next
  trial continues from that member's interval-k trial: weights and optimizer
  state) and *explores*: each number is multiplied by a factor drawn from
  ``perturbation_factors`` (0.8 or 1.2, as in the paper and Ray Tune), or,
  with probability ``resample_probability``, redrawn from the space; a
  categorical is redrawn with that probability and kept otherwise (it has no
  neighbouring value to perturb to). Values stay inside the space (clipped;
  an integer that rounding would leave unchanged moves one step);
- otherwise it continues from its own trial with the same hyperparameters.

Asynchronous, as Ray Tune's PBT: a member that reports is decided at once and
its next trial is ready for the next ask; no member waits for the others (no
barrier, no idle slot behind a straggler). Unlike Ray Tune, a member is ranked
among the results *at the same interval* and copies its donor's checkpoint at
that interval, not whatever the donor reported last: a model trained longer
is not better for it, the copied weights are the ones that were ranked, every
member trains the same number of intervals, so :attr:`planned` is exact
(``population`` × ``intervals`` trials) and the budget used is
``population × intervals × interval`` (failures aside). The first members to
report an interval are compared with fewer peers (with one, none is exploited:
the bottom and top sets hold at most half of the results, as in Ray Tune), so
a member whose next trial has not started yet is judged again at each later
report of the same interval (the member whose trials start first, and so
report first, would otherwise never be exploited). Ray Tune's way out
(ranking against whatever each member reported last) compares models trained
for different lengths instead.

Which ready member a free slot runs: first a member with no checkpoint yet
(the whole population is sampled before anything races ahead), then the one
whose next trial starts from the best-ranked checkpoint of that checkpoint's
interval (its own, or the top member's it copies), then the one decided
first. ASHA's idea (promote before anything else): the leading lineage, and
the members that copied it, advance sooner, so a good model exists sooner;
the total is unchanged (every member still trains every interval, ranked
only against results of the same interval), and a member that waits is
judged again as its interval fills. A rank counts only once its interval
holds 1 / ``quantile`` results (at most ``population``): fewer rank too
noisily to race on, and until then the decided order holds. The price: a
middling member (not bad enough to copy another) may wait until the leaders
are done, so a search stopped early (a time limit) has trained its
population unevenly. On simulated multi-fidelity training
(``bench/multifidelity_bench.py``, 20 seeds) the first 27-epoch model at
the quality took 152 epochs instead of 204 (8 members) and 232 instead of
399 (16), and the best 27-epoch model at the end had a lower loss (median
1.41 against 2.27 with 8 members, 0.97 against 1.91 with 16). On real
training (the CNN on mnist5k, 5 seeds of 300 slot-seconds on 2 slots,
``bench/search_fidelity_bench.py``) PBT reached validation accuracy 0.97 in
a median 132 slot-seconds before and 71 after (ASHA 99 in the same run). PB2 keeps the
decided order: in that order its GP's picks landed nearer the best lr than
they did in the ranked one (0.65 decades against 0.82 on the drifting
problem of ``tests/search/test_pb2.py``, 12 seeds; 0.80 against 0.85 on
the fixed wide one).

A failed trial has no checkpoint: its member copies the best member of that
interval (a top one if there are several) with explored hyperparameters, or,
if none has reported yet, retries from its own last good checkpoint with
explored hyperparameters (training two intervals in one trial). A search
whose last ``population`` results all failed stops.

The lineage is in the trials themselves (``member``, ``generation`` = the
interval, ``continue_from``, ``parents``, ``origin`` "continue", "exploit" or
"retry"), so the journal holds it and a restored search rebuilds it by
replay. :meth:`lineage` follows a trial's checkpoints back to the start: the
hyperparameter schedule that produced its weights, which a later ``train``
stage can replay (:meth:`best_schedule` for the winner); :meth:`history` is a
member's own trials; :func:`schedules_from_state` reads both out of a
journalled state without rebuilding the search.

With ``explore="pb2"`` the search is PB2 (population-based bandits,
Parker-Holder et al., 2020; Ray Tune's ``PB2``): the exploit step is the
same, but the explored numbers are not random perturbations of the donor's:
they maximize the upper confidence bound of a Gaussian process (time-varying
kernel) fitted on every interval trained so far, from (interval, reward of
the checkpoint, hyperparameters) to the change of reward that interval
brought (``search/_pb2.py``). Categorical parameters are still kept or
redrawn as in PBT. Where there is nothing to fit yet (fewer than two
intervals trained from a checkpoint, so always at the first exploit) or the
donor's own last interval is not among the data (it trained from scratch,
or a retry has no checkpoint), it perturbs as PBT does. The choice is made
when the exploiting trial is asked (with every result told by then), from
a generator seeded by the search's seed and the trial's id; a restore
takes the recorded numbers from the journal instead of refitting the GP
(everything else is recomputed and checked), so a resumed PB2 continues
exactly, and fast.

>>> from nestor.search.space import FloatParam, SearchSpace
>>> space = SearchSpace([FloatParam("lr", 1e-4, 1e-1, log=True)])
>>> pbt = PBTSearch(space, [("loss", "min")], population=4, intervals=2)
>>> [(t.member, t.budget, t.continue_from) for t in pbt.ask(4)][:2]
[(0, 1, None), (1, 1, None)]
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from nestor.search._base import Observation, Searcher, Trial, observations_from_state
from nestor.search._fidelity import RANKS_ON_ONE, budget_used, check_one_objective, span
from nestor.search._registry import register
from nestor.search._sampling import repair, sample_config, sample_value
from nestor.search._settings import SearchSettings, setting
from nestor.search.space import (
    CategoricalParam,
    FloatParam,
    IntParam,
    Scalar,
    SearchSpace,
    from_unit,
    to_unit,
)

MIN_PB2_POINTS = 2  # intervals trained from a checkpoint before PB2's GP is fitted


@dataclass(frozen=True)
class ScheduleStep:
    """One stretch of training: ``config`` trained from ``start`` up to ``until``.

    ``copied_from`` is the member whose checkpoint this step started from when
    it was not its own member's (an exploit); ``value`` is the result (None if
    the trial failed or is still running).
    """

    trial_id: str
    member: int
    interval: int
    start: float
    until: float
    config: dict[str, Scalar]
    continue_from: str | None
    copied_from: int | None
    value: float | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "trial_id": self.trial_id,
            "member": self.member,
            "interval": self.interval,
            "start": self.start,
            "until": self.until,
            "config": dict(self.config),
            "continue_from": self.continue_from,
            "copied_from": self.copied_from,
            "value": self.value,
        }


@dataclass
class _Next:
    """A member's decided next trial, waiting for an ask."""

    member: int
    interval: int
    config: dict[str, Scalar] | None  # None: draw one (interval 0)
    continue_from: str | None = None
    origin: str = "random"
    base: dict[str, Scalar] | None = None  # PB2: explore around this config when asked


@dataclass(frozen=True)
class PBTSettings(SearchSettings):
    population: int = setting(8, "members training side by side", ge=2)
    interval: float = setting(1, "budget (epochs) between exploit/explore steps", gt=0)
    intervals: int | None = setting(
        None, "intervals each member trains; default: as many as budget needs (10)", ge=1)
    quantile: float = setting(0.25, "bottom share that copies the top share's weights",
                              gt=0, le=0.5)
    resample_probability: float = setting(
        0.25, "chance a hyperparameter is redrawn rather than perturbed", ge=0.0, le=1.0)
    perturbation_factors: list[float] = setting(
        [0.8, 1.2], "factors a continuous hyperparameter is multiplied by when explored",
        items={"gt": 0}, min_length=1)
    explore: Literal["perturb", "pb2"] = setting(
        "perturb", "how an exploiting member's numbers change: perturb (PBT), or pb2: chosen"
        " by a GP bandit on how each interval's hyperparameters changed the reward"
        " (population-based bandits; categoricals are still resampled)")


@register
class PBTSearch(Searcher):
    """Population-based training: exploit the top members, explore around them.

    Settings: ``population`` (members, at least 2), ``interval`` (budget units
    per interval, default 1 epoch), ``intervals`` (per member; left out, as
    many as ``budget`` needs, 10 without a budget), ``quantile`` (share of
    members that exploit / are copied, in (0, 0.5]), ``resample_probability``
    and ``perturbation_factors``, and ``explore``: "perturb" (PBT) or "pb2"
    (the numbers an exploiting member trains with next are picked by a GP
    bandit; see the module). ``budget`` counts trials (one per member and
    interval); it must leave every member at least one interval.
    """

    algorithm = "pbt"
    continues_trials = True

    Settings = PBTSettings

    @classmethod
    def title(cls, settings: Mapping[str, Any]) -> str:
        """PB2 where a GP bandit explores (``explore: pb2``)."""
        return "PB2" if settings.get("explore") == "pb2" else "PBT"

    @classmethod
    def one_objective(cls, settings: Mapping[str, Any]) -> str | None:
        return RANKS_ON_ONE

    def __init__(self, space: SearchSpace, objectives: Any, **settings: Any) -> None:
        s = self.Settings(**settings)
        seed, budget, population, interval = s.seed, s.budget, s.population, s.interval
        intervals, quantile, explore = s.intervals, s.quantile, s.explore
        resample_probability, perturbation_factors = s.resample_probability, s.perturbation_factors
        super().__init__(space, objectives, seed=seed, budget=budget)
        given_intervals = intervals
        check_one_objective(self.algorithm, self.objectives)
        if not space.searched:
            raise ValueError("space must have at least one searched (non-constant) parameter")
        numeric = [p for p in space.searched if isinstance(p, FloatParam | IntParam)]
        if explore == "pb2" and not numeric:
            raise ValueError(
                "explore pb2 needs at least one float or int parameter for its GP bandit to"
                " choose, but the space has only categorical ones"
                f" ({', '.join(p.name for p in space.searched)}): use explore perturb"
            )
        cost_budget = self.cost_budget is not None
        budget = self.budget
        if budget is not None and budget < population:
            raise ValueError(
                f"budget must be at least population ({population}) so that every member"
                f" trains one interval, but got {budget}"
            )
        if intervals is None:
            intervals = 10 if budget is None else -(-budget // population)
        elif budget is not None and budget > population * intervals and not cost_budget:
            raise ValueError(
                f"budget must be at most {population * intervals} (population {population}"
                f" x {intervals} intervals), but got {budget}: set intervals to"
                f" {-(-budget // population)}, or leave intervals out to plan them from the budget"
            )
        self._settings.update(
            population=population, interval=interval, intervals=given_intervals,
            quantile=quantile, resample_probability=resample_probability,
            perturbation_factors=list(perturbation_factors), explore=explore,
        )  # fmt: skip
        self.population, self.interval, self.intervals = population, interval, intervals
        self.quantile = float(quantile)
        self.resample_probability = float(resample_probability)
        self.perturbation_factors = tuple(perturbation_factors)
        self._rng = random.Random(seed)
        self._ready: list[_Next] = [_Next(m, 0, None) for m in range(population)]
        self._results: dict[int, dict[int, Observation]] = {}  # interval -> member -> result
        self._last_good: dict[int, str] = {}  # member -> its latest successful trial
        self._seeds: list[dict[str, Scalar]] = []
        self._failures_in_row = 0
        self.explore = explore
        self._numeric: list[FloatParam | IntParam] = numeric  # type: ignore[assignment]
        self.pb2_log: list[dict[str, Any]] = []  # PB2: per explored trial, how it was chosen

    # --- sizes ----------------------------------------------------------------------------

    @property
    def planned(self) -> int:
        planned = self.population * self.intervals
        return min(planned, self.budget) if self.budget is not None else planned

    @property
    def budget_used(self) -> float:
        """Budget units (epochs) all asked trials train, continued ones counted from
        their checkpoint: what the search cost."""
        return budget_used(self._book.trials)

    # --- ask/tell -------------------------------------------------------------------------

    def _next_size(self) -> float | None:
        """Every PBT trial trains one interval, from scratch or on from a checkpoint."""
        return float(self.interval)

    def _ask(self, n: int) -> list[Trial]:
        trials = []
        while self._ready and len(trials) < n:
            step = self._ready.pop(self._next_index())
            config, origin = step.config, step.origin
            if config is None and step.base is not None:
                config = self._pb2_explore(step)
            elif config is None and self._seeds:
                config, origin = self._seeds.pop(0), "warm-start"
            elif config is None:
                config = sample_config(self.space, self._rng)
            parents = () if step.continue_from is None else (step.continue_from,)
            trials.append(
                self._new_trial(
                    config,
                    generation=step.interval,
                    member=step.member,
                    parents=parents,
                    origin=origin,
                    continue_from=step.continue_from,
                    budget=(step.interval + 1) * self.interval,
                )
            )
        return trials

    def _next_index(self) -> int:
        """Which ready trial a free slot runs (see the module docstring): a member with
        no checkpoint yet first, then the one starting from the best-ranked checkpoint,
        then the one decided first. PB2 runs them in the order decided."""
        if self.explore == "pb2":
            return 0
        standings: dict[int, dict[str, float]] = {}

        def key(index: int) -> tuple[bool, float, int]:
            step = self._ready[index]
            if step.continue_from is None:
                return False, 0.5, index
            source = self._book.trials[step.continue_from]
            k = int(source.generation)
            if k not in standings:
                standings[k] = self._standings(k)
            return True, standings[k].get(source.id, 0.5), index

        return min(range(len(self._ready)), key=key)

    def _standings(self, k: int) -> dict[str, float]:
        """Interval k's successful results by rank, 0 (best) to 1 (worst); none while
        fewer have reported than one top-quantile member needs (1 / quantile, at most
        the population): so few rank too noisily to be raced ahead on."""
        ranked = self._ranked(k)[0]
        if len(ranked) < min(math.ceil(1 / self.quantile), self.population):
            return {}
        return {o.trial.id: i / (len(ranked) - 1) for i, o in enumerate(ranked)}

    def _tell(self, trial: Trial, observation: Observation) -> None:
        member, k = trial.member, trial.generation
        assert member is not None
        self._results.setdefault(k, {})[member] = observation
        if observation.failed:
            self._failures_in_row += 1
            if self._failures_in_row >= self.population:
                self._stop(
                    f"the last {self._failures_in_row} trials all failed"
                    f" (last: {observation.failure})"
                )
        else:
            self._failures_in_row = 0
            self._last_good[member] = trial.id
        self._reconsider(k)
        if k + 1 >= self.intervals:
            return  # this member is done
        self._ready.append(self._decide(trial, observation))

    def _continuable(self) -> set[str]:
        """What a later trial may continue from: each member's latest success (a
        retry's start), the sources of decided next trials, and every success of
        an interval some member has yet to report (an exploit may pick it, and a
        decision may be reconsidered while the interval fills)."""
        keep = set(self._last_good.values())
        keep |= {step.continue_from for step in self._ready if step.continue_from is not None}
        for results in self._results.values():
            if len(results) < self.population:
                keep |= {o.trial.id for o in results.values() if not o.failed}
        return keep

    def _reconsider(self, k: int) -> None:
        """Members that reported interval k and still wait for their next trial (not
        asked yet) are judged again on what has been reported since: the member
        whose trials start first, and so always report first, is not spared the
        bottom quantile for ever. A decision changes only where the verdict does
        (into or out of the bottom quantile), so a waiting exploit keeps its donor."""
        for index, step in enumerate(self._ready):
            if step.interval != k + 1 or step.origin not in ("continue", "exploit"):
                continue
            own = self._results[k].get(step.member)
            if own is None or own.failed:
                continue
            if self._in_bottom(own) == (step.origin == "exploit"):
                continue
            self._ready[index] = self._decide(own.trial, own)

    def _ranked(self, k: int) -> tuple[list[Observation], list[Observation], list[Observation]]:
        """Interval k's successful results best first, its top and its bottom quantile."""
        ranked = sorted(
            (o for o in self._results[k].values() if o.values is not None),
            key=lambda o: (self._key(o.values), int(o.trial.id)),  # type: ignore[arg-type]
        )
        count = math.ceil(len(ranked) * self.quantile)
        count = min(count, len(ranked) // 2)
        return ranked, ranked[:count], ranked[len(ranked) - count :] if count else []

    def _in_bottom(self, observation: Observation) -> bool:
        _, _, bottom = self._ranked(int(observation.trial.generation))
        return any(o.trial.id == observation.trial.id for o in bottom)

    def _decide(self, trial: Trial, observation: Observation) -> _Next:
        """The member's next trial: continue, exploit a top member, or retry."""
        member, k = trial.member, trial.generation
        assert member is not None
        ranked, top, bottom = self._ranked(k)
        if not observation.failed and all(o.trial.id != trial.id for o in bottom):
            return _Next(member, k + 1, dict(trial.config), trial.id, "continue")
        donors = [o for o in top if o.trial.member != member]
        if observation.failed and not donors:
            donors = ranked[:1]
        if donors:
            donor = donors[self._rng.randrange(len(donors))]
            return self._exploring(member, k + 1, donor.config, donor.trial.id, "exploit")
        # Failed, and nobody has reported this interval yet: its own last checkpoint.
        own = self._last_good.get(member)
        return self._exploring(member, k + 1, trial.config, own, "retry")

    def _exploring(
        self,
        member: int,
        interval: int,
        base: Mapping[str, Scalar],
        continue_from: str | None,
        origin: str,
    ) -> _Next:
        """A next trial with explored hyperparameters: perturbed now (PBT), or chosen
        by the GP bandit when it is asked (PB2: with every result told by then)."""
        if self.explore == "pb2":
            return _Next(member, interval, None, continue_from, origin, base=dict(base))
        return _Next(member, interval, self._explore(base), continue_from, origin)

    def _explore(self, config: Mapping[str, Scalar]) -> dict[str, Scalar]:
        rng = self._rng
        config = self._whole(config)
        explored: dict[str, Scalar] = {}
        for param in self.space.searched:
            value = config[param.name]
            if rng.random() < self.resample_probability:
                explored[param.name] = sample_value(param, rng)
            elif isinstance(param, CategoricalParam):
                explored[param.name] = value
            else:
                assert isinstance(param, FloatParam | IntParam)
                factor = self.perturbation_factors[rng.randrange(len(self.perturbation_factors))]
                moved: float = value * factor  # type: ignore[operator]
                if isinstance(param, IntParam):
                    moved = round(moved)
                    if moved == value and factor != 1:
                        moved = value + (1 if factor > 1 else -1)  # type: ignore[operator]
                    explored[param.name] = int(min(max(moved, param.low), param.high))
                else:
                    explored[param.name] = float(min(max(moved, param.low), param.high))
        return self._meets_constraints(explored)

    def _meets_constraints(self, explored: dict[str, Scalar],
                           rng: random.Random | None = None) -> dict[str, Scalar]:
        """A perturbation or GP choice that breaks a constraint is replaced by a
        random configuration that meets them (the member still continues its
        checkpoint: only its hyperparameters are redrawn)."""
        if not self.space.constraints:
            return explored
        return repair(self.space, explored, rng or self._rng)[0]

    # --- PB2 --------------------------------------------------------------------------

    def _pb2_explore(self, step: _Next) -> dict[str, Scalar]:
        """The explored config of a PB2 exploit or retry (see the module docstring)."""
        import numpy as np

        from nestor.search import _pb2

        assert step.base is not None
        trial_id = str(self.n_asked)  # the id the trial about to be made gets
        data = self._changes()
        context = next((d for d in data if d[4] == step.continue_from), None)
        if len(data) < MIN_PB2_POINTS or context is None:
            self.pb2_log.append({"trial": trial_id, "chosen_by": "perturb", "points": len(data)})
            return self._explore(step.base)
        rng = self._rng
        explored: dict[str, Scalar] = {}
        for param in self.space.searched:
            if isinstance(param, CategoricalParam):
                keep = rng.random() >= self.resample_probability
                base = self._whole(step.base)
                explored[param.name] = base[param.name] if keep else sample_value(param, rng)
        recorded = (self._recorded or {}).get(trial_id)
        if recorded is not None:  # a restore: the journal's GP choice, not a refit
            explored.update({p.name: self._whole(recorded.config)[p.name] for p in self._numeric})
            if self.space.constraints:  # the journal's, repaired or not
                explored = {p.name: self._whole(recorded.config)[p.name]
                            for p in self.space.searched}
            self.pb2_log.append({"trial": trial_id, "chosen_by": "journal"})
            return {p.name: explored[p.name] for p in self.space.searched}
        pending = [  # explored for this interval already: spread out from them (Ray's PB2)
            [to_unit(p, self._whole(t.config)[p.name]) for p in self._numeric]
            for t in self._book.trials.values()
            if t.generation == step.interval and t.origin in ("exploit", "retry")
        ]
        unit, info = _pb2.select(
            np.array([d[0] for d in data], dtype=float),
            np.array([d[1] for d in data], dtype=float),
            np.array([d[2] for d in data], dtype=float),
            np.array([d[3] for d in data], dtype=float),
            time=float(context[0]),
            reward_before=context[1],
            pending=np.array(pending, dtype=float).reshape(len(pending), len(self._numeric)),
            rng=np.random.default_rng([self.seed % 2**32, int(trial_id)]),
        )
        for param, u in zip(self._numeric, unit, strict=True):
            explored[param.name] = from_unit(param, float(u))
        self.pb2_log.append({"trial": trial_id, "chosen_by": "gp", **info})
        # A repair draws from (seed, trial): a restore takes the journal's choice and
        # must leave this search's own generator where the live search left it.
        return self._meets_constraints({p.name: explored[p.name] for p in self.space.searched},
                                       random.Random(f"{self.seed}:{trial_id}:repair"))

    def _reward(self, observation: Observation) -> float:
        """The value as a reward: larger is better, whatever the objective's mode."""
        return -self.objectives[0].sign * observation.value

    def _changes(self) -> list[tuple[int, float, list[float], float, str]]:
        """(interval, reward before, hyperparameters in [0, 1], change of reward per
        budget unit, trial id) of every successful trial that continued a successful one."""
        results = self._results_by_id()
        data = []
        for observation in self._book.observations:
            trial = observation.trial
            before = results.get(trial.continue_from or "")
            if observation.failed or before is None or before.failed:
                continue
            start, until = span(trial, self._book.trials)
            change = (self._reward(observation) - self._reward(before)) / (until - start)
            unit = [to_unit(p, self._whole(trial.config)[p.name]) for p in self._numeric]
            data.append((trial.generation, self._reward(before), unit, change, trial.id))
        return data

    def _warm_start(self, observations: list[Observation]) -> None:
        good = [o for o in observations if o.values is not None]
        good.sort(key=lambda o: self._key(o.values))  # type: ignore[arg-type]
        self._seeds = [
            {p.name: self._whole(o.config)[p.name] for p in self.space.searched}
            for o in good[: max(1, self.population // 4)]
        ]

    # --- lineage --------------------------------------------------------------------------

    def history(self, member: int) -> list[ScheduleStep]:
        """The trials of ``member`` in interval order, with where each one started."""
        if not isinstance(member, int) or not 0 <= member < self.population:
            raise ValueError(
                f"member must be an integer from 0 to {self.population - 1}, but got {member!r}"
            )
        return _history(self._book.trials, self._results_by_id(), member)

    def lineage(self, trial_id: str) -> list[ScheduleStep]:
        """The schedule that produced ``trial_id``'s weights, from scratch to it:
        the chain of checkpoints it continued, whichever members trained them."""
        if str(trial_id) not in self._book.trials:
            raise ValueError(f"trial_id must be the id of an asked trial, but got {trial_id!r}")
        return _lineage(self._book.trials, self._results_by_id(), str(trial_id))

    def best_schedule(self) -> list[ScheduleStep]:
        """The lineage of the best trial ([] before any success)."""
        best = self.best()
        return [] if best is None else self.lineage(best.trial.id)

    def _results_by_id(self) -> dict[str, Observation]:
        return {o.trial.id: o for o in self._book.observations}


def _step(
    trial: Trial, trials: Mapping[str, Trial], results: Mapping[str, Observation]
) -> ScheduleStep:
    start, until = span(trial, trials)
    source = trials[trial.continue_from] if trial.continue_from is not None else None
    copied = source.member if source is not None and source.member != trial.member else None
    observation = results.get(trial.id)
    value = None if observation is None or observation.failed else observation.value
    assert trial.member is not None
    return ScheduleStep(
        trial.id, trial.member, trial.generation, start, until, dict(trial.config),
        trial.continue_from, copied, value,
    )  # fmt: skip


def _history(
    trials: Mapping[str, Trial], results: Mapping[str, Observation], member: int
) -> list[ScheduleStep]:
    mine = [t for t in trials.values() if t.member == member]
    mine.sort(key=lambda t: (t.generation, int(t.id)))
    return [_step(t, trials, results) for t in mine]


def _lineage(
    trials: Mapping[str, Trial], results: Mapping[str, Observation], trial_id: str
) -> list[ScheduleStep]:
    chain = []
    current: str | None = trial_id
    while current is not None:
        trial = trials[current]
        chain.append(_step(trial, trials, results))
        current = trial.continue_from
    return chain[::-1]


def schedules_from_state(state: Mapping[str, Any]) -> dict[str, Any]:
    """A PBT search's lineage read out of its journalled ``state()``, no rebuild:
    ``{"members": {member: [ScheduleStep...]}, "best": [ScheduleStep...]}``
    where "best" is the lineage of the best trial at the longest budget."""
    if state.get("algorithm") != PBTSearch.algorithm:
        raise ValueError(f"state must come from a pbt search, but got {state.get('algorithm')!r}")
    trials: dict[str, Trial] = {}
    for event in state.get("events", []):
        if event["event"] == "ask":
            for data in event["trials"]:
                trials[data["id"]] = Trial.from_dict(data)
    observations = observations_from_state(state)
    results = {o.trial.id: o for o in observations}
    members = sorted({t.member for t in trials.values() if t.member is not None})
    mode = re.search(r"mode='(min|max)'", str(state.get("objectives", [""])[0]))
    if mode is None:
        raise ValueError(f"state must record its objective, but got {state.get('objectives')!r}")
    sign = -1.0 if mode.group(1) == "max" else 1.0
    done = [o for o in observations if o.values is not None]
    best: list[ScheduleStep] = []
    if done:  # as Searcher.best(): the best of the longest-trained, first told on ties
        longest = max(float(o.trial.budget or 0) for o in done)
        done = [o for o in done if float(o.trial.budget or 0) == longest]
        winner = min(done, key=lambda o: sign * o.value)
        best = _lineage(trials, results, winner.trial.id)
    return {"members": {m: _history(trials, results, m) for m in members}, "best": best}
