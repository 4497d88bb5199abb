"""One run path (issue 27, item 2): `nestor run`'s way (a spec file, the backend
factory's Ray backend, the MLflow projector) and a simulation (the factory's
simulated backend) both run through ``orchestrator.engine.workflow.run_workflow``,
and their journals tell the same story of stages and trials."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from nestor.orchestrator.backends import Draw, RayBackend, SimulatedBackend
from nestor.orchestrator.backends.factory import make_backend
from nestor.orchestrator.commands.run import run_spec
from nestor.orchestrator.engine import workflow as engine
from nestor.orchestrator.journal.events import (
    StageFinished,
    StageStarted,
    TrialAttemptFailed,
    TrialFinished,
    TrialStarted,
    WorkflowFinished,
    WorkflowStarted,
    parse,
)
from nestor.orchestrator.journal.journal import read_events
from nestor.orchestrator.spec import load_spec_text
from tests.backends.simulated import sim_contract_trainer as trainer
from tests.backends.simulated.test_simulated import CONTRACT

SHAPE_OF = (WorkflowStarted, StageStarted, TrialStarted, TrialAttemptFailed, TrialFinished,
            StageFinished, WorkflowFinished)


def story(run_dir: Path) -> tuple[list[str], dict[str, list[tuple[str, ...]]]]:
    """The journal's workflow and stage events in order, and each trial's events in
    order (its attempts and fate): what must not depend on the backend. (Two slots
    run trials side by side, so how trials interleave may differ.)"""
    stages: list[str] = []
    trials: dict[str, list[tuple[str, ...]]] = {}
    for record in read_events(run_dir / "journal.jsonl"):
        event = parse(record)
        if isinstance(event, TrialStarted | TrialAttemptFailed | TrialFinished):
            row: tuple[str, ...] = (type(event).__name__, str(event.attempt))
            if isinstance(event, TrialFinished):
                row += (event.status,)
            trials.setdefault(str(event.trial["config"]["x"]), []).append(row)
        elif isinstance(event, SHAPE_OF):
            stages.append(type(event).__name__)
    return stages, trials


def model(config: Any, rng: random.Random) -> Draw:
    if float(config["x"]) > trainer.FAILING_X:
        return Draw(1.0, failure="x above 0.8 fails on purpose")
    return Draw(1.0, {"val_accuracy": trainer.value(config)})


@pytest.mark.slow
def test_a_ray_run_and_a_simulation_go_through_the_one_run_workflow(
        tmp_path: Path, ray_local: object, monkeypatch: pytest.MonkeyPatch) -> None:
    ran: list[type] = []
    one_path = engine.run_workflow

    def spy(workflow: Any, backend: Any, *args: Any, **kwargs: Any) -> dict[str, Any]:
        ran.append(type(backend))
        return one_path(workflow, backend, *args, **kwargs)

    monkeypatch.setattr(engine, "run_workflow", spy)
    spec = tmp_path / "contract.yaml"
    spec.write_text(CONTRACT)
    _, ray_results = run_spec(spec, run_dir=tmp_path / "ray", slots=2)
    workflow = load_spec_text(CONTRACT)
    simulated = make_backend(workflow, tmp_path / "sim", simulated=dict(
        nodes=1, slots_per_node=2, trial_model=model, seed=0))
    sim_results = engine.run_workflow(workflow, simulated, tmp_path / "sim")

    assert ran == [RayBackend, SimulatedBackend]
    (ray_stages, ray_trials), sim_story = story(tmp_path / "ray"), story(tmp_path / "sim")
    assert (ray_stages, ray_trials) == sim_story
    assert ray_stages == ["WorkflowStarted", "StageStarted", "StageFinished", "WorkflowFinished"]
    assert sorted(ray_trials) == ["0.1", "0.3", "0.5", "0.9"]
    assert ray_trials["0.9"] == [("TrialStarted", "1"), ("TrialAttemptFailed", "1"),
                                 ("TrialStarted", "2"), ("TrialFinished", "2", "failed")]
    assert ray_results["n_runs"] == sim_results["n_runs"] == 5
    assert "virtual_time_s" in sim_results and "virtual_time_s" not in ray_results
