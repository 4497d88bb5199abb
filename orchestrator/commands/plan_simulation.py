"""`nestor plan --simulate`: each row of the combined table run on the simulated cluster.

The table's predicted times are the cost model's closed form: waves x one
run. A simulation adds what the closed form leaves out: gang start-up,
generation barriers, packing whole model-parallel groups onto nodes, the
tail of a wave that does not divide evenly. Each row becomes a one-stage
workflow of the stage's runs at the row's shape, run by nestor's real
scheduler (``orchestrator.simulate``) on a
:class:`~orchestrator.backends.SimulatedBackend` of the allocation's slots
(``slots_per_node`` each), every attempt lasting the cost model's
prediction for its shape with its neighbours on the node (the same
``busy`` the planner priced). Nothing trains: it takes seconds at 32,768 slots.

This lives with the commands, not in ``planning``: the planner sits below
the engine it would have to drive.
"""

from __future__ import annotations

import logging
import math
import tempfile
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SLOTS_PER_NODE = 8  # a GPU node's worth: a model-parallel group never spans two


@dataclass(frozen=True)
class SimulatedRow:
    """What one row's workflow did on the simulated cluster."""

    seconds: float | None  # virtual time to the last run's end (None: not placeable)
    nodes: int
    slots_per_node: int
    gangs_started: int = 0
    why_not: str | None = None


def cluster_for(slots: int, slots_per_node: int, shape: Any = None) -> tuple[int, int]:
    """Nodes x slots per node for an allocation of ``slots`` (a small one is one node);
    with ``shape``, just the nodes one trial of it takes, its groups whole on each."""
    if shape is not None:
        per_node = min(slots_per_node, shape.ranks)
        groups = per_node // shape.mp
        if groups:
            return math.ceil(shape.dp / groups), per_node
        return 1, per_node
    if slots <= slots_per_node:
        return 1, slots
    return math.ceil(slots / slots_per_node), slots_per_node


def row_spec(shape: Any, runs: int, generation: int | None) -> str:
    """One row as a workflow: generations of a genetic search where the stage has a
    barrier per generation, else a random search of ``runs`` (asked as slots free)."""
    if generation:
        generations = math.ceil(runs / generation)
        search = (f"{{algorithm: genetic, population: {generation}, generations:"
                  f" {generations}, schedule: generational, seed: 1}}")
    else:
        search = f"{{algorithm: random, budget: {runs}, seed: 1}}"
    return textwrap.dedent(f"""\
        name: plan-row
        stages:
          - name: row
            kind: hpo
            trainer: {{function: "nestor.orchestrator.simulate:simulated_trial"}}
            parallel: {{data: {shape.dp}, model: {shape.mp}}}
            search: {search}
            space: {{lr: {{type: float, low: 1.0e-3, high: 0.5, log: true}}}}
            objective: {{metric: val_accuracy, mode: max}}
        """)


def simulate_row(model: Any, candidate: Any, *, runs: int, generation: int | None,
                 per_rank_batch: int, epochs: int, slots: int | None,
                 slots_per_node: int = SLOTS_PER_NODE, workdir: Path) -> SimulatedRow:
    """Run ``runs`` trials at ``candidate``'s shape on ``slots`` simulated slots, or
    (``slots`` None: runs one after another) on just the nodes its one trial takes."""
    from nestor.orchestrator.backends import SimulatedBackend
    from nestor.orchestrator.engine.workflow import run_workflow
    from nestor.orchestrator.planning import GANG_START_S, cost_model_trials
    from nestor.orchestrator.spec import load_spec_text

    shape = candidate.shape
    if slots is None:
        nodes, per_node = cluster_for(shape.ranks, slots_per_node, shape)
    else:
        nodes, per_node = cluster_for(slots, slots_per_node)
    if shape.mp > per_node:
        return SimulatedRow(None, nodes, per_node, why_not=(
            f"its mp {shape.mp} groups do not fit a node of {per_node} slots"))
    trials = cost_model_trials(model, shape, per_rank_batch, epochs,
                               busy=candidate.at_once * shape.ranks)
    backend = SimulatedBackend(nodes, per_node, trials, seed=1, startup_s=GANG_START_S)
    workflow = load_spec_text(row_spec(shape, runs, generation))
    quiet = logging.getLogger("nestor.orchestrator")
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    try:
        run_workflow(workflow, backend, workdir)
    finally:
        quiet.setLevel(level)
    return SimulatedRow(backend.now(), nodes, per_node, backend.gangs_started)


def row_simulator(model: Any, *, per_rank_batch: int, epochs: int, slots: int,
                  slots_per_node: int = SLOTS_PER_NODE
                  ) -> Callable[[Any, int, int | None, bool], tuple[float | None, str | None]]:
    """``simulate(candidate, runs, generation, concurrent)`` for ``planning.report.render``:
    a row's virtual seconds on ``slots`` simulated slots, or None and why not."""
    made = 0

    def simulate(candidate: Any, runs: int, generation: int | None,
                 concurrent: bool) -> tuple[float | None, str | None]:
        nonlocal made
        made += 1
        with tempfile.TemporaryDirectory(prefix="nestor-plan-sim-") as tmp:
            row = simulate_row(model, candidate, runs=runs, generation=generation,
                               per_rank_batch=per_rank_batch, epochs=epochs,
                               slots=slots if concurrent else None,
                               slots_per_node=slots_per_node, workdir=Path(tmp) / f"row{made}")
        return row.seconds, row.why_not

    return simulate
