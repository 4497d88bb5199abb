"""A user's own trainer, written to nestor's trainer contract as its README gives it:
usable as a function (``quadfit:train``) and as a command (``python quadfit.py``).

Its "model" is one weight ``w``, fitted towards 1 by gradient steps of size
``lr``; it is saved to the trial's checkpoint folder after every epoch and, at
the start, restored from the trial's own folder (a retried attempt), else from
the folder it continues (PBT, ASHA), else from the pretrained one (transfer).
What it started from is saved with it (``start``), so a test can see that a
continued trial really carried on. It also writes predictions.npz for
ensembles: three classes, the right one more likely the better ``w`` is.
It takes a ``momentum`` it does not use, so that a search of two numbers
(lq-CMA-ES needs two) has a second one to search.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

ROWS = 60


def load(folder: str | None) -> dict | None:
    path = os.path.join(folder or "", "model.json")
    if folder and os.path.isfile(path):
        with open(path) as handle:
            return json.load(handle)
    return None


def accuracy(w: float) -> float:
    return 1.0 - (1.0 - w) ** 2


def write_predictions(folder: str, w: float, seed: int) -> None:
    rng = np.random.default_rng(seed)
    arrays = {}
    for split in ("val", "test"):
        labels = np.arange(ROWS) % 3
        scores = np.eye(3)[labels] * w + rng.random((ROWS, 3)) * (1.0 - w) * 1.5
        arrays[f"{split}_probs"] = scores / scores.sum(axis=1, keepdims=True)
        arrays[f"{split}_labels"] = labels
    np.savez(os.path.join(folder, "predictions.npz"), **arrays)


def fit(lr: float, epochs: int, seed: int, folder: str, continue_from: str | None,
        init_from: str | None, data_split: str, report) -> dict:
    """Train up to ``epochs``, from whatever the trial is handed."""
    state, source = load(folder), "own"
    if state is None and continue_from:
        state, source = load(continue_from), "continue_from"
    if state is None and init_from:
        state, source = {"w": load(init_from)["w"], "epoch": 0}, "init_from"
    if state is None:
        state, source = {"w": 0.0, "epoch": 0}, None
    start = {"w": state["w"], "epoch": state["epoch"], "source": source,
             "data_split": data_split}
    for epoch in range(state["epoch"], epochs):
        state = {"w": state["w"] + lr * (1.0 - state["w"]), "epoch": epoch + 1}
        with open(os.path.join(folder, "model.json"), "w") as handle:
            json.dump({**state, "start": start}, handle)
        if report(accuracy(state["w"]), epoch + 1):
            break
    write_predictions(folder, state["w"], seed)
    return state


def train(config: dict, ctx) -> dict:
    """The function trainer."""
    def report(value: float, step: int) -> bool:
        ctx.report({"val_accuracy": value}, step=step)
        return ctx.should_stop()

    state = fit(config["lr"], config["epochs"], config.get("seed", 0), ctx.checkpoint_dir,
                ctx.continue_from, ctx.init_from, ctx.data_split, report)
    return {"val_accuracy": accuracy(state["w"]), "w": state["w"]}


def forgetful(config: dict, ctx) -> dict:
    """A trainer whose spec says it saves checkpoints, but that saves none."""
    return {"val_accuracy": config["lr"]}


def main() -> None:
    """The command trainer: flags for its hyperparameters and settings, and the
    folders from NESTOR_* variables."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--lr", type=float, required=True)
    parser.add_argument("--epochs", type=int, required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--momentum", type=float, default=0.0)  # searched, not used (below)
    parser.add_argument("--dataset")  # a transfer stage's source or target task
    parser.add_argument("--classes")
    args = parser.parse_args()  # an unknown flag is an error, as in most scripts

    def report(value: float, step: int) -> bool:
        print(f"FoM: {value}", flush=True)
        return False

    fit(args.lr, args.epochs, args.seed, os.environ["NESTOR_CHECKPOINT_DIR"],
        os.environ.get("NESTOR_CONTINUE_FROM") or None,
        os.environ.get("NESTOR_INIT_FROM") or None, os.environ["NESTOR_DATA_SPLIT"], report)


if __name__ == "__main__":
    sys.exit(main())
