"""What a command waits for after its results: MLflow catching up, shown, never silent."""

from __future__ import annotations

import io
import textwrap
import time
from pathlib import Path

from rich.console import Console

from nestor.orchestrator.commands.progress import wait_for_mlflow
from nestor.orchestrator.journal.events import (
    StageStarted,
    TrialFinished,
    TrialStarted,
    WorkflowStarted,
)
from nestor.orchestrator.journal.journal import Journal
from nestor.orchestrator.projections.projector import Projector
from nestor.orchestrator.spec import load_spec_text

SPEC = """
name: waited
resources: {slots: 2}
stages:
  - name: tune
    kind: hpo
    trainer: {command: ["true"]}
    search: {algorithm: random, budget: 3, seed: 1}
    space: {x: {type: float, low: 0, high: 1}}
    objective: {metric: result, mode: min}
"""


class _Slow:
    """A tracker that takes each run's writes in 20 ms: a store that is behind."""

    uri = "slow:"

    def __init__(self) -> None:
        self.applied: list[str] = []

    def start_run(self, name: str, **_: object) -> str:
        return name

    def apply(self, writes) -> str:
        time.sleep(0.02)
        self.applied.append(writes.name)
        return writes.name

    def __getattr__(self, _name: str):
        return lambda *args, **kwargs: None


def test_the_wait_for_mlflow_is_shown_with_counts_and_an_estimate(tmp_path: Path) -> None:
    with Journal(tmp_path / "journal.jsonl") as journal:
        journal.record(WorkflowStarted(workflow="waited", slots=2, pid=1, run_key="k"))
        journal.record(StageStarted(stage="tune", stage_kind="hpo", sources=[]))
        for number in range(150):
            trial = {"id": str(number), "config": {"x": 0.5}, "generation": 0, "deme": 0,
                     "parents": [], "origin": "random"}
            journal.record(TrialStarted(stage="tune", trial=trial, attempt=1, gang=1,
                                        shape="1x1"))
            journal.record(TrialFinished(stage="tune", trial=trial, attempt=1,
                                         status="completed", value=0.5,
                                         metrics={"result": 0.5}, reason=None,
                                         slot_seconds=1.0))
    tracker = _Slow()
    projector = Projector(tmp_path, load_spec_text(textwrap.dedent(SPEC), "<test>"),
                          tracker=tracker)  # type: ignore[arg-type]
    out = io.StringIO()
    left = wait_for_mlflow(projector, Console(file=out, width=200))
    said = out.getvalue()
    assert left == 0 and len(tracker.applied) == 150
    first = said.splitlines()[0]
    assert first.startswith("MLflow: ") and "of 302 events written" in first, said
    assert "Ctrl-C stops waiting" in first
    assert said.splitlines()[-1] == "MLflow: all 302 events written", said
