"""The ask/tell contract every search algorithm implements, and its records.

A driver (the orchestrator) loops::

    searcher = make_searcher("genetic", space, [Objective("val_accuracy", "max")], seed=1)
    while not searcher.done():
        for trial in searcher.ask(free_slots):     # may return fewer, even none
            launch(trial.id, trial.config)
        trial_id, metrics = wait_for_one()          # or a Failure("timeout")
        searcher.tell(trial_id, metrics)

``ask`` returns fewer trials than asked for when the search must wait for
results first (the barrier at the end of a generation) or has fewer left in its
budget. ``state()`` is JSON data the orchestrator journals after every call;
``restore(state)`` on a fresh searcher built with the same arguments continues
exactly where the journalled one was, so a requeued Slurm job resumes the same
search rather than a similar one.

Why the state is an event log (every ask with the trials it returned, every
tell with its result) rather than a snapshot of each algorithm's internals: the
log is the same small format for every algorithm, it is enough to rebuild any
of them by replaying, and replay *checks itself* (each replayed ask must return
the trials that were recorded), so a state restored with other settings or
another library version fails loudly instead of silently diverging.
Algorithms whose asks are expensive to recompute (Bayesian) replay from the
recorded trials instead of recomputing them.
"""

from __future__ import annotations

import abc
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from nestor.search._budget import UNLIMITED_TRIALS, CostBudget, Spend, parse_budget
from nestor.search._settings import SearchSettings
from nestor.search.space import Scalar, SearchSpace

STATE_FORMAT = 1


@dataclass(frozen=True)
class Objective:
    """One metric to optimize: ``mode`` is "min" or "max".

    ``threshold`` stops the search once a trial reaches it (at most it for
    "min", at least it for "max"). With several objectives the search is
    multi-objective and stops once one trial reaches every threshold given.
    """

    metric: str = "val_accuracy"
    mode: Literal["min", "max"] = "max"
    threshold: float | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.metric, str) or not self.metric:
            raise ValueError(f"metric must be a non-empty string, but got {self.metric!r}")
        if self.mode not in ("min", "max"):
            raise ValueError(f"mode must be one of min, max, but got {self.mode!r}")
        if self.threshold is not None:
            if not _is_real(self.threshold) or not math.isfinite(self.threshold):
                raise ValueError(f"threshold must be a finite number, but got {self.threshold!r}")
            object.__setattr__(self, "threshold", float(self.threshold))

    @property
    def sign(self) -> float:
        """+1 for "min", -1 for "max": ``sign * value`` is always minimized."""
        return 1.0 if self.mode == "min" else -1.0

    def reached(self, value: float) -> bool:
        if self.threshold is None:
            return False
        return value <= self.threshold if self.mode == "min" else value >= self.threshold

    @classmethod
    def coerce(cls, value: Any) -> Objective:
        """An Objective from itself, a (metric, mode[, threshold]) tuple, a mapping,
        or any object with those attributes (the spec's pydantic model)."""
        if isinstance(value, Objective):
            return value
        if isinstance(value, Mapping):
            return cls(**value)
        if isinstance(value, tuple | list):
            return cls(*value)
        if hasattr(value, "metric") and hasattr(value, "mode"):
            return cls(value.metric, value.mode, getattr(value, "threshold", None))
        raise ValueError(
            "objectives must be Objective, (metric, mode, threshold) tuples or mappings,"
            f" but got {value!r}"
        )


def as_objectives(objectives: Any) -> tuple[Objective, ...]:
    """Normalize one objective or a sequence of them; metric names must differ."""
    if isinstance(objectives, Objective | Mapping) or (
        hasattr(objectives, "metric") and hasattr(objectives, "mode")
    ):
        objectives = [objectives]
    if isinstance(objectives, tuple) and objectives and isinstance(objectives[0], str):
        objectives = [objectives]  # a single (metric, mode) tuple
    result = tuple(Objective.coerce(o) for o in objectives)
    if not result:
        raise ValueError("objectives must list at least one objective, but got none")
    metrics = [o.metric for o in result]
    if len(set(metrics)) != len(metrics):
        raise ValueError(f"objective metrics must be distinct, but got {metrics}")
    return result


@dataclass(frozen=True)
class Failure:
    """The result of a trial that produced no usable value (crash, timeout, NaN)."""

    reason: str = "failed"


@dataclass(frozen=True)
class Trial:
    """A configuration to evaluate, with where it came from.

    ``id`` is unique within its search and stable across ``restore``;
    ``parents`` are the ids of the trials it was bred from (genetic search)
    or continues (PBT, successive halving);
    ``origin`` says how it was made: "random", "grid", "model" (Bayesian),
    "crossover", "mutation", "crossover+mutation", "warm-start", "continue",
    "exploit" (PBT), "promotion" (successive halving).
    ``config`` holds every parameter of the space, constants included (in a
    conditional space, the active ones only); treat it as read-only (it is the
    searcher's record too).

    Searches that use training itself (population-based training, successive
    halving) also say how to train:

    - ``continue_from``: the id of an earlier trial of this search whose
      checkpoint (weights *and* optimizer state) this trial starts from,
      instead of from scratch. None: from scratch.
    - ``budget``: the training length to reach, in the search's budget unit
      (epochs unless the stage maps it to another trainer setting): the
      trainer trains from the checkpoint's own length up to ``budget``, so a
      trial continuing a 3-epoch checkpoint with budget 9 trains 6 epochs.
      None: the trainer's own setting (every other search).
    - ``member``: the population member this trial belongs to (PBT).

    PBT also uses ``generation`` for the interval index; successive halving
    uses it for the rung and ``deme`` for the Hyperband bracket. The three
    fields appear in :meth:`to_dict` only when set, so the journals of the
    other searches are unchanged.
    """

    id: str
    config: dict[str, Scalar]
    generation: int = 0
    deme: int = 0
    parents: tuple[str, ...] = ()
    origin: str = "random"
    continue_from: str | None = None
    budget: int | float | None = None
    member: int | None = None

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "id": self.id,
            "config": dict(self.config),
            "generation": self.generation,
            "deme": self.deme,
            "parents": list(self.parents),
            "origin": self.origin,
        }
        for name in ("continue_from", "budget", "member"):
            if getattr(self, name) is not None:
                data[name] = getattr(self, name)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Trial:
        continue_from = data.get("continue_from")
        member = data.get("member")
        return cls(
            id=str(data["id"]),
            config=dict(data["config"]),
            generation=int(data["generation"]),
            deme=int(data["deme"]),
            parents=tuple(data["parents"]),
            origin=str(data["origin"]),
            continue_from=None if continue_from is None else str(continue_from),
            budget=data.get("budget"),
            member=None if member is None else int(member),
        )


@dataclass(frozen=True)
class Observation:
    """A told trial: its objective values in objective order, or why it failed."""

    trial: Trial
    values: tuple[float, ...] | None
    failure: str | None = None

    @property
    def failed(self) -> bool:
        return self.values is None

    @property
    def config(self) -> dict[str, Scalar]:
        return self.trial.config

    @property
    def value(self) -> float:
        """The first objective's value (the only one in single-objective searches)."""
        if self.values is None:
            raise ValueError(f"trial {self.trial.id} failed ({self.failure}): it has no value")
        return self.values[0]


def _is_real(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def parse_result(
    objectives: Sequence[Objective], result: Any
) -> tuple[tuple[float, ...] | None, str | None]:
    """(values, None) for a usable result, (None, reason) for a failure.

    A result is a number (one objective), a sequence of numbers in objective
    order, a mapping from metric name to number (extra metrics are ignored:
    trainers report more than they are tuned on), or a :class:`Failure`.
    NaN and infinite values are failures: a diverged training run is a failed
    trial, and an infinity would poison the models and selections downstream.
    """
    if isinstance(result, Failure):
        return None, result.reason
    metrics = [o.metric for o in objectives]
    if isinstance(result, Mapping):
        missing = [m for m in metrics if m not in result]
        if missing:
            raise ValueError(
                f"result must report the metrics {metrics}, but {missing} are missing"
                f" from {sorted(result)}"
            )
        raw = [result[m] for m in metrics]
    elif _is_real(result):
        raw = [result]
    elif isinstance(result, Sequence) and not isinstance(result, str):
        raw = list(result)
    else:
        raise ValueError(
            "result must be a number, a sequence of numbers, a mapping of metric to number"
            f" or a Failure, but got {result!r}"
        )
    if len(raw) != len(metrics):
        raise ValueError(
            f"result must have {len(metrics)} value(s) ({', '.join(metrics)}),"
            f" but got {len(raw)}: {raw!r}"
        )
    values = []
    for metric, value in zip(metrics, raw, strict=True):
        if not _is_real(value):
            try:  # numpy scalars and the like
                value = float(value)
            except (TypeError, ValueError):
                raise ValueError(f"{metric} must be a number, but got {value!r}") from None
        if not math.isfinite(value):
            return None, f"{metric} is {value}"
        values.append(float(value))
    return tuple(values), None


def dominates(a: Sequence[float], b: Sequence[float], signs: Sequence[float]) -> bool:
    """True if ``a`` is no worse than ``b`` in every objective and better in one."""
    better = False
    for x, y, s in zip(a, b, signs, strict=True):
        if s * x > s * y:
            return False
        if s * x < s * y:
            better = True
    return better


def non_dominated(points: Sequence[Sequence[float]], signs: Sequence[float]) -> list[int]:
    """Indices of the points no other point dominates, in input order; equal points are
    all kept. ``signs`` as :attr:`Objective.sign` (+1 minimised, -1 maximised). The one
    Pareto rule: the searchers' fronts and the results' and plots' fronts use it."""
    return [i for i, a in enumerate(points)
            if not any(dominates(b, a, signs) for j, b in enumerate(points) if j != i)]


def pareto_front(
    observations: Iterable[Observation], objectives: Sequence[Objective]
) -> list[Observation]:
    """The non-dominated successful observations, in the order they were told."""
    done = [o for o in observations if o.values is not None]
    front = non_dominated([o.values for o in done],  # type: ignore[misc]
                          [o.sign for o in objectives])
    return [done[i] for i in front]


def _encode_result(values: tuple[float, ...] | None, failure: str | None) -> dict[str, Any]:
    return {"failure": failure} if values is None else {"values": list(values)}


def _decode_result(data: Mapping[str, Any]) -> Any:
    return Failure(data["failure"]) if "failure" in data else list(data["values"])


def observations_from_state(state: Mapping[str, Any]) -> list[Observation]:
    """The told trials recorded in a searcher's ``state()``, without rebuilding it.

    This is what a new search is warm-started from: the previous run's journal.
    """
    asked: dict[str, Trial] = {}
    result: list[Observation] = []
    for event in state.get("events", []):
        if event["event"] == "ask":
            for data in event["trials"]:
                asked[data["id"]] = Trial.from_dict(data)
        elif event["event"] == "tell":
            data = event["result"]
            values = tuple(data["values"]) if "values" in data else None
            result.append(Observation(asked[event["id"]], values, data.get("failure")))
    return result


@dataclass
class _Book:
    """What the base class keeps for every algorithm: trials, results, the log."""

    trials: dict[str, Trial] = field(default_factory=dict)
    pending: dict[str, Trial] = field(default_factory=dict)
    observations: list[Observation] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)


class Searcher(abc.ABC):
    """Base of every search algorithm: ask/tell, stopping, best, state.

    Subclasses implement :meth:`_ask` (propose up to n trials, made with
    :meth:`_new_trial`), :meth:`_tell` (learn from one observation) and
    :attr:`planned` (how many trials the search means to run). Everything else
    (id bookkeeping, result parsing, thresholds, the event log, restore) lives
    here so that every algorithm behaves the same at the edges.
    """

    algorithm: ClassVar[str] = ""
    # Its settings, declared once (search/_settings.py): the constructor's keywords,
    # the spec's fields and the `nestor sweep` flags all come from this.
    Settings: ClassVar[type] = SearchSettings
    # Its trials continue earlier trials' checkpoints up to a budget (PBT, ASHA): the
    # spec gives its search a ``fidelity`` and asks the trainer for checkpoints.
    continues_trials: ClassVar[bool] = False
    # Old spellings of its settings -> their names (read with a deprecation notice).
    renamed_settings: ClassVar[Mapping[str, str]] = {}
    auto_choice: Any = None  # the AutoChoice that picked this search (make_searcher("auto"))

    def __init__(
        self,
        space: SearchSpace,
        objectives: Any,
        *,
        seed: int = 0,
        budget: int | Mapping[str, float] | None = None,
    ) -> None:
        if not isinstance(space, SearchSpace):
            raise ValueError(f"space must be a SearchSpace, but got {type(space).__name__}")
        if not isinstance(seed, int) or isinstance(seed, bool):
            raise ValueError(f"seed must be an integer, but got {seed!r}")
        trials, cost = parse_budget(budget)
        self.space = space
        self.objectives = as_objectives(objectives)
        self.seed = seed
        # Under a cost budget the trial count is unlimited: the cost ends the search
        # (subclasses plan generations, iterations, intervals from ``self.budget``).
        self.budget: int | None = UNLIMITED_TRIALS if cost is not None else trials
        self.cost_budget: CostBudget | None = cost
        self._spend = Spend(cost) if cost is not None else None
        if isinstance(budget, Mapping):
            budget = dict(budget)
        self._book = _Book()
        self._stop_reason: str | None = None
        self._warm_started = False
        self._enqueued = 0  # configurations search.enqueue gave, asked before any other
        self._settings: dict[str, Any] = {"seed": seed, "budget": budget}
        # While restore replays an ask: the journal's trials by id, so a
        # subclass can take a costly model-based pick from the record instead
        # of refitting (everything else is still recomputed and checked).
        self._recorded: dict[str, Trial] | None = None

    # --- what subclasses provide ----------------------------------------------------

    @property
    @abc.abstractmethod
    def planned(self) -> int:
        """How many trials this search means to run in all (its budget included)."""

    @abc.abstractmethod
    def _ask(self, n: int) -> list[Trial]:
        """Up to ``n`` new trials (n >= 1 and within the budget), made with _new_trial.

        An ask that returns no trials must leave the search as it was (no RNG
        draw, no bookkeeping): such asks are not journalled, so replay never
        repeats them.
        """

    @abc.abstractmethod
    def _tell(self, trial: Trial, observation: Observation) -> None:
        """Learn from one result; may call :meth:`_stop`."""

    def _next_size(self) -> float | None:
        """The training (fidelity units) the trial the next ask returns would ask for,
        without asking it; None: a trial trained in full (every search that does not
        continue trials). A cost budget asks only while this trial still fits."""
        return None

    def _event_extra(self, trials: list[Trial]) -> dict[str, Any]:
        """More to record with an ask, for :meth:`_replay_ask` (none by default)."""
        return {}

    def _warm_start(self, observations: list[Observation]) -> None:
        """Use a previous run's observations (successful ones, best first)."""
        raise ValueError(f"{self.algorithm} search cannot be warm-started")

    def _enqueue(self, configs: list[dict[str, Scalar]]) -> None:
        """Ask ``configs`` (full configurations in this space) first, in order. The
        searches that keep a list of configurations to ask first (``_seeds``: random,
        genetic, successive halving, PBT) put them at its head; others override it."""
        if not hasattr(self, "_seeds"):
            raise ValueError(f"{self.algorithm} search cannot take enqueued configurations")
        searched = [p.name for p in self.space.searched]
        self._seeds[:0] = [{name: c[name] for name in searched} for c in configs]

    # --- the public surface -----------------------------------------------------------

    @property
    def multi_objective(self) -> bool:
        return len(self.objectives) > 1

    @classmethod
    def one_objective(cls, settings: Mapping[str, Any]) -> str | None:
        """Why this search, with these settings, takes exactly one objective (what it
        ranks or models by one number); None where it takes several. Asked before any
        search is made (`nestor validate`), so that a spec listing two objectives is
        refused at its line, not when the stage starts."""
        return None

    @property
    def observations(self) -> list[Observation]:
        """Every told trial, in the order told (failures included)."""
        return list(self._book.observations)

    @property
    def trials(self) -> dict[str, Trial]:
        """Every asked trial by id, in ask order (e.g. to follow ``continue_from``)."""
        return dict(self._book.trials)

    @property
    def pending(self) -> list[Trial]:
        """Trials asked for and not yet told, oldest first."""
        return list(self._book.pending.values())

    @property
    def n_asked(self) -> int:
        return len(self._book.trials)

    @property
    def stop_reason(self) -> str | None:
        """Why the search ended (None while it runs)."""
        self.done()
        return self._stop_reason

    def ask(self, n: int = 1) -> list[Trial]:
        """Up to ``n`` trials to run now; [] when the search is waiting or done."""
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise ValueError(f"n must be a positive integer, but got {n!r}")
        room = self.planned - self.n_asked
        if self._stop_reason is not None or room <= 0:
            trials = []
        elif self._spend is None:
            trials = self._ask(min(n, room))
        else:
            trials = self._ask_within_cost(min(n, room))
        if not trials:
            # Nothing changed (see _ask), so nothing to replay: a driver that polls a
            # search waiting at a generation barrier must not grow its journal.
            return trials
        event = {"event": "ask", "n": n, "trials": [t.to_dict() for t in trials]}
        event.update(self._event_extra(trials))
        self._book.events.append(event)
        return trials

    def _ask_within_cost(self, n: int) -> list[Trial]:
        """One trial at a time while the next still fits the cost budget."""
        trials: list[Trial] = []
        while len(trials) < n and self._fits(self._next_size()):
            got = self._ask(1)
            if not got:
                break
            trials += got
        return trials

    def _size(self, trial: Trial) -> float | None:
        """The fidelity units ``trial`` trains (None: in full)."""
        if trial.budget is None:
            return None
        start = 0.0
        if trial.continue_from is not None:
            source = self._book.trials[trial.continue_from].budget
            start = float(source) if source is not None else 0.0
        return float(trial.budget) - start

    def _fits(self, size: float | None) -> bool:
        assert self._spend is not None
        return self._spend.fits((self._size(t) for t in self._book.pending.values()), size)

    @property
    def cost_spent(self) -> float | None:
        """What the told trials cost, in the cost budget's unit (None without one)."""
        return None if self._spend is None else self._spend.spent

    def tell(self, trial_id: str, result: Any, *, cost: float | None = None) -> Observation:
        """Record the result of an asked trial: a value, values, metrics or a Failure.

        ``cost``: what the trial cost in the unit of the search's cost budget
        (slot-seconds for ``{slot_seconds}`` and ``{hours}``, epochs for
        ``{epochs}``); searches without a cost budget ignore it."""
        trial, observation = self._record_tell(trial_id, result, cost)
        self._tell(trial, observation)
        values = observation.values
        if values is not None and self._stop_reason is None and self._reached(values):
            self._stop(f"trial {trial.id} reached the threshold ({self._describe(values)})")
        return observation

    def _record_tell(self, trial_id: Any, result: Any,
                     cost: float | None) -> tuple[Trial, Observation]:
        """What :meth:`tell` keeps for every algorithm (the book, the log, the spend),
        without the algorithm's own :meth:`_tell`."""
        trial_id = str(trial_id)
        if trial_id not in self._book.trials:
            raise ValueError(f"trial_id must be the id of an asked trial, but got {trial_id!r}")
        if trial_id not in self._book.pending:
            raise ValueError(f"trial {trial_id!r} was already told; a trial is told once")
        values, failure = parse_result(self.objectives, result)
        if cost is not None and (not _is_real(cost) or not math.isfinite(cost) or cost < 0):
            raise ValueError(f"cost must be a non-negative number or None, but got {cost!r}")
        if self._spend is not None:
            self._spend.check(trial_id, self._size(self._book.pending[trial_id]), cost)
        trial = self._book.pending.pop(trial_id)
        observation = Observation(trial, values, failure)
        self._book.observations.append(observation)
        event: dict[str, Any] = {"event": "tell", "id": trial_id,
                                 "result": _encode_result(values, failure)}
        if cost is not None and self._spend is not None:
            event["cost"] = float(cost)
        self._book.events.append(event)
        if self._spend is not None:
            self._spend.record(trial_id, self._size(trial), cost)
        return trial, observation

    def done(self) -> bool:
        """True when the search is over: it stopped early (threshold, patience,
        a generation that failed entirely), or every planned trial was asked
        and told. After an early stop, trials still running may be cancelled;
        telling their results is still allowed and recorded."""
        if self._stop_reason is None and self.n_asked >= self.planned and not self._book.pending:
            self._stop_reason = f"all {self.planned} planned trials were run"
        if self._stop_reason is None and self._spend is not None and not self._book.pending:
            size = self._next_size()
            if not self._fits(size):
                spend, budget = self._spend, self.cost_budget
                assert budget is not None
                self._stop_reason = (
                    f"the budget of {budget.describe()} is spent as far as a trial fits"
                    f" ({budget.describe(spend.spent)} used; the next trial would need about"
                    f" {budget.describe(spend.estimate(size))})")
        return self._stop_reason is not None

    def best(self) -> Observation | None:
        """The best successful observation so far (None if there is none).

        With several objectives: the Pareto-front member best in the first
        objective (use :meth:`pareto_front` for the whole trade-off).
        Where trials carry a training ``budget`` (PBT, successive halving),
        only those trained the longest so far compete: a lucky result after
        one epoch is not a better model than a 27-epoch one, and the best
        trial is the one a later stage would continue or retrain.
        """
        sign = self.objectives[0].sign
        candidates = self.pareto_front() if self.multi_objective else self._book.observations
        done = [o for o in candidates if o.values is not None]
        if not done:
            return None
        budgets = [o.trial.budget for o in done if o.trial.budget is not None]
        if budgets:
            longest = max(budgets)
            done = [o for o in done if o.trial.budget == longest]
        return min(done, key=lambda o: sign * o.values[0])  # type: ignore[index]

    def ranked(self) -> list[Observation]:
        """Successful observations best first: the longest-trained first (as in
        :meth:`best`), then by the objectives in order. The driver keeps the
        checkpoints of the first few (``trial.keep_checkpoints``)."""
        done = [o for o in self._book.observations if o.values is not None]
        return sorted(done, key=lambda o: (-(o.trial.budget or 0), self._key(o.values),  # type: ignore[arg-type]
                                           int(o.trial.id) if o.trial.id.isdigit() else 0))

    def continuable(self) -> set[str]:
        """Told trials whose checkpoints a trial asked later may still continue
        from: the driver must not remove those. None once the search is done
        (nothing more is asked), nor ever for searches whose trials train from
        scratch; PBT and successive halving say which of theirs can still be
        exploited or promoted (:meth:`_continuable`)."""
        return set() if self.done() else self._continuable()

    def _continuable(self) -> set[str]:
        return set()

    def pareto_front(self) -> list[Observation]:
        """The non-dominated successful observations (the best one, or ties, for
        a single objective)."""
        return pareto_front(self._book.observations, self.objectives)

    def warm_start(
        self, observations: Iterable[Observation | tuple[Mapping[str, Any], Any]]
    ) -> int:
        """Seed this search from a previous run's results, before the first ask.

        ``observations`` are :class:`Observation` objects (``searcher.observations``
        or :func:`observations_from_state` of a journalled state) or
        ``(config, result)`` pairs. Configurations outside this space are
        skipped; constants are taken from this space. Returns how many were
        used. Warm-start results never count as this search's own (``best()``
        reports only trials run here: the old run may have trained on other data).
        """
        if self._book.trials or self._warm_started:
            raise ValueError("warm_start must be called once, before the first ask")
        used = []
        for item in observations:
            if isinstance(item, Observation):
                config, values, failure = dict(item.config), item.values, item.failure
            else:
                config, result = item
                values, failure = parse_result(self.objectives, result)
                config = dict(config)
            config.update(self.space.constants())
            config = {name: config.get(name) for name in self.space.names}
            if not self.space.contains(config):
                continue
            trial = Trial(id=f"warm-{len(used)}", config=config, origin="warm-start")
            used.append(Observation(trial, values, failure))
        self._warm_started = True
        self._book.events.append(
            {
                "event": "warm_start",
                "observations": [
                    {"config": o.config, "result": _encode_result(o.values, o.failure)}
                    for o in used
                ],
            }
        )
        self._warm_start(used)
        return len(used)

    def enqueue(self, configs: Iterable[Mapping[str, Any]]) -> int:
        """Configurations to try first, in order, before the search's own (``search.enqueue``),
        called once before the first ask (after :meth:`warm_start`, if any). Each must lie
        in the space (constants are filled in); returns how many were queued."""
        if self._book.trials:
            raise ValueError("enqueue must be called before the first ask")
        queued = []
        for index, item in enumerate(configs):
            config = {**dict(item), **self.space.constants()}
            missing = [name for name in self.space.names if name not in config]
            config = {name: config.get(name) for name in self.space.names}
            if missing or not self.space.contains(config):
                raise ValueError(
                    f"enqueued configuration #{index + 1} {dict(item)!r} must give a value in"
                    f" the space for each of {list(self.space.names)}"
                    + (f" (missing: {missing})" if missing else ""))
            queued.append(config)
        self._enqueue(queued)  # refuses before anything is logged
        self._book.events.append({"event": "enqueue", "configs": queued})
        self._enqueued += len(queued)
        return len(queued)

    def extend(self, budget: int) -> None:
        """Raise the search's trial budget to ``budget``: a finished or running search
        goes on where it is, the same search, with more trials (``nestor resume
        --budget``). Logged, so that a restore replays it at the same place. A search
        whose plan does not grow with its budget (a genetic search's generations, a
        grid), or one under a cost budget, refuses with ValueError and is unchanged."""
        if not isinstance(budget, int) or isinstance(budget, bool) or budget < 1:
            raise ValueError(f"budget must be a positive number of trials, but got {budget!r}")
        if self.cost_budget is not None:
            raise ValueError(f"this search spends a cost budget ({self.cost_budget.describe()});"
                             " only a budget of trials can be extended")
        before, planned = self.budget, self.planned
        if budget <= planned:
            raise ValueError(f"budget must be above the {planned} trials the search plans,"
                             f" but got {budget}")
        self.budget = budget
        if self.planned <= planned:
            self.budget = before
            raise ValueError(
                f"{self.algorithm} search cannot run more than the {planned} trials its own"
                " settings plan (its generations, intervals, brackets or grid): raise those"
                " in a new run instead")
        self._book.events.append({"event": "extend", "budget": budget})
        if self._stop_reason is not None and self._stop_reason.startswith("all "):
            self._stop_reason = None  # only the end of its trials: it goes on

    # --- state ------------------------------------------------------------------------

    def log_since(self, start: int) -> list[dict[str, Any]]:
        """The entries of the state's ``events`` log from index ``start`` on (JSON data).

        A driver journals these as they come and snapshots the whole
        :meth:`state` only now and then, instead of rewriting a state that
        grows with every call after every call. The entries are the log's own
        (each built afresh as JSON data by its call, never changed after): a copy
        per entry, a JSON round trip, was a twentieth of the driver's CPU per
        event at 32,768 slots; callers must not modify them."""
        return self._book.events[start:]

    def state(self) -> dict[str, Any]:
        """JSON-serialisable data from which :meth:`restore` rebuilds this search.

        Keys: ``format`` (1), ``algorithm``, ``settings`` (the constructor's),
        ``space`` and ``objectives`` (their reprs, to refuse a mismatched
        restore) and ``events``, in call order: ``{"event": "ask", "n", "trials":
        [Trial.to_dict()...]}`` (Bayesian adds ``notes``, the sampler's per-trial
        records), ``{"event": "tell", "id", "result": {"values": [...]} or
        {"failure": reason}}`` and ``{"event": "warm_start", "observations"}``.
        It grows by one small entry per tell and per ask that returned trials
        (an empty ask, e.g. at a generation barrier, changes nothing and is not
        recorded); :func:`observations_from_state`
        reads the results out of it without rebuilding the search.
        """
        return json.loads(
            json.dumps(
                {
                    "format": STATE_FORMAT,
                    "algorithm": self.algorithm,
                    "settings": self._settings,
                    "space": repr(self.space),
                    "objectives": [repr(o) for o in self.objectives],
                    "events": self._book.events,
                },
                allow_nan=False,
            )
        )

    def _header(self) -> dict[str, Any]:
        """What a state or snapshot must share with this search to continue it."""
        return {
            "format": STATE_FORMAT,
            "algorithm": self.algorithm,
            "settings": json.loads(json.dumps(self._settings)),
            "space": repr(self.space),
            "objectives": [repr(o) for o in self.objectives],
        }

    def restore(self, state: Mapping[str, Any],
                snapshot: Mapping[str, Any] | None = None) -> int:
        """Continue the search recorded in ``state`` (on a fresh searcher built with
        the same space, objectives and settings).

        ``snapshot``: a :meth:`snapshot` taken after the log's first entries: those
        entries then only fill the book (their asks are not recomputed) and the
        algorithm continues from the snapshot's internals; the entries after it are
        replayed and checked as always. A snapshot that does not match this search
        and this log (another search's, one whose last entry is not the log's at its
        place, one cut or garbled) is ignored: the whole log is replayed. Returns how
        many of the log's entries the snapshot covered (0: none used)."""
        if self._book.events:
            raise ValueError("restore must be called on a fresh searcher, before any ask or tell")
        if state.get("format") != STATE_FORMAT:
            raise ValueError(
                f"state format must be {STATE_FORMAT}, but got {state.get('format')!r}"
            )
        for key, expected in self._header().items():
            if state.get(key) != expected:
                raise ValueError(
                    f"state must come from a search with the same {key}, but it has"
                    f" {state.get(key)!r} and this search has {expected!r}"
                )
        events = state["events"]
        covers, resume = self._snapshot_fits(snapshot, events)
        if resume is not None:
            assert snapshot is not None
            self._replay(events[:covers], book_only=True)
            resume()
            self._stop_reason = snapshot["stop_reason"]
        self._replay(events[covers:], book_only=False)
        return covers

    def snapshot(self) -> dict[str, Any] | None:
        """The search's internals now, as JSON data, for :meth:`restore` to continue
        from without recomputing the log's asks (at a million events, replaying a
        genetic search's 280,000 entries was a third of a resume); None where the
        algorithm keeps none (its log is its state). It names the log entries it
        covers and the last of them, which restore checks against the log."""
        internals = self._internals()
        if internals is None:
            return None
        events = self._book.events
        return {**self._header(), "covers": len(events),
                "last": events[-1] if events else None,
                "stop_reason": self._stop_reason, "internals": internals}

    def _internals(self) -> dict[str, Any] | None:
        """The algorithm's own state (JSON data; None: it keeps none, replay the log)."""
        return None

    def _resume(self, internals: Mapping[str, Any]) -> Any:
        """Decode :meth:`_internals`' data; returns a callable that puts it in place
        (decoding raises on malformed data before anything changes)."""
        raise ValueError(f"{self.algorithm} search keeps no internals to restore")

    def _snapshot_fits(self, snapshot: Any, events: Sequence[Mapping[str, Any]]
                       ) -> tuple[int, Any]:
        """(entries covered, the callable that restores its internals), or (0, None)
        where the snapshot does not continue this search's log."""
        if not isinstance(snapshot, Mapping) or not events:
            return 0, None
        if any(snapshot.get(key) != expected for key, expected in self._header().items()):
            return 0, None
        covers = snapshot.get("covers")
        if (not isinstance(covers, int) or isinstance(covers, bool)
                or not 0 < covers <= len(events) or events[covers - 1] != snapshot.get("last")):
            return 0, None
        stop = snapshot.get("stop_reason")
        if stop is not None and not isinstance(stop, str):
            return 0, None
        try:
            return covers, self._resume(snapshot["internals"])
        except (KeyError, IndexError, TypeError, ValueError, AttributeError):
            return 0, None

    def _replay(self, events: Sequence[Mapping[str, Any]], *, book_only: bool) -> None:
        """The log's entries again. ``book_only`` (the entries a snapshot covers): into
        the book alone, trials, results, spend and the log itself (what a snapshot's
        internals do not hold), the algorithm not run; otherwise each ask is recomputed
        and checked against the log and each result told."""
        book = self._book
        for event in events:
            kind = event["event"]
            if kind == "ask":
                recorded = [Trial.from_dict(t) for t in event["trials"]]
                if not book_only:
                    self._replay_ask(event["n"], recorded, event)
                    continue
                for trial in recorded:
                    book.trials[trial.id] = trial
                    book.pending[trial.id] = trial
                book.events.append(event)  # type: ignore[arg-type]
            elif kind == "tell":
                result = _decode_result(event["result"])
                if book_only:
                    self._record_tell(event["id"], result, event.get("cost"))
                else:
                    self.tell(event["id"], result, cost=event.get("cost"))
            elif kind == "warm_start":
                self.warm_start(
                    (o["config"], _decode_result(o["result"])) for o in event["observations"]
                )
            elif kind == "enqueue":  # a snapshot's internals then put in place over it
                self.enqueue(event["configs"])
            elif kind == "extend":
                self.extend(event["budget"])
            else:
                raise ValueError("state events must be ask, tell, warm_start, enqueue or extend,"
                                 f" but got {kind!r}")

    def _replay_ask(self, n: int, recorded: list[Trial], event: Mapping[str, Any]) -> None:
        """Recompute an ask and check it matches the log (Bayesian overrides this)."""
        self._recorded = {t.id: t for t in recorded}
        try:
            trials = self.ask(n)
        finally:
            self._recorded = None
        if trials != recorded:
            raise ValueError(
                "restore must replay the recorded search, but ask #"
                f"{sum(1 for e in self._book.events if e['event'] == 'ask')} returned"
                f" {[t.to_dict() for t in trials]} where the state recorded"
                f" {[t.to_dict() for t in recorded]} (other settings or library versions?)"
            )

    # --- helpers for subclasses -------------------------------------------------------

    def _new_trial(
        self,
        config: Mapping[str, Scalar],
        *,
        generation: int = 0,
        deme: int = 0,
        parents: Sequence[str] = (),
        origin: str = "random",
        continue_from: str | None = None,
        budget: int | float | None = None,
        member: int | None = None,
    ) -> Trial:
        """Register a new trial with the next id (ids are "0", "1", ... in ask order)."""
        full = {**config, **self.space.constants()}
        if self.space.conditions or self.space.constraints:
            full = self.space.project(full)  # a trainer gets the active parameters only
            if not self.space.contains(full):
                raise RuntimeError(
                    f"{self.algorithm} search made configuration {full}, which is not in"
                    f" the space {self.space!r}: a bug in the search, please report it")
        else:
            full = {name: full[name] for name in self.space.names}
        if origin == "warm-start" and self._enqueued:
            # Enqueued configurations lead the list searches keep of those to ask first.
            asked = sum(1 for t in self._book.trials.values() if t.origin == "enqueued")
            if asked < self._enqueued:
                origin = "enqueued"
        trial = Trial(
            id=str(len(self._book.trials)),
            config=full,
            generation=generation,
            deme=deme,
            parents=tuple(parents),
            origin=origin,
            continue_from=continue_from,
            budget=budget,
            member=member,
        )
        self._book.trials[trial.id] = trial
        self._book.pending[trial.id] = trial
        return trial

    def _whole(self, config: Mapping[str, Scalar]) -> Mapping[str, Scalar]:
        """``config`` with a value for every parameter: in a conditional space a
        trial's config lacks its inactive parameters, and an algorithm that works
        on whole vectors (PBT's perturbation, CMA-ES's start, a promotion) reads
        :meth:`SearchSpace.fill`'s default for them; the trial it makes drops them
        again."""
        return self.space.fill(config) if self.space.conditions else config

    def _stop(self, reason: str) -> None:
        if self._stop_reason is None:
            self._stop_reason = reason

    def _reached(self, values: Sequence[float]) -> bool:
        with_threshold = [
            (o, v) for o, v in zip(self.objectives, values, strict=True) if o.threshold is not None
        ]
        return bool(with_threshold) and all(o.reached(v) for o, v in with_threshold)

    def _describe(self, values: Sequence[float]) -> str:
        return ", ".join(
            f"{o.metric}={v:.6g}" for o, v in zip(self.objectives, values, strict=True)
        )

    def _key(self, values: Sequence[float]) -> tuple[float, ...]:
        """Values turned into a tuple to minimize."""
        return tuple(o.sign * v for o, v in zip(self.objectives, values, strict=True))
