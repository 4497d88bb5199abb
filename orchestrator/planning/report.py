"""`nestor plan`: a stage's cost model, its errors, and the combined table, on a console."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ._cost import checks
from ._planner import Shape, choose
from ._profiler import default_shapes, profile
from ._stage import Workflow, stage_inputs, stage_model, stage_profile
from ._table import auto_row, combined_table, with_measured, with_simulated

if TYPE_CHECKING:
    from rich.console import Console


def pick_stage(workflow: Workflow, name: str | None) -> str:
    """``name``, else the first planned stage, else the first search stage, else the first."""
    names = workflow.order()
    if name is not None:
        if name not in names:
            raise ValueError(f"--stage must name a stage ({', '.join(names)}), but got {name!r}")
        return name
    for candidate in names:
        if workflow.declared_parallel(candidate).is_auto or workflow.batch_of(candidate):
            return candidate
    return next((n for n in names if workflow.stage(n).searches), names[0])


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def render(console: Console, workflow: Workflow, *, stage: str | None, slots: int,
           measure: bool, do_profile: bool, random_runs: int | None,
           places: tuple[Path, ...] = (),
           simulator: Callable[..., Callable[..., tuple[float | None, str | None]]] | None = None,
           ) -> dict[str, Any]:
    """Print the plan of one stage and its combined table; return the same as data.

    ``simulator(model, per_rank_batch=, epochs=, slots=)`` (``nestor plan --simulate``)
    makes the function that runs each row on a simulated cluster: its times are
    printed beside the predicted ones, with how much faster auto's pick is than each."""
    from rich.table import Table
    from rich.text import Text

    name = pick_stage(workflow, stage)
    inputs = stage_inputs(workflow, name, slots)
    found = stage_profile(inputs, places)
    cores = _cores()
    if found is None and (measure or do_profile):
        shapes = default_shapes(min(slots, cores), inputs.size.max_model_parallel())
        found = profile(inputs.trainer, inputs.options, shapes=shapes, places=places,
                        echo=lambda line: console.print(Text(line, style="dim")),
                        backend=inputs.backend)
    model = stage_model(inputs, found)
    limits, goal = inputs.limits, inputs.goal
    cap = limits.global_batch_max or "none"
    console.print(Text.assemble(
        "stage ", (name, "bold"), f": {inputs.trainer}, {goal.runs} runs of {goal.epochs}"
        f" epoch(s), per-rank batch {limits.per_rank_batch}, global batch cap {cap},"
        f" {slots} slots"), soft_wrap=True)
    comm, compute = model.comm, model.compute
    if found is None:
        console.print("cost model: the unmeasured prior (no profile of this trainer and"
                      " machine yet; --measure or --profile measures one)", soft_wrap=True)
    else:
        shapes = ", ".join(f"{d}x{m}" for d, m in found.shapes)
        console.print(f"profile {found.key}: shapes {shapes} measured in"
                      f" {found.seconds_spent:.0f} s", soft_wrap=True)
    console.print(
        f"cost model ({comm.algorithm} allreduce): alpha {comm.alpha * 1e6:.0f} us,"
        f" beta {comm.beta * 1e9:.3f} ns/B, gamma {comm.gamma * 1e9:.3f} ns/B,"
        f" skew {comm.skew * 1e3:.2f} ms per collective in a step; compute"
        f" {compute.c0 * 1e3:.2f} + {compute.c0_split * 1e3:.2f}/mp ms per step +"
        f" ({compute.c_rep * 1e3:.3f} + {compute.c_split * 1e3:.3f}/mp) ms per sample",
        soft_wrap=True)
    data: dict[str, Any] = {"stage": name, "slots": slots, "model": model.parameters(),
                            "profile": found.key if found else None}
    if found is not None:
        table = Table(title="step time: measured against the model", box=None,
                      header_style="bold", title_justify="left")
        for column in ("shape", "batch/rank", "measured ms", "predicted ms", "error", "fit"):
            table.add_column(column, justify="left" if column in ("shape", "fit") else "right")
        rows = checks(found, inputs.size)
        for c in rows:
            table.add_row(f"{c.dp}x{c.mp}", str(c.batch), f"{c.measured_s * 1e3:.1f}",
                          f"{c.predicted_s * 1e3:.1f}", f"{c.error:+.0%}",
                          "held out" if c.held_out else "in sample")
        console.print(table)
        data["checks"] = [{"dp": c.dp, "mp": c.mp, "batch": c.batch, "measured_s": c.measured_s,
                           "predicted_s": c.predicted_s, "error": c.error,
                           "held_out": c.held_out} for c in rows]
    plan = choose(model, limits, goal)
    console.print(f"plan: {plan.why()}", soft_wrap=True)
    data["plan"] = plan.to_record()

    rows_out = combined_table(model, limits, goal, random_runs)
    if measure:
        measured: dict[tuple[Shape, int], float | None] = {}

        def wave(shape: Shape, at_once: int) -> float | None:
            if shape.ranks * at_once > cores:
                return None
            if (shape, at_once) not in measured:
                from ._measure import measure_wave

                console.print(Text(f"measuring {at_once} x {shape} for {goal.epochs}"
                                   " epoch(s)", style="dim"))
                measured[(shape, at_once)] = measure_wave(
                    inputs.trainer, inputs.options, shape.dp, shape.mp, at_once,
                    backend=inputs.backend).run_s
            return measured[(shape, at_once)]

        rows_out = with_measured(rows_out, wave, goal)
    if simulator is not None:
        simulate = simulator(model, per_rank_batch=limits.per_rank_batch, epochs=goal.epochs,
                             slots=slots)
        rows_out = with_simulated(rows_out, simulate, goal)
    title = f"combined table on {slots} slots (predicted"
    if simulator is not None:
        title += ", and simulated: nestor's scheduler on a simulated cluster of these slots"
    if measure:
        title += f", and measured where it fits this machine's {cores} cores"
    table = Table(title=title + ")", box=None, header_style="bold", title_justify="left")
    columns = ["configuration", "runs", "shape", "at once", "slots", "global batch",
               "predicted s", "speed-up"]
    if simulator is not None:
        columns += ["simulated s", "sim. x", "auto x"]
        auto = auto_row(rows_out)
    if measure:
        columns += ["measured s", "measured speed-up"]
    for column in columns:
        table.add_column(column, justify="left" if column in ("configuration", "shape")
                         else "right")
    data["table"] = []
    notes: list[str] = []
    for row in rows_out:
        c = row.candidate
        cells = [row.label, str(row.runs)]
        if c is None:
            cells += ["-", "-", "-", "-", "no shape fits", "-"]
        else:
            cells += [str(c.shape), str(c.at_once), str(c.slots_used), str(c.global_batch),
                      f"{c.total_s:.1f}", f"{row.speedup:.2f}x" if row.speedup else "-"]
        gain = None
        if simulator is not None:
            seconds = row.simulated_s
            if seconds and auto.simulated_s:
                gain = seconds / auto.simulated_s
            if row.simulated_note:
                notes.append(f"{row.label}: not simulated, {row.simulated_note}")
            cells += [f"{seconds:.1f}" if seconds else "-",
                      f"{row.simulated_speedup:.2f}x" if row.simulated_speedup else "-",
                      f"{gain:.2f}x" if gain else "-"]
        if measure:
            cells += [f"{row.measured_s:.1f}" if row.measured_s else "-",
                      f"{row.measured_speedup:.2f}x" if row.measured_speedup else "-"]
        table.add_row(*cells)
        data["table"].append({
            "label": row.label, "runs": row.runs,
            "shape": str(c.shape) if c else None, "at_once": c.at_once if c else None,
            "slots": c.slots_used if c else None, "global_batch": c.global_batch if c else None,
            "predicted_s": c.total_s if c else None, "speedup": row.speedup,
            "measured_s": row.measured_s, "measured_speedup": row.measured_speedup,
            "simulated_s": row.simulated_s, "simulated_speedup": row.simulated_speedup,
            "auto_faster": gain, "spec": row.spec})
    console.print(table)
    if simulator is not None:
        console.print("simulated: each row's runs on a simulated cluster of these slots, 8 to"
                      " a node (gang start-up, barriers and packing included); sim. x: speed-up"
                      " over the simulated random search; auto x: how many times faster auto's"
                      " pick (HPO+DP+MP) ran than the row", soft_wrap=True)
        for note in notes:
            console.print(note, soft_wrap=True)
    return data
