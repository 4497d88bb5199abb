"""What a function or command trainer leaves for nestor (trainers/outputs.py): the
files in its checkpoint folder are the trial's checkpoint, predictions.npz there is
what an ensemble combines, and the data split reaches it without a flag."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from nestor.trainers import TrainerRef, TrialRequest, run_trial
from nestor.trainers.outputs import read_predictions
from nestor.trainers.predict import split_predictions

SCRIPT = textwrap.dedent("""
    import argparse, json, os
    parser = argparse.ArgumentParser()
    parser.add_argument("--lr", type=float)
    parser.parse_args()  # an unknown flag (--train_data=...) would fail here
    folder = os.environ["NESTOR_CHECKPOINT_DIR"]
    seen = {k: v for k, v in os.environ.items() if k.startswith("NESTOR_")}
    if os.environ.get("SAVE") == "1":
        with open(os.path.join(folder, "state.json"), "w") as handle:
            json.dump(seen, handle)
    print("FoM: 0.5")
""")


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    (tmp_path / "nestor_output_fns.py").write_text(textwrap.dedent("""
        import json, os

        def saves(config, ctx):
            with open(os.path.join(ctx.checkpoint_dir, "model.json"), "w") as handle:
                json.dump({"continue_from": ctx.continue_from, "split": ctx.data_split,
                           "init_from": ctx.init_from}, handle)
            return {"val_accuracy": 0.5}

        def saves_nothing(config, ctx):
            return {"val_accuracy": 0.5}
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "nestor_output_fns"
    sys.modules.pop("nestor_output_fns", None)


def test_a_function_s_files_are_its_checkpoint_and_it_gets_what_to_load(user_module, tmp_path):
    folder = tmp_path / "checkpoints" / "t1"
    result = run_trial(TrialRequest("t1", TrainerRef.python(f"{user_module}:saves"),
                                    checkpoint_dir=str(folder), continue_from="/runs/t0",
                                    init_from="/runs/pre", data_split="train+val"))
    assert result.ok, result.details
    assert result.checkpoint == str(folder)
    assert json.loads((folder / "model.json").read_text()) == {
        "continue_from": "/runs/t0", "split": "train+val", "init_from": "/runs/pre"}


def test_a_function_that_saves_nothing_has_no_checkpoint(user_module, tmp_path):
    """Its empty folder is left for the driver to remove when the stage ends
    (tests/orchestrator/engine/test_empty_trial_folders.py)."""
    folder = tmp_path / "checkpoints" / "t1"
    result = run_trial(TrialRequest("t1", TrainerRef.python(f"{user_module}:saves_nothing"),
                                    checkpoint_dir=str(folder)))
    assert result.ok and result.checkpoint is None
    assert not any(folder.iterdir())


@pytest.mark.parametrize("save", ["1", "0"])
def test_a_command_gets_its_folders_and_split_in_its_environment(tmp_path, save):
    script = tmp_path / "fit.py"
    script.write_text(SCRIPT)
    folder = tmp_path / "checkpoints" / "t1"
    request = TrialRequest("t1", TrainerRef.command([sys.executable, str(script)]),
                           config={"lr": 0.1}, checkpoint_dir=str(folder),
                           continue_from=str(tmp_path / "t0"), data_split="train+val",
                           env={"SAVE": save}, log_dir=str(tmp_path / "logs"))
    result = run_trial(request)
    assert result.ok, result.reason
    if save == "0":
        assert result.checkpoint is None and not any(folder.iterdir())  # the stage removes it
        return
    assert result.checkpoint == str(folder)
    seen = json.loads((folder / "state.json").read_text())
    assert seen["NESTOR_CHECKPOINT_DIR"] == str(folder)
    assert seen["NESTOR_CONTINUE_FROM"] == str(tmp_path / "t0")
    assert seen["NESTOR_DATA_SPLIT"] == "train+val"
    assert "train_data" not in (tmp_path / "logs" / "command.txt").read_text()


def test_an_unknown_data_split_is_refused():
    with pytest.raises(ValueError, match="data_split must be one of train, train"):
        TrialRequest("t1", TrainerRef.python("m:f"), data_split="val")


def test_predictions_are_read_from_the_folder(tmp_path: Path):
    probs = np.array([[0.9, 0.1], [0.2, 0.8]])
    np.savez(tmp_path / "predictions.npz", val_probs=probs, val_labels=np.array([0, 1]),
             test_probs=probs[::-1], test_labels=np.array([1, 0]))
    got, labels = split_predictions(str(tmp_path), "test")
    assert np.array_equal(got, probs[::-1]) and labels.tolist() == [1, 0]


@pytest.mark.parametrize(("arrays", "message"), [
    (None, "predictions.npz does not exist"),
    ({"val_probs": np.ones((2, 2))}, "has no val_labels"),
    ({"val_probs": np.ones(2), "val_labels": np.zeros(2, int)}, "must be (rows, classes)"),
    ({"val_probs": np.ones((2, 2)), "val_labels": np.zeros(2)}, "must be integer class"),
])
def test_malformed_predictions_say_what_is_wrong(tmp_path: Path, arrays, message):
    if arrays is not None:
        np.savez(tmp_path / "predictions.npz", **arrays)
    with pytest.raises(ValueError) as caught:
        read_predictions(tmp_path, "val")
    assert message in str(caught.value)
