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
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, ClassVar

from nestor.search._book import Book
from nestor.search._budget import UNLIMITED_TRIALS, CostBudget, parse_budget
from nestor.search._costs import Costs
from nestor.search._pareto import best, dominates, minimised, non_dominated, pareto_front, ranked
from nestor.search._persistence import STATE_FORMAT, Persistence
from nestor.search._records import (
    Failure,
    Objective,
    Observation,
    Trial,
    as_objectives,
    observations_from_state,
    parse_result,
)
from nestor.search._settings import SearchSettings
from nestor.search.space import Scalar, SearchSpace

__all__ = [
    "STATE_FORMAT", "Failure", "Objective", "Observation", "Searcher", "Trial",
    "as_objectives", "dominates", "non_dominated", "observations_from_state",
    "pareto_front", "parse_result",
]


class Searcher(abc.ABC):
    """Base of every search algorithm: ask/tell, stopping, best, state.

    Subclasses implement :meth:`_ask` (propose up to n trials, made with
    :meth:`_new_trial`), :meth:`_tell` (learn from one observation) and
    :attr:`planned` (how many trials the search means to run). The rest is
    composed of parts every algorithm shares, so that every algorithm behaves the
    same at the edges: the :class:`~nestor.search._book.Book` (ids, trials, results,
    the event log), the cost budget's gate (:class:`~nestor.search._costs.Costs`),
    the state (:class:`~nestor.search._persistence.Persistence`) and the Pareto rule
    (:mod:`nestor.search._pareto`); this class holds the ask/tell loop and stopping.
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
        if isinstance(budget, Mapping):
            budget = dict(budget)
        self._book = Book(space, self.objectives, self.algorithm)
        self._costs = (Costs(cost, self._book.trials, self._book.pending)
                       if cost is not None else None)
        self._persistence = Persistence(self)
        self._stop_reason: str | None = None
        self._warm_started = False
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

    def _internals(self) -> dict[str, Any] | None:
        """The algorithm's own state (JSON data; None: it keeps none, replay the log)."""
        return None

    def _resume(self, internals: Mapping[str, Any]) -> Any:
        """Decode :meth:`_internals`' data; returns a callable that puts it in place
        (decoding raises on malformed data before anything changes)."""
        raise ValueError(f"{self.algorithm} search keeps no internals to restore")

    def _replay_ask(self, n: int, recorded: list[Trial], event: Mapping[str, Any]) -> None:
        """Recompute an ask and check it matches the log (Bayesian overrides this)."""
        self._persistence.replay_ask(n, recorded)

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
        elif self._costs is None:
            trials = self._ask(min(n, room))
        else:
            trials = self._costs.ask_within(self._ask, self._next_size, min(n, room))
        if not trials:
            # Nothing changed (see _ask), so nothing to replay: a driver that polls a
            # search waiting at a generation barrier must not grow its journal.
            return trials
        event = {"event": "ask", "n": n, "trials": [t.to_dict() for t in trials]}
        event.update(self._event_extra(trials))
        self._book.record_ask(event)
        return trials

    @property
    def cost_spent(self) -> float | None:
        """What the told trials cost, in the cost budget's unit (None without one)."""
        return None if self._costs is None else self._costs.spend.spent

    def tell(self, trial_id: str, result: Any, *, cost: float | None = None) -> Observation:
        """Record the result of an asked trial: a value, values, metrics or a Failure.

        ``cost``: what the trial cost in the unit of the search's cost budget
        (slot-seconds for ``{slot_seconds}`` and ``{hours}``, epochs for
        ``{epochs}``); searches without a cost budget ignore it."""
        trial, observation = self._book.record_tell(trial_id, result, cost, self._costs)
        self._tell(trial, observation)
        values = observation.values
        if values is not None and self._stop_reason is None and self._reached(values):
            self._stop(f"trial {trial.id} reached the threshold ({self._describe(values)})")
        return observation

    def done(self) -> bool:
        """True when the search is over: it stopped early (threshold, patience,
        a generation that failed entirely), or every planned trial was asked
        and told. After an early stop, trials still running may be cancelled;
        telling their results is still allowed and recorded."""
        if self._stop_reason is None and self.n_asked >= self.planned and not self._book.pending:
            self._stop_reason = f"all {self.planned} planned trials were run"
        if self._stop_reason is None and self._costs is not None and not self._book.pending:
            self._stop_reason = self._costs.spent_reason(self._next_size())
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
        return best(self._book.observations, self.objectives)

    def ranked(self) -> list[Observation]:
        """Successful observations best first: the longest-trained first (as in
        :meth:`best`), then by the objectives in order. The driver keeps the
        checkpoints of the first few (``trial.keep_checkpoints``)."""
        return ranked(self._book.observations, self.objectives)

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
        used = self._book.record_warm_start(observations)
        self._warm_started = True
        self._warm_start(used)
        return len(used)

    def enqueue(self, configs: Iterable[Mapping[str, Any]]) -> int:
        """Configurations to try first, in order, before the search's own (``search.enqueue``),
        called once before the first ask (after :meth:`warm_start`, if any). Each must lie
        in the space (constants are filled in); returns how many were queued."""
        queued = self._book.enqueueable(configs)
        self._enqueue(queued)  # refuses before anything is logged
        self._book.record_enqueue(queued)
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

    # --- state (search/_persistence.py) -----------------------------------------------

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
        return self._persistence.state()

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
        return self._persistence.restore(state, snapshot)

    def snapshot(self) -> dict[str, Any] | None:
        """The search's internals now, as JSON data, for :meth:`restore` to continue
        from without recomputing the log's asks (at a million events, replaying a
        genetic search's 280,000 entries was a third of a resume); None where the
        algorithm keeps none (its log is its state). It names the log entries it
        covers and the last of them, which restore checks against the log."""
        return self._persistence.snapshot()

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
        return self._book.new_trial(
            config, generation=generation, deme=deme, parents=parents, origin=origin,
            continue_from=continue_from, budget=budget, member=member)

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
        return minimised(self.objectives, values)
