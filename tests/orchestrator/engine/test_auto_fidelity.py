"""``algorithm: auto`` with a fidelity, under the scheduler: it runs the ASHA it picked."""

from __future__ import annotations

import textwrap
from pathlib import Path

from nestor.orchestrator.backends import SimulatedBackend, lognormal_trials
from nestor.orchestrator.engine.workflow import run_workflow
from nestor.orchestrator.spec import load_spec_text
from tests.backends.simulated.test_simulated import finished

SPEC = textwrap.dedent("""
    name: autofid
    stages:
      - name: tune
        kind: hpo
        trainer: {function: "nestor.orchestrator.simulate:simulated_trial", settings: {epochs: 9},
                  checkpoints: true}
        search: {algorithm: auto, budget: 30, parallel: 4, fidelity: epochs, seed: 2}
        space:
          x: {type: float, low: 0, high: 1}
          y: {type: float, low: 0, high: 1}
    """)


def test_auto_over_epochs_runs_asha_and_spends_the_epochs(tmp_path: Path) -> None:
    workflow = load_spec_text(SPEC)
    stage = workflow.stage("tune")
    assert stage.auto_choice().label() == "asha tpe, rungs 1-9, eta 3, budget 270 epochs"
    backend = SimulatedBackend(2, 4, lognormal_trials(60.0, 0.3), seed=1)
    run_workflow(workflow, backend, tmp_path / "run")
    done = finished(tmp_path / "run")
    assert all(e["status"] == "completed" for e in done.values())
    trials = [e["trial"] for e in done.values()]
    assert {t["budget"] for t in trials} == {1, 3, 9}
    for trial in trials:
        source = trial.get("continue_from")
        if trial["origin"] == "promotion":
            assert done[source]["trial"]["budget"] < trial["budget"]
        else:
            assert source is None
    spent = sum(t["budget"] - (done[t["continue_from"]]["trial"]["budget"]
                               if t.get("continue_from") else 0) for t in trials)  # fmt: skip
    # 30 full trainings of 9 epochs, spent to within one bottom-rung trial (1 epoch)
    assert 30 * 9 - 1 < spent <= 30 * 9
