"""Stage and trial runs land in a real MLflow SQLite store, nested and tagged."""

from __future__ import annotations

from pathlib import Path

from orchestrator.tracking import Tracker


def test_nested_runs_with_params_metrics_and_tags(tmp_path: Path) -> None:
    tracker = Tracker(tmp_path, "demo")
    stage = tracker.start_run("tune", tags={"nestor.stage": "tune"})
    trial = tracker.start_run(
        "t1", parent=stage, params={"lr": 0.1, "act": "relu"},
        tags={"nestor.generation": 0, "nestor.dp": 2},
    )
    for epoch, acc in enumerate([0.5, 0.7]):
        tracker.log_metrics(trial, {"val_accuracy": acc, "loss": float("nan")}, step=epoch)
    tracker.set_tags(trial, {"nestor.status": "completed"})
    tracker.finish(trial, "FINISHED")
    tracker.finish(stage, "FINISHED")

    # Read back through a second client, as the MLflow UI would.
    again = Tracker(tmp_path, "demo")
    assert again.experiment_id == tracker.experiment_id
    run = again.client.get_run(trial)
    assert run.data.tags["mlflow.parentRunId"] == stage
    assert run.data.params == {"lr": "0.1", "act": "relu"}
    assert run.data.tags["nestor.generation"] == "0"
    assert run.data.tags["nestor.metric.loss"] == "nan"
    assert run.info.status == "FINISHED"
    history = again.client.get_metric_history(trial, "val_accuracy")
    assert [(m.step, m.value) for m in history] == [(0, 0.5), (1, 0.7)]
    assert (tmp_path / "mlflow.db").exists()
