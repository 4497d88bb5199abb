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


def combined_table(model: CostModel, limits: Limits, goal: Goal, random_runs: int | None = None
                   ) -> list[Row]:
    """The six rows, each the best feasible shape under its restriction."""
    rows: list[Row] = []
    for label, concurrent, allowed in ROWS:
        runs = goal.runs if concurrent else (random_runs or goal.runs)
        # One after another: a barrier after every run.
        row_goal = replace(goal, runs=runs, generation=goal.generation if concurrent else 1)
        row_limits = limits if label != "random search" else replace(limits, slots=1)
        feasible, _ = evaluate(model, row_limits, row_goal)
        best = next((c for c in feasible if allowed(c.shape)), None)
        rows.append(Row(label, runs, best))
    base = rows[0].candidate
    return [replace(r, speedup=(base.total_s / r.candidate.total_s)
                    if base and r.candidate and r.candidate.total_s else None) for r in rows]


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
