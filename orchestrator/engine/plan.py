"""A fixed plan of trials in phases, behind the same ask/tell surface as a searcher.

Ensemble members, transfer-learning steps and a train stage's one run are
known in advance; nothing is searched. A phase is released only when every
trial of the previous one was told (a fine-tune waits for its pretraining),
which is the generational barrier the trial runner already honours.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from nestor.search import Failure, Objective, Trial


@dataclass(frozen=True)
class PlannedTrial:
    id: str
    config: dict[str, Any]
    origin: str = "plan"
    parents: tuple[str, ...] = ()


@dataclass(frozen=True)
class Outcome:
    """What the runner's progress line and summary read: a trial and its value."""

    trial: Trial
    value: float


class Plan:
    """Phases of named trials; ``state`` is the told results, enough to resume."""

    algorithm = "plan"

    def __init__(self, phases: list[list[PlannedTrial]], objective: Objective) -> None:
        ids = [t.id for phase in phases for t in phase]
        if len(set(ids)) != len(ids):
            raise ValueError(f"planned trial ids must be distinct, but got {ids}")
        self.objective = objective
        self.trials = [
            Trial(id=t.id, config=dict(t.config), generation=g, parents=t.parents, origin=t.origin)
            for g, phase in enumerate(phases) for t in phase
        ]
        self.asked: list[str] = []
        self.told: dict[str, float | None] = {}  # None: failed

    @property
    def planned(self) -> int:
        return len(self.trials)

    @property
    def n_asked(self) -> int:
        return len(self.asked)

    @property
    def pending(self) -> list[Trial]:
        return [t for t in self.trials if t.id in self.asked and t.id not in self.told]

    @property
    def stop_reason(self) -> str | None:
        return f"all {self.planned} planned trials were run" if self.done() else None

    def ask(self, n: int = 1) -> list[Trial]:
        unasked = [t for t in self.trials if t.id not in self.asked]
        if not unasked:
            return []
        phase = unasked[0].generation
        if any(t.generation < phase and t.id not in self.told for t in self.trials):
            return []  # the previous phase is still running
        given = [t for t in unasked if t.generation == phase][:n]
        self.asked.extend(t.id for t in given)
        return given

    def tell(self, trial_id: str, result: Any, *, cost: float | None = None) -> None:
        """A trial's result (a plan has no cost budget: ``cost`` is not kept)."""
        if trial_id not in self.asked or trial_id in self.told:
            raise ValueError(f"trial {trial_id!r} must be asked and not yet told")
        self.told[trial_id] = None if isinstance(result, Failure) else float(result)

    def retry(self, ids: list[str]) -> None:
        """Ask these failed trials again (``nestor resume --retry``): they are neither
        asked nor told any more; trials that did not fail are left as they are."""
        for trial_id in ids:
            if trial_id in self.told and self.told[trial_id] is None:
                del self.told[trial_id]
                self.asked.remove(trial_id)

    def done(self) -> bool:
        return len(self.told) == len(self.trials)

    def best(self) -> Outcome | None:
        done = [(t, value) for t in self.trials
                if (value := self.told.get(t.id)) is not None]
        if not done:
            return None
        trial, value = min(done, key=lambda tv: self.objective.sign * tv[1])
        return Outcome(trial, value)

    def state(self) -> dict[str, Any]:
        return {"algorithm": self.algorithm, "trials": [t.id for t in self.trials],
                "asked": list(self.asked), "told": dict(self.told)}

    def restore(self, state: dict[str, Any]) -> None:
        if state.get("trials") != [t.id for t in self.trials]:
            raise ValueError(
                f"the saved plan has trials {state.get('trials')}, this stage plans"
                f" {[t.id for t in self.trials]}: was the spec changed?"
            )
        self.asked = list(state["asked"])
        self.told = dict(state["told"])
