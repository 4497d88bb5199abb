"""A stage's own work between and after its trials runs off the driver.

An ensemble's candidates (for greedy selection) and then its members are loaded
and asked for their predictions in Ray tasks (the backend's ``run_task``): the
driver, whose loop must keep every other
stage's trials going, never builds a model. Checked from outside the code
under test: in this driver, building a ``trainers.predict.Predictor`` raises.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

NO_PREDICTIONS_IN_THE_DRIVER = """
import nestor.trainers.predict
class Refused:
    def __init__(self, *args, **kwargs):
        raise AssertionError("a Predictor was built in the driver")
nestor.trainers.predict.Predictor = Refused
"""


def greedy_ensemble_spec(slots: int, epochs: int) -> str:
    """A two-trial mlp search on digits and a greedy ensemble of two members drawn from
    it: the smallest workflow whose ensemble stage computes predictions first."""
    return textwrap.dedent(f"""
        name: ens
        resources: {{slots: {slots}}}
        stages:
          - name: tune
            kind: hpo
            trainer: {{name: mlp, settings: {{dataset: digits, epochs: {epochs}}}}}
            search: {{algorithm: random, budget: 2, seed: 3}}
            space: {{lr: {{type: float, low: 0.01, high: 0.1, log: true}}}}
          - name: members
            kind: ensemble
            from: [tune]
            members: 2
            select: greedy
            combine: mean
        """)


def test_ensemble_predictions_run_as_ray_tasks_not_in_the_driver(tmp_path: Path,
                                                       nestor_with_fault) -> None:
    spec = tmp_path / "ens.yaml"
    spec.write_text(greedy_ensemble_spec(slots=2, epochs=2))
    run_dir = tmp_path / "run"
    driver = nestor_with_fault(NO_PREDICTIONS_IN_THE_DRIVER, "run", str(spec), "--run-dir",
                               str(run_dir), timeout=600, cwd=str(Path(__file__).parents[3]))
    assert driver.returncode == 0, driver.stderr
    assert "Traceback" not in driver.stderr
    results = json.loads((run_dir / "results.json").read_text())
    ensemble = next(s for s in results["stages"] if s["name"] == "members")["ensemble"]
    assert ensemble is not None, "the ensemble was not built"
    assert 0.5 < ensemble["test_value"] <= 1.0
    assert len(ensemble["members"]) == 2
