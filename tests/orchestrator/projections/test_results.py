"""`nestor results` shows what each stage produced, not its best trial by validation.

The figures are the demo's (configs/mnist-combined.yaml, issue 14): the transfer
stage's best trial by validation is the pretraining run (0.9701 validation,
0.9612 test, on digits 0-4), while the stage's product is the fine-tuned model
(0.8806 test on 5-9, against 0.7649 from scratch).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from nestor.orchestrator.commands.cli import cli
from nestor.orchestrator.projections.kinds import stage_product, stage_report
from nestor.orchestrator.projections.tables import to_markdown

COST = {"n_trials": 3, "n_runs": 3, "n_failed": 0, "slot_seconds": 60.0, "wall_time_s": 40.0,
        "time_to_threshold_s": None}
HPO = {"name": "tune", "kind": "hpo", **COST,
       "objective": {"metric": "val_accuracy", "mode": "max"},
       "best": {"id": "7", "value": 0.9655, "test_value": 0.9541, "config": {"lr": 0.05}},
       "trials": []}
ENSEMBLE = {"name": "members", "kind": "ensemble", **COST,
            "objective": {"metric": "val_accuracy", "mode": "max"},
            "best": {"id": "member-0", "value": 0.9399, "test_value": 0.9377, "config": {}},
            "ensemble": {"combine": "greedy", "val_value": 0.9533, "test_value": 0.9461,
                         "best_member_val_value": 0.9399, "best_member_test_value": 0.9377,
                         "mean_member_test_value": 0.8971,
                         "members": [{"id": "member-0", "weight": 0.5, "val_value": 0.9399,
                                      "test_value": 0.9377, "config": {}},
                                     {"id": "member-1", "weight": 0.5, "val_value": 0.8511,
                                      "test_value": 0.8565, "config": {}}]},
            "trials": []}
TRANSFER = {"name": "digits-5-9", "kind": "transfer", **COST,
            "objective": {"metric": "val_accuracy", "mode": "max"},
            "best": {"id": "pretrain", "value": 0.9701, "test_value": 0.9612, "config": {}},
            "transfer": {"mode": "finetune", "val_value": 0.8733, "test_value": 0.8806,
                         "scratch_test_value": 0.7649, "scratch_val_value": 0.7422,
                         "curves": {"pretrain": [], "finetune": [], "scratch": []}},
            "trials": []}
TRAIN = {"name": "final", "kind": "train", **COST,
         "objective": {"metric": "val_accuracy", "mode": "max"},
         "best": {"id": "final", "value": 0.9933, "test_value": 0.9588, "config": {}},
         "train": {"data": "train+val", "val_value": 0.9933, "test_value": 0.9588,
                   "config": {"lr": 0.05}},
         "trials": []}
RESULTS = {"workflow": "mnist-combined", "stages": [HPO, ENSEMBLE, TRANSFER, TRAIN],
           "n_runs": 12, "slot_seconds": 240.0, "wall_time_s": 95.0}


def run_results(tmp_path: Path, fmt: str) -> str:
    (tmp_path / "results.json").write_text(json.dumps(RESULTS))
    result = CliRunner().invoke(cli, ["results", str(tmp_path), "--format", fmt],
                                env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    return result.output


def row(output: str, stage: str) -> list[str]:
    """The cells of the first table's row for ``stage`` (split on 2+ spaces)."""
    line = next(li for li in output.splitlines() if li.strip().startswith(stage + " "))
    return re.split(r"\s{2,}", line.strip())


def test_a_transfer_stage_shows_the_fine_tuned_model_against_scratch(tmp_path: Path) -> None:
    output = run_results(tmp_path, "table")
    cells = row(output, "digits-5-9")
    assert cells == ["digits-5-9", "fine-tuned model", "val_accuracy (max)", "0.8733", "0.8806",
                     "from scratch, same budget", "0.7649"]
    assert "0.9701" not in output and "0.9612" not in output  # the pretraining trial


def test_an_ensemble_stage_shows_the_ensemble_against_its_best_member(tmp_path: Path) -> None:
    cells = row(run_results(tmp_path, "table"), "members")
    assert cells == ["members", "ensemble of 2 (greedy)", "val_accuracy (max)", "0.9533", "0.9461",
                     "best member (member-0)", "0.9377"]


def test_hpo_and_train_stages_show_their_model(tmp_path: Path) -> None:
    output = run_results(tmp_path, "table")
    assert row(output, "tune") == ["tune", "best trial 7", "val_accuracy (max)", "0.9655",
                                   "0.9541", "-", "-"]
    # Trained on train+val: its validation accuracy is no held-out figure, so none is shown.
    assert row(output, "final") == ["final", "model trained on train+val", "val_accuracy (max)",
                                    "-", "0.9588", "-", "-"]
    assert "0.9933" not in output


def test_json_gives_each_stage_its_product(tmp_path: Path) -> None:
    stages = {s["name"]: s for s in json.loads(run_results(tmp_path, "json"))["stages"]}
    assert stages["digits-5-9"]["product"] == {
        "what": "fine-tuned model", "metric": "val_accuracy", "value": 0.8733, "test": 0.8806,
        "baseline": "from scratch, same budget", "baseline_test": 0.7649}
    assert stages["digits-5-9"]["best"]["id"] == "pretrain"  # results.json itself is kept


def test_a_stage_summary_page_shows_the_product(tmp_path: Path) -> None:
    markdown = to_markdown(stage_report(TRANSFER))
    assert "| product | fine-tuned model |" in markdown
    assert "| its test accuracy | 0.8806 |" in markdown
    assert "| from scratch, same budget: test accuracy | 0.7649 |" in markdown
    assert "0.9701" not in markdown and "0.9612" not in markdown
    ensemble = to_markdown(stage_report(ENSEMBLE))
    assert "| its test accuracy | 0.9461 |" in ensemble
    assert "| members' mean: test accuracy | 0.8971 |" in ensemble


def test_a_hierarchical_stage_and_a_stage_with_nothing_say_so() -> None:
    hierarchical: dict[str, Any] = {**TRANSFER, "transfer": {**TRANSFER["transfer"],
                                                             "mode": "hierarchical"}}
    assert stage_product(hierarchical).what == "combined sub-models, fine-tuned"
    empty = stage_product({**ENSEMBLE, "ensemble": None})
    assert (empty.what, empty.test) == ("no ensemble (no member completed)", None)
    assert stage_product({**HPO, "best": None}).what == "no completed trial"


SWEEP = {"name": "sweep", "kind": "hpo", **COST, "n_trials": 4, "n_failed": 1,
         "objective": {"metric": "fom", "mode": "min"},
         "best": {"id": "2", "value": 0.12, "test_value": None, "config": {"lr": 0.01}},
         "trials": [
             {"id": "0", "status": "completed", "value": 0.4, "config": {"lr": 0.1},
              "attempts": 1, "slot_seconds": 2.0, "generation": 0, "deme": 0, "reason": None},
             {"id": "1", "status": "failed", "value": None, "config": {"lr": 0.5},
              "attempts": 2, "slot_seconds": 2.0, "generation": 0, "deme": 0,
              "reason": "command was killed by SIGKILL"},
             {"id": "2", "status": "completed", "value": 0.12, "config": {"lr": 0.01},
              "attempts": 1, "slot_seconds": 2.0, "generation": 0, "deme": 0, "reason": None},
             {"id": "3", "status": "completed", "value": 0.3, "config": {"lr": 0.03},
              "attempts": 1, "slot_seconds": 2.0, "generation": 0, "deme": 0,
              "reason": None}]}


def sweep_results(tmp_path: Path, *args: str) -> str:
    (tmp_path / "results.json").write_text(json.dumps({"workflow": "sweep", "stages": [SWEEP]}))
    result = CliRunner().invoke(cli, ["results", str(tmp_path), *args], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    return result.output


def test_the_direction_stands_beside_the_metric(tmp_path: Path) -> None:
    """A command's figure of merit minimised: the table says min, not just fom."""
    output = sweep_results(tmp_path)
    assert row(output, "sweep")[:4] == ["sweep", "best trial 2", "fom (min)", "0.12"]


def test_results_list_the_trials_best_first_with_status_and_reason(tmp_path: Path) -> None:
    output = sweep_results(tmp_path)
    lines = output.splitlines()
    title = next(i for i, li in enumerate(lines) if li.startswith("stage sweep: 4 trials"))
    assert lines[title].strip() == "stage sweep: 4 trials (3 completed, 1 failed), best first"
    header = re.split(r"\s{2,}", lines[title + 1].strip())
    assert header[:5] == ["trial", "generation", "deme", "status", "fom (min)"]
    assert header[-1] == "failure"
    rows = [re.split(r"\s{2,}", li.strip()) for li in lines[title + 2:title + 6]]
    assert [(r[0], r[3]) for r in rows] == [("2", "completed"), ("3", "completed"),
                                            ("0", "completed"), ("1", "failed")]
    assert rows[3][-1] == "command was killed by SIGKILL"
    shorter = sweep_results(tmp_path, "--trials", "2")
    assert "... and 2 more (--trials 0 lists all" in shorter
    assert "command was killed by SIGKILL" not in shorter


def test_the_csv_says_why_each_trial_failed(tmp_path: Path) -> None:
    import csv
    import io

    rows = list(csv.DictReader(io.StringIO(sweep_results(tmp_path, "--format", "csv"))))
    assert [(r["id"], r["status"], r["reason"]) for r in rows] == [
        ("0", "completed", ""), ("1", "failed", "command was killed by SIGKILL"),
        ("2", "completed", ""), ("3", "completed", "")]
