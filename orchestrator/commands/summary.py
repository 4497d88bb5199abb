"""One-screen views of a workflow plan and of the trainer catalog."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from nestor.orchestrator.journal.events import SearchSized
from nestor.orchestrator.spec import Workflow, concurrent_trials, default_slots
from nestor.orchestrator.spec.width import SearchWidth, search_width


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
    widths = {name: search_width(workflow, name, total, origin) for name in workflow.order()}
    for number, name in enumerate(workflow.order(), start=1):
        stage = workflow.stage(name)
        width = widths[name]
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
            stage.search_label(None if width is None else width.trials),
            _trials(workflow, name),
            f"{parallel.ranks} ({parallel.data}x{parallel.model})"
            + ("" if workflow.backend_of(name) == "horovod" or parallel.ranks == 1
               else f" {workflow.backend_of(name)}"),
            str(at_once) if at_once else Text("0: too few slots", style="red"),
        )
    console.print(table)
    for name in workflow.order():
        if workflow.declared_parallel(name).is_auto or workflow.batch_of(name) is not None:
            from nestor.orchestrator.planning import plan_stage

            plan = plan_stage(workflow, name, total)
            console.print(f"  plan for {name}: {plan.why()}", soft_wrap=True)
        width = widths[name]
        choice = workflow.stage(name).auto_choice(None if width is None else width.trials)
        if choice is None or width is None:
            continue
        console.print(f"  {auto_line(name, choice)}", soft_wrap=True)
        console.print(f"    planned for {width.describe()}", soft_wrap=True)


def render_catalog(console: Console) -> None:
    from nestor.trainers.catalog import DATASETS, TRAINERS

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


def sized_lines(event: SearchSized) -> list[str]:
    """What a run says as a stage's auto search is built (a ``SearchSized`` event): what
    it picked, for how many trials at once and where that number came from; resumed,
    that it keeps the width it was built for, whatever the slots now."""
    width = SearchWidth(event.width, event.source).describe()
    if event.resumed_at is None:
        return [f"stage {event.stage}: auto picked {event.pick}: {event.why}",
                f"  planned for {width}"]
    return [f"stage {event.stage}: resumed, auto keeps {event.pick}, the search built for"
            f" {width}; these slots run {event.resumed_at} at once"]


def _trials(workflow: Any, name: str) -> str:
    """The trials a stage plans, and its wall-clock limit where it has one: "until 2h"
    where the wall clock alone ends its search."""
    from nestor.orchestrator.spec.budget import describe_wall

    search = getattr(workflow.stage(name), "search", None)
    wall = getattr(search, "wall_s", None)
    if wall is None:
        return str(workflow.planned_trials(name))
    if search.budget is None:
        return f"until {describe_wall(wall)}"
    return f"{workflow.planned_trials(name)}, <= {describe_wall(wall)}"
