"""A live progress line per stage: trials done of planned, running, failed, best."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn


class StageProgress:
    def __init__(self, console: Console) -> None:
        self.progress = Progress(
            TextColumn("[bold]{task.fields[stage]}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[detail]}"),
            TimeElapsedColumn(),
            console=console,
        )
        self.tasks: dict[str, Any] = {}

    def __enter__(self) -> StageProgress:
        self.progress.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.__exit__(*exc)

    def update(self, runner: Any) -> None:
        name = runner.stage.name
        if name not in self.tasks:
            # Under a cost budget the trial count is open: the cost ends the search.
            cost = getattr(runner.searcher, "cost_budget", None)
            total = None if cost is not None else runner.searcher.planned
            self.tasks[name] = self.progress.add_task("", total=total, stage=name, detail="")
        records = runner.records.values()
        done = sum(1 for r in records if r.status != "running")
        failed = sum(1 for r in records if r.status == "failed")
        best = runner.searcher.best()
        best_text = "-" if best is None else f"{best.value:.4g}"
        busy = runner.backend.busy_slots
        generation = max((r.generation for r in records), default=0)
        cost = getattr(runner.searcher, "cost_budget", None)
        spent = "" if cost is None else (
            f"  spent {runner.searcher.cost_spent:.4g}/{cost.describe()}")
        self.progress.update(
            self.tasks[name],
            completed=done,
            detail=f"gen {generation}  best {best_text}  running {len(runner.running)}"
            f"  failed {failed}  slots {busy}/{runner.backend.slots}{spent}",
        )
