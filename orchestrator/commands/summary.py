"""One-screen views of a workflow plan and of the trainer catalog."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from orchestrator.spec import Workflow, concurrent_trials, default_slots


def render_plan(console: Console, file: str, workflow: Workflow, slots: int | None) -> None:
    if workflow.resources.slots is not None:
        total, origin = workflow.resources.slots, "resources.slots"
    elif slots is not None:
        total, origin = slots, "--slots"
    else:
        total, origin = default_slots(), "this machine's CPUs; a Ray cluster may have more"
    tracking = workflow.tracking
    store = tracking.uri or "MLflow store inside the run directory"
    console.print(Text.assemble(("ok", "green"), f" {file}: workflow ", (workflow.name, "bold"),
                                f", {len(workflow.stages)} stage(s)"))
    console.print(f"  slots: {total} ({origin})")
    console.print(f"  tracking: {store}, experiment {tracking.experiment or workflow.name!r}")
    table = Table(box=None, pad_edge=False, header_style="bold")
    for column in ("#", "stage", "kind", "from", "trainer", "search", "trials",
                   "ranks/trial", "at once"):
        justify = "right" if column in ("#", "trials", "at once") else "left"
        table.add_column(column, justify=justify, no_wrap=True)
    for number, name in enumerate(workflow.order(), start=1):
        stage = workflow.stage(name)
        parallel = workflow.parallel_of(name, total)
        at_once = concurrent_trials(total, parallel.ranks)
        if at_once == 0 and workflow.resources.oversubscribe:
            at_once = 1
        table.add_row(
            str(number),
            name,
            stage.kind,
            ", ".join(stage.from_) or "-",
            workflow.trainer_of(name).describe(),
            stage.search_label(),
            str(workflow.planned_trials(name)),
            f"{parallel.ranks} ({parallel.data}x{parallel.model})"
            + ("" if workflow.backend_of(name) == "horovod" or parallel.ranks == 1
               else f" {workflow.backend_of(name)}"),
            str(at_once) if at_once else Text("0: too few slots", style="red"),
        )
    console.print(table)
    for name in workflow.order():
        if workflow.declared_parallel(name).is_auto or workflow.batch_of(name) is not None:
            from orchestrator.planning import plan_stage

            plan = plan_stage(workflow, name, total)
            console.print(f"  plan for {name}: {plan.why()}", soft_wrap=True)
        stage = workflow.stage(name)
        choice = stage.auto_choice()
        if choice is None:
            continue
        console.print(f"  {auto_line(name, choice)}", soft_wrap=True)
        planned_for = stage.search.parallel or 1  # type: ignore[union-attr]
        at_once = concurrent_trials(total, workflow.parallel_of(name).ranks)
        if stage.search.parallel is None and at_once > planned_for:  # type: ignore[union-attr]
            console.print(
                f"    (planned for {planned_for} trial at once; this plan runs {at_once}:"
                f" set search.parallel: {at_once} to plan for them)",
                soft_wrap=True,
            )


def render_catalog(console: Console) -> None:
    from trainers.catalog import DATASETS, TRAINERS

    datasets = Table(title="datasets", box=None, header_style="bold", title_justify="left")
    datasets.add_column("name")
    datasets.add_column("what")
    for name, what in DATASETS.items():
        datasets.add_row(name, what)
    console.print(datasets)
    for info in TRAINERS.values():
        console.print()
        table = Table(
            title=f"trainer {info.name}: {info.description}",
            box=None, header_style="bold", title_justify="left",
        )
        for column in ("", "name", "type", "default", "choices / meaning"):
            table.add_column(column)
        groups = (("setting", info.settings), ("hyperparameter", info.hyperparameters))
        for group, options in groups:
            for name, option in options.items():
                choices = ", ".join(map(str, option.choices)) if option.choices else ""
                meaning = f"{option.help} ({choices})" if choices else option.help
                table.add_row(group, name, option.type.__name__, repr(option.default), meaning)
        console.print(table)


def auto_line(name: str, choice: Any) -> str:
    return f"{name}: auto picked {choice.describe()}"


def auto_lines(workflow: Any) -> list[str]:
    """What each ``algorithm: auto`` stage of ``workflow`` picks, and why."""
    lines = []
    for name in workflow.order():
        choice = workflow.stage(name).auto_choice()
        if choice is not None:
            lines.append(f"stage {auto_line(name, choice)}")
    return lines
