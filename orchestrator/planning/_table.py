"""The seed's combined table for one stage and allocation (`nestor plan`).

Cray's CUG 2018 talk multiplied individual speed-ups: random search on one
node (1x), HPO, HPO with data parallelism, HPO with data and model
parallelism. Here each row is the planner's best shape under that row's
restriction, priced by the same cost model, so the rows can be compared:

- random search: ``random_runs`` runs one after another on one slot;
- DP+MP: the same runs one after another, each on its best wider shape;
- HPO: the stage's runs, as many 1-slot trials at once as fit;
- HPO+MP, HPO+DP: trials widened by model (mp > 1) or data (dp > 1)
  parallelism only;
- HPO+DP+MP: any shape: what ``parallel: auto`` chooses.

A spec that fixes its shape gets every row too, its own marked.

Runs of a random search to reach the same goal are not known in advance:
``random_runs`` defaults to the stage's own planned runs (then HPO's gain is
concurrency alone); give the ratio you measured (bench/REPORT.md's HPO
table) to price the search's own gain too.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from ._cost import CostModel
from ._planner import Candidate, Goal, Limits, Shape, evaluate

ROWS: tuple[tuple[str, bool, Callable[[Shape], bool]], ...] = (
    ("random search", False, lambda s: s == Shape(1, 1)),
    ("DP+MP", False, lambda s: s.ranks > 1),
    ("HPO", True, lambda s: s == Shape(1, 1)),
    ("HPO+MP", True, lambda s: s.dp == 1 and s.mp > 1),
    ("HPO+DP", True, lambda s: s.mp == 1 and s.dp > 1),
    ("HPO+DP+MP", True, lambda s: True),
)


@dataclass(frozen=True)
class Row:
    label: str
    runs: int
    candidate: Candidate | None  # None: no shape meets this row's restriction
    speedup: float | None = None
    measured_s: float | None = None
    measured_speedup: float | None = None
    spec: bool = False  # the shape the spec fixes (``parallel: {data: 2, model: 1}``)
    concurrent: bool = True  # trials at once (the HPO rows), or one run after another
    simulated_s: float | None = None  # on the simulated cluster (``nestor plan --simulate``)
    simulated_speedup: float | None = None
    simulated_note: str | None = None  # why a row was not simulated


def combined_table(model: CostModel, limits: Limits, goal: Goal, random_runs: int | None = None
                   ) -> list[Row]:
    """The six rows, each the best feasible shape under its restriction.

    A spec that fixes the shape still gets every row (the alternatives are the
    point of the table): the rows are priced with both factors free, and the
    spec's own shape is marked, in the row whose restriction it meets, or in a
    row of its own just below that one when it is not that row's best."""
    free = replace(limits, data=None, model=None)
    priced: dict[tuple[Limits, Goal], list[Candidate]] = {}  # the HPO rows share one

    def feasible(row_limits: Limits, row_goal: Goal) -> list[Candidate]:
        if (row_limits, row_goal) not in priced:
            priced[(row_limits, row_goal)] = evaluate(model, row_limits, row_goal)[0]
        return priced[(row_limits, row_goal)]

    rows: list[Row] = []
    for label, concurrent, allowed in ROWS:
        runs = goal.runs if concurrent else (random_runs or goal.runs)
        # One after another: a barrier after every run.
        row_goal = replace(goal, runs=runs, generation=goal.generation if concurrent else 1)
        row_limits = free if label != "random search" else replace(free, slots=1)
        best = next((c for c in feasible(row_limits, row_goal) if allowed(c.shape)), None)
        rows.append(Row(label, runs, best, concurrent=concurrent))
    if free != limits:
        rows = _mark_spec(rows, next(iter(evaluate(model, limits, goal)[0]), None), goal)
    base = rows[0].candidate
    return [replace(r, speedup=(base.total_s / r.candidate.total_s)
                    if base and r.candidate and r.candidate.total_s else None) for r in rows]


def _mark_spec(rows: list[Row], own: Candidate | None, goal: Goal) -> list[Row]:
    """Mark the concurrent row the spec's fixed shape belongs to (HPO+DP for 2x1)."""
    if own is None:
        return [*rows, Row("spec's own shape", goal.runs, None, spec=True)]
    index = next(i for i, (_, concurrent, allowed) in enumerate(ROWS)
                 if concurrent and allowed(own.shape))
    row = rows[index]
    if row.candidate is not None and row.candidate.shape == own.shape:
        rows[index] = replace(row, label=f"{row.label} (spec)", spec=True)
        return rows
    own_row = Row(f"{row.label} at spec's {own.shape}", goal.runs, own, spec=True)
    return [*rows[:index + 1], own_row, *rows[index + 1:]]


def with_simulated(rows: list[Row], simulate: Callable[[Candidate, int, int | None, bool],
                                                       tuple[float | None, str | None]],
                   goal: Goal) -> list[Row]:
    """Fill in simulated times: ``simulate(candidate, runs, generation, concurrent)``
    gives a row's seconds on the simulated cluster (None, and why, where it cannot run
    there); a row's speed-up is over the simulated random-search row."""
    out = []
    for row in rows:
        seconds, note = None, None
        if row.candidate is not None:
            generation = goal.generation if row.concurrent else None
            seconds, note = simulate(row.candidate, row.runs, generation, row.concurrent)
        out.append(replace(row, simulated_s=seconds, simulated_note=note))
    base = out[0].simulated_s
    return [replace(r, simulated_speedup=base / r.simulated_s if base and r.simulated_s
                    else None) for r in out]


def auto_row(rows: list[Row]) -> Row:
    """The row of what ``parallel: auto`` picks: any shape (HPO+DP+MP)."""
    return next(r for r in rows if r.label == ROWS[-1][0])


def with_measured(rows: list[Row], measure: Callable[[Shape, int], float | None],
                  goal: Goal) -> list[Row]:
    """Fill in measured times: ``measure(shape, at_once)`` gives one wave's seconds
    (None where it does not fit this machine); a row's time is its waves x that."""
    out = []
    for row in rows:
        c = row.candidate
        seconds = None
        if c is not None:
            wave = measure(c.shape, c.at_once)
            if wave is not None:
                row_goal = replace(goal, runs=row.runs,
                                   generation=goal.generation if row.label.startswith("HPO")
                                   else 1)
                seconds = row_goal.waves(c.at_once) * wave
        out.append(replace(row, measured_s=seconds))
    base = out[0].measured_s
    return [replace(r, measured_speedup=base / r.measured_s if base and r.measured_s else None)
            for r in out]
