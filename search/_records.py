"""The records every search shares: objectives, trials, results and their parsing.

Why a module of their own: the ask/tell records are the search's language to the
driver, the journal and the warm start (which reads them out of a state without
building a searcher); none of them needs the machinery of :class:`Searcher`, and
the algorithms, the Pareto rule and the state all use them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from nestor.search.space import Scalar


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
            if not is_real(self.threshold) or not math.isfinite(self.threshold):
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


def is_real(value: Any) -> bool:
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
    elif is_real(result):
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
        if not is_real(value):
            try:  # numpy scalars and the like
                value = float(value)
            except (TypeError, ValueError):
                raise ValueError(f"{metric} must be a number, but got {value!r}") from None
        if not math.isfinite(value):
            return None, f"{metric} is {value}"
        values.append(float(value))
    return tuple(values), None



def encode_result(values: tuple[float, ...] | None, failure: str | None) -> dict[str, Any]:
    return {"failure": failure} if values is None else {"values": list(values)}


def decode_result(data: Mapping[str, Any]) -> Any:
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
