"""Simulated trials that last what the cost model predicts for their shape."""

from __future__ import annotations

import random
import statistics
import textwrap
from pathlib import Path

import pytest
from _planning_helpers import synthetic_model

from nestor.orchestrator.backends import SimulatedBackend
from nestor.orchestrator.engine.workflow import run_workflow
from nestor.orchestrator.planning import Shape, cost_model_trials, predicted_run_s
from nestor.orchestrator.spec import load_spec_text


def test_a_draw_lasts_the_predicted_epochs_at_the_bound_shape() -> None:
    model = synthetic_model(contention=0.5, cores=2)
    draw = cost_model_trials(model, Shape(2, 1), per_rank_batch=64, epochs=3, busy=2)
    got = draw({"lr": 0.1}, random.Random(0))
    assert got.seconds == pytest.approx(3 * model.epoch(2, 1, 64, 2))
    assert got.seconds == pytest.approx(predicted_run_s(model, Shape(2, 1), 64, 3, busy=2))
    assert got.metrics == {"val_accuracy": 0.5}
    # Shapes differ, as the model says: 1x1 alone is not 2x1.
    alone = cost_model_trials(model, Shape(1, 1), per_rank_batch=64, epochs=3)
    assert alone({}, random.Random(0)).seconds == pytest.approx(3 * model.epoch(1, 1, 64, 1))
    assert alone({}, random.Random(0)).seconds != pytest.approx(got.seconds)


def test_a_configs_own_epochs_and_batch_size_win() -> None:
    model = synthetic_model()
    draw = cost_model_trials(model, Shape(1, 1), per_rank_batch=64, epochs=3,
                             value=lambda c: c["lr"] * 2, metric="acc")
    got = draw({"epochs": 5, "batch_size": 32, "lr": 0.2}, random.Random(0))
    assert got.seconds == pytest.approx(5 * model.epoch(1, 1, 32))
    assert got.metrics == {"acc": pytest.approx(0.4)}


def test_sigma_spreads_runs_around_the_prediction_reproducibly() -> None:
    model = synthetic_model()
    predicted = predicted_run_s(model, Shape(1, 1), 64, 2)
    draw = cost_model_trials(model, Shape(1, 1), per_rank_batch=64, epochs=2, sigma=0.2)
    rng = random.Random(7)
    seconds = [draw({}, rng).seconds for _ in range(4000)]
    assert len(set(seconds)) > 1000
    assert statistics.fmean(seconds) == pytest.approx(predicted, rel=0.02)
    again = random.Random(7)
    assert draw({}, again).seconds == seconds[0]


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"per_rank_batch": 0}, "per_rank_batch must be an integer of at least 1, but got 0"),
    ({"epochs": True}, "epochs must be an integer of at least 1, but got True"),
    ({"sigma": -0.1}, "sigma must be at least 0, but got -0.1"),
])
def test_bad_arguments_are_refused(kwargs: dict[str, object], message: str) -> None:
    args = {"per_rank_batch": 64, "epochs": 1, **kwargs}
    with pytest.raises(ValueError, match=message):
        cost_model_trials(synthetic_model(), Shape(1, 1), **args)  # type: ignore[arg-type]


def test_a_simulated_workflow_takes_waves_of_the_predicted_run(tmp_path: Path) -> None:
    """6 runs of 2x1 on 4 slots: 2 at once, 3 waves of the predicted run, plus one
    gang start-up per gang (warm gangs take the later waves)."""
    model = synthetic_model(contention=0.3, cores=4)
    run_s = predicted_run_s(model, Shape(2, 1), 64, 2, busy=4)
    workflow = load_spec_text(textwrap.dedent("""
        name: sim
        stages:
          - name: tune
            kind: hpo
            trainer: {function: "nestor.orchestrator.simulate:simulated_trial"}
            parallel: {data: 2, model: 1}
            search: {algorithm: random, budget: 6, seed: 1}
            space: {lr: {type: float, low: 0.01, high: 0.1}}
        """))
    backend = SimulatedBackend(1, 4, cost_model_trials(model, Shape(2, 1), 64, 2, busy=4),
                               seed=1, startup_s=1.5)
    run_workflow(workflow, backend, tmp_path / "run")
    ran = [a.ended - a.started for a in backend.attempts]
    assert len(ran) == 6 and ran == pytest.approx([run_s] * 6)
    assert backend.now() == pytest.approx(1.5 + 3 * run_s)
