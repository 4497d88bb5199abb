"""Choose trials at once x dp x mp for a stage, and re-plan without wasting warm gangs.

The expected time to a stage's goal is the runs it needs, in waves of as
many trials as fit at once, times the time of one run::

    time = waves(runs, at_once) * epochs * epoch_time(dp, mp)
    at_once = min(slots // (dp * mp), runs)

subject to: the global batch (per-rank batch x dp) within the cap, each
rank's memory within the slot's limit, dp x mp within the slots, and mp no
wider than the narrowest split layer. With a generational search the waves
are counted per generation (a barrier between generations). With many runs
left the narrow shapes win (more trials at once, a smaller global batch);
in the tail, with fewer runs than slots, each run gets wider.

Ties (within a millionth) go to fewer slots, then fewer ranks, then less
model parallelism: the smallest global batch that is as fast. Nothing else
is random, so a given profile always gives the same plan.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from ._cost import CostModel

GIB = 2**30
# Re-plan hysteresis: switch shapes only for a predicted gain of at least this
# share of the remaining time, after paying the new gangs' start-up.
HYSTERESIS = 0.10
# Starting and stopping a 2-rank RayExecutor measured here: ~1.8 s (DESIGN.md).
GANG_START_S = 2.0


@dataclass(frozen=True, order=True)
class Shape:
    dp: int
    mp: int

    @property
    def ranks(self) -> int:
        return self.dp * self.mp

    def __str__(self) -> str:
        return f"{self.dp}x{self.mp}"


@dataclass(frozen=True)
class Limits:
    """What a plan must respect. ``data``/``model`` fix that factor (None: auto)."""

    slots: int
    per_rank_batch: int
    global_batch_max: int | None = None
    memory_per_slot: int | None = None  # bytes
    data: int | None = None
    model: int | None = None

    def __post_init__(self) -> None:
        for name in ("slots", "per_rank_batch"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an integer of at least 1, but got {value!r}")


@dataclass(frozen=True)
class Goal:
    """The work left: ``runs`` trials of ``epochs`` epochs; ``generation``: a barrier
    every that many runs (generational genetic search), None for asynchronous."""

    runs: int
    epochs: int
    generation: int | None = None

    def __post_init__(self) -> None:
        if self.runs < 0 or self.epochs < 1:
            raise ValueError(f"runs must be at least 0 and epochs at least 1, but got"
                             f" runs {self.runs}, epochs {self.epochs}")

    def waves(self, at_once: int) -> int:
        if self.runs == 0:
            return 0
        if self.generation:
            per_generation = math.ceil(min(self.generation, self.runs) / at_once)
            return per_generation * math.ceil(self.runs / self.generation)
        return math.ceil(self.runs / at_once)


@dataclass(frozen=True)
class Candidate:
    shape: Shape
    at_once: int
    global_batch: int
    run_s: float  # one run: epochs x epoch time
    total_s: float  # waves x run_s
    memory_bytes: int

    @property
    def slots_used(self) -> int:
        return self.at_once * self.shape.ranks

    def key(self) -> tuple[float, int, int, int, int]:
        return (float(f"{self.total_s:.6g}"), self.slots_used, self.shape.ranks,
                self.shape.mp, self.shape.dp)

    def describe(self) -> str:
        return (f"dp {self.shape.dp} x mp {self.shape.mp}, {self.at_once} at once,"
                f" global batch {self.global_batch}: {self.total_s:.1f} s")


@dataclass(frozen=True)
class Plan:
    """The chosen candidate, every feasible one (best first) and every rejection."""

    chosen: Candidate
    feasible: tuple[Candidate, ...]
    rejected: tuple[tuple[Shape, str], ...]
    goal: Goal
    measured: bool

    @property
    def shape(self) -> Shape:
        return self.chosen.shape

    def why(self) -> str:
        """One paragraph a person can check: the winner, the runner-up, the rejections."""
        c = self.chosen
        basis = "measured profile" if self.measured else "unmeasured prior (no profile yet)"
        text = (f"{c.describe()} for {self.goal.runs} runs of {self.goal.epochs} epoch(s)"
                f" ({self.goal.waves(c.at_once)} waves of {c.run_s:.2f} s), from the {basis}")
        others = [o for o in self.feasible if o is not c]
        if others:
            gap = others[0].total_s / c.total_s - 1 if c.total_s else 0.0
            text += f"; next best {others[0].describe()} ({gap:+.0%})"
        if self.rejected:
            shown = "; ".join(f"{s}: {why}" for s, why in self.rejected[:3])
            more = f" (+{len(self.rejected) - 3} more)" if len(self.rejected) > 3 else ""
            text += f"; ruled out {shown}{more}"
        return text

    def to_record(self) -> dict[str, Any]:
        """Plain data for the journal: a resumed driver reads the same plan back."""
        return {"dp": self.shape.dp, "mp": self.shape.mp, "at_once": self.chosen.at_once,
                "global_batch": self.chosen.global_batch, "predicted_s": self.chosen.total_s,
                "run_s": self.chosen.run_s, "goal": asdict(self.goal),
                "measured": self.measured, "why": self.why()}


class NoFeasibleShape(ValueError):
    """No shape meets the limits; the message says what would fit."""


def _fmt_bytes(n: float) -> str:
    return f"{n / GIB:.2f} GiB" if n >= GIB / 10 else f"{n / 2**20:.1f} MiB"


def evaluate(model: CostModel, limits: Limits, goal: Goal
             ) -> tuple[list[Candidate], list[tuple[Shape, str]]]:
    """Every shape within the slots: the feasible ones (best first) and why the others are not."""
    feasible: list[Candidate] = []
    rejected: list[tuple[Shape, str]] = []
    widest = model.size.max_model_parallel()
    b = limits.per_rank_batch
    for shape in _shapes(limits):
        global_batch = b * shape.dp
        memory = model.memory(shape.mp, b)
        if limits.global_batch_max is not None and global_batch > limits.global_batch_max:
            rejected.append((shape, f"global batch {global_batch} ({b} x {shape.dp})"
                                    f" above the cap {limits.global_batch_max}"))
            continue
        if shape.mp > widest:
            rejected.append((shape, f"mp {shape.mp} wider than the narrowest split layer"
                                    f" ({widest} units)"))
            continue
        if limits.memory_per_slot is not None and memory > limits.memory_per_slot:
            rejected.append((shape, f"{_fmt_bytes(memory)} per rank above the"
                                    f" {_fmt_bytes(limits.memory_per_slot)} per slot"))
            continue
        if shape.dp > model.train_samples:
            rejected.append((shape, f"dp {shape.dp} above the {model.train_samples}"
                                    " training samples: a rank would get none"))
            continue
        at_once = max(1, min(limits.slots // shape.ranks, max(goal.runs, 1)))
        if goal.generation:
            at_once = min(at_once, goal.generation)
        run_s = goal.epochs * model.epoch(shape.dp, shape.mp, b, at_once * shape.ranks)
        feasible.append(Candidate(shape, at_once, global_batch, run_s,
                                  goal.waves(at_once) * run_s, memory))
    feasible.sort(key=Candidate.key)
    return feasible, rejected


def _shapes(limits: Limits) -> list[Shape]:
    """Every dp x mp within the slots (the fixed factor only, if one is fixed), by
    ranks then mp: enumerated by multiples, not by trying every mp of every rank
    count, so 32,768 slots take some 340,000 steps instead of half a billion."""
    n = limits.slots
    if limits.data is not None or limits.model is not None:
        dps = [limits.data] if limits.data is not None else range(1, n + 1)
        mps = [limits.model] if limits.model is not None else range(1, n + 1)
        shapes = [Shape(dp, mp) for mp in mps for dp in dps if dp * mp <= n]
        return sorted(shapes, key=lambda s: (s.ranks, s.mp))
    by_ranks: list[list[int]] = [[] for _ in range(n + 1)]
    for mp in range(1, n + 1):
        for ranks in range(mp, n + 1, mp):
            by_ranks[ranks].append(mp)
    return [Shape(ranks // mp, mp) for ranks in range(1, n + 1) for mp in by_ranks[ranks]]


def what_fits(model: CostModel, limits: Limits) -> str:
    """The nearest limits that would admit a shape: for the error message."""
    b = limits.per_rank_batch
    hints = []
    if limits.global_batch_max is not None:
        dp = limits.data or 1
        if b * dp > limits.global_batch_max:
            most = limits.global_batch_max // b
            fix = (f"data at most {most}" if most >= 1
                   else f"batch_size at most {limits.global_batch_max}")
            hints.append(f"{fix}, or global_max at least {b * dp}")
    if limits.memory_per_slot is not None:
        fits = [mp for mp in range(1, model.size.max_model_parallel() + 1)
                if model.memory(mp, b) <= limits.memory_per_slot]
        least = model.memory(min(limits.slots, model.size.max_model_parallel()), b)
        if not fits:
            hints.append(f"memory_per_slot at least {_fmt_bytes(least)} or a smaller batch_size")
        elif limits.model is not None and limits.model not in fits:
            hints.append(f"model at least {fits[0]}")
        elif fits[0] * (limits.data or 1) > limits.slots:
            hints.append(f"model {fits[0]} x data {limits.data or 1} needs"
                         f" {fits[0] * (limits.data or 1)} slots")
    if limits.data is not None and limits.model is not None and (
            limits.data * limits.model > limits.slots):
        hints.append(f"data x model at most {limits.slots} slots")
    return "; ".join(hints) if hints else "more slots"


def choose(model: CostModel, limits: Limits, goal: Goal) -> Plan:
    """The plan with the least expected time to ``goal``; NoFeasibleShape if none fits."""
    feasible, rejected = evaluate(model, limits, goal)
    if not feasible:
        shown = "; ".join(f"{s}: {why}" for s, why in rejected[:2]) or "none within the slots"
        more = f" (and {len(rejected) - 2} more shapes)" if len(rejected) > 2 else ""
        raise NoFeasibleShape(
            f"no trial shape fits {limits.slots} slot(s): {shown}{more}; would fit:"
            f" {what_fits(model, limits)}")
    return Plan(feasible[0], tuple(feasible), tuple(rejected), goal, model.measured)


@dataclass(frozen=True)
class Replan:
    """A re-plan's decision. Running trials are never stopped: ``keep_running`` of
    them go on at their shape, and only ``start_now`` new gangs fit beside them."""

    plan: Plan
    previous: Shape
    switched: bool
    keep_running: int
    start_now: int
    stay_s: float | None  # predicted time at the best warm shape
    reason: str
    notes: list[str] = field(default_factory=list)

    @property
    def shape(self) -> Shape:
        return self.plan.shape


def replan(model: CostModel, limits: Limits, goal: Goal, *, current: Shape, running: int = 0,
           warm: Sequence[Shape] = (), hysteresis: float = HYSTERESIS,
           gang_start_s: float = GANG_START_S) -> Replan:
    """Re-plan the ``goal.runs`` trials not yet started, given ``running`` trials at
    ``current`` and idle warm gangs of the ``warm`` shapes.

    A shape with a warm gang (``current`` counts: its running gangs become
    free) costs nothing to reuse; any other must start gangs, ``gang_start_s``
    before its first trial. The best new shape replaces the best warm one only
    if it is predicted faster by more than ``hysteresis`` of the warm one's
    time after paying that start-up: small gains never throw warm gangs away.
    """
    if not 0 <= hysteresis < 1:
        raise ValueError(f"hysteresis must be in [0, 1), but got {hysteresis!r}")
    if running < 0 or running * current.ranks > limits.slots:
        raise ValueError(f"running trials must hold at most {limits.slots} slots, but"
                         f" {running} x {current} hold {running * current.ranks}")
    best = choose(model, limits, goal)
    warm_shapes = {current, *warm}
    staying = [c for c in best.feasible if c.shape in warm_shapes]
    stay = staying[0] if staying else None
    chosen = best.chosen
    if best.chosen.shape in warm_shapes:
        switched = best.chosen.shape != current
        reason = f"{best.chosen.shape} is the best shape and already warm"
    elif stay is None:
        switched = True
        reason = f"no warm shape is feasible now; starting {best.chosen.shape}"
    else:
        cost = best.chosen.total_s + gang_start_s
        if cost < (1 - hysteresis) * stay.total_s:
            switched = True
            reason = (f"{best.chosen.shape} is predicted {cost:.1f} s with start-up against"
                      f" {stay.total_s:.1f} s at warm {stay.shape}: a gain above"
                      f" {hysteresis:.0%}")
        else:
            switched = stay.shape != current
            chosen = stay
            reason = (f"kept warm {stay.shape} ({stay.total_s:.1f} s): {best.chosen.shape}"
                      f" would take {cost:.1f} s with start-up, not {hysteresis:.0%} better")
    plan = Plan(chosen, best.feasible, best.rejected, goal, best.measured)
    free = limits.slots - running * current.ranks
    start_now = min(free // chosen.shape.ranks, chosen.at_once, goal.runs)
    return Replan(plan, current, switched, running, max(0, start_now),
                  stay.total_s if stay else None, reason)
