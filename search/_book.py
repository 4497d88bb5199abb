"""The book a search keeps: its trials, the pending ones, the results told, and the log.

Why apart from the algorithms: ids, "a trial is told once", results parsed one way,
the configurations a search was given to start from (a warm start, enqueued ones)
and the event log that the state is made of are the same for every algorithm, so
every algorithm behaves the same at the edges. An algorithm reads the book; only the
searcher's own calls (ask, tell, warm start, enqueue, extend, and a restore's replay)
write it: what Optuna keeps in its storage, apart from its samplers.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from nestor.search._records import (
    Objective,
    Observation,
    Trial,
    encode_result,
    is_real,
    parse_result,
)
from nestor.search.space import Scalar, SearchSpace

if TYPE_CHECKING:
    from nestor.search._costs import Costs


@dataclass
class Book:
    """What a searcher keeps for its algorithm: trials, results, the log."""

    space: SearchSpace
    objectives: tuple[Objective, ...]
    algorithm: str
    trials: dict[str, Trial] = field(default_factory=dict)
    pending: dict[str, Trial] = field(default_factory=dict)
    observations: list[Observation] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    enqueued: int = 0  # configurations search.enqueue gave, asked before any other

    def new_trial(
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
        if origin == "warm-start" and self.enqueued:
            # Enqueued configurations lead the list searches keep of those to ask first.
            asked = sum(1 for t in self.trials.values() if t.origin == "enqueued")
            if asked < self.enqueued:
                origin = "enqueued"
        trial = Trial(
            id=str(len(self.trials)),
            config=full,
            generation=generation,
            deme=deme,
            parents=tuple(parents),
            origin=origin,
            continue_from=continue_from,
            budget=budget,
            member=member,
        )
        self.trials[trial.id] = trial
        self.pending[trial.id] = trial
        return trial

    def record_ask(self, event: dict[str, Any], recorded: Iterable[Trial] = ()) -> None:
        """Log an ask; ``recorded``: its trials, from a log, into the book as well
        (a replay that does not run the algorithm)."""
        for trial in recorded:
            self.trials[trial.id] = trial
            self.pending[trial.id] = trial
        self.events.append(event)

    def record_tell(self, trial_id: Any, result: Any, cost: float | None,
                    costs: Costs | None) -> tuple[Trial, Observation]:
        """What a tell keeps for every algorithm (the book, the log, the spend),
        without the algorithm's own learning."""
        trial_id = str(trial_id)
        if trial_id not in self.trials:
            raise ValueError(f"trial_id must be the id of an asked trial, but got {trial_id!r}")
        if trial_id not in self.pending:
            raise ValueError(f"trial {trial_id!r} was already told; a trial is told once")
        values, failure = parse_result(self.objectives, result)
        if cost is not None and (not is_real(cost) or not math.isfinite(cost) or cost < 0):
            raise ValueError(f"cost must be a non-negative number or None, but got {cost!r}")
        if costs is not None:
            costs.check(trial_id, cost)
        trial = self.pending.pop(trial_id)
        observation = Observation(trial, values, failure)
        self.observations.append(observation)
        event: dict[str, Any] = {"event": "tell", "id": trial_id,
                                 "result": encode_result(values, failure)}
        if cost is not None and costs is not None:
            event["cost"] = float(cost)
        self.events.append(event)
        if costs is not None:
            costs.record(trial, cost)
        return trial, observation

    def record_warm_start(
        self, observations: Iterable[Observation | tuple[Mapping[str, Any], Any]]
    ) -> list[Observation]:
        """A previous run's results that lie in this space, logged; constants are
        this space's and ids ``warm-0``, ``warm-1``, ... (never this search's own)."""
        used: list[Observation] = []
        for item in observations:
            config: dict[str, Any]
            if isinstance(item, Observation):
                config, values, failure = dict(item.config), item.values, item.failure
            else:
                given, result = item
                values, failure = parse_result(self.objectives, result)
                config = dict(given)
            config.update(self.space.constants())
            config = {name: config.get(name) for name in self.space.names}
            if not self.space.contains(config):
                continue
            trial = Trial(id=f"warm-{len(used)}", config=config, origin="warm-start")
            used.append(Observation(trial, values, failure))
        self.events.append(
            {
                "event": "warm_start",
                "observations": [
                    {"config": o.config, "result": encode_result(o.values, o.failure)}
                    for o in used
                ],
            }
        )
        return used

    def enqueueable(self, configs: Iterable[Mapping[str, Any]]) -> list[dict[str, Scalar]]:
        """``configs`` as full configurations of this space (constants filled in);
        ValueError naming the first that is not in it."""
        if self.trials:
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
        return queued

    def record_enqueue(self, queued: list[dict[str, Scalar]]) -> None:
        self.events.append({"event": "enqueue", "configs": queued})
        self.enqueued += len(queued)
