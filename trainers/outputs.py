"""What a function or command trainer leaves for nestor: its checkpoint folder, and
in it the predictions an ensemble combines.

A built-in trainer saves its own checkpoint format (trainers/checkpoint.py); user
code saves whatever it likes. The contract is a folder per trial
(``ctx.checkpoint_dir``, ``NESTOR_CHECKPOINT_DIR``): whatever files the trainer
leaves there are the trial's checkpoint, which nestor hands, as that folder's
path, to a trial that carries on from it (``ctx.continue_from``,
``NESTOR_CONTINUE_FROM``: a PBT exploit, a successive-halving promotion, a
replayed schedule) or starts from it (``ctx.init_from``, ``NESTOR_INIT_FROM``:
transfer). A trainer that can be ensembled also writes
``predictions.npz`` there, holding the arrays of :data:`PREDICTION_ARRAYS`.

What a trainer logs for its trial's MLflow run besides its result (metrics at
steps, tags, and the files of its artifact folder ``ctx.artifact_dir``,
``NESTOR_ARTIFACT_DIR``) is the other half of the contract: trainers.logged.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

PREDICTIONS_FILE = "predictions.npz"
PREDICTION_ARRAYS = ("val_probs", "val_labels", "test_probs", "test_labels")
"""``*_probs``: (rows, classes) class probabilities (or any scores whose largest is
the predicted class; a mean of them is the ensemble's); ``*_labels``: (rows,) the
true class indices, the same rows in the same order for every member."""


def prepare_folder(directory: str | None) -> None:
    """The trial's checkpoint folder exists before user code runs, so it may just
    write into it."""
    if directory:
        Path(directory).mkdir(parents=True, exist_ok=True)


def left_checkpoint(directory: str | None) -> str | None:
    """The trial's checkpoint (its folder) when user code left a file in it; else None.
    An empty folder stays until its stage ends: the driver removes its stage's empty
    trial folders then, at once (orchestrator.engine.tidy says why not one by one)."""
    if not directory or not Path(directory).is_dir():
        return None
    if any(path.is_file() for path in Path(directory).rglob("*")):
        return directory
    return None


def read_predictions(folder: str | os.PathLike[str], split: str) -> tuple[Any, Any]:
    """``(probs, labels)`` of ``split`` (val or test) from a trial's ``predictions.npz``;
    a ValueError says what is missing or malformed."""
    import numpy as np

    path = Path(folder) / PREDICTIONS_FILE
    if not path.is_file():
        raise ValueError(f"{path} does not exist: a function or command trainer that is"
                         f" ensembled writes {PREDICTIONS_FILE} into its checkpoint folder,"
                         f" with the arrays {', '.join(PREDICTION_ARRAYS)}")
    try:
        with np.load(path, allow_pickle=False) as data:
            arrays = {name: data[name] for name in data.files}
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path} is not a readable .npz file: {exc}") from None
    missing = [name for name in (f"{split}_probs", f"{split}_labels") if name not in arrays]
    if missing:
        raise ValueError(f"{path} must hold {', '.join(PREDICTION_ARRAYS)}, but has no"
                         f" {', '.join(missing)} (it has {', '.join(sorted(arrays)) or 'none'})")
    probs = np.asarray(arrays[f"{split}_probs"], dtype=np.float64)
    labels = np.asarray(arrays[f"{split}_labels"])
    if probs.ndim != 2 or labels.ndim != 1 or len(probs) != len(labels):
        raise ValueError(f"{path}: {split}_probs must be (rows, classes) and {split}_labels"
                         f" (rows,), but they are {probs.shape} and {labels.shape}")
    if not np.issubdtype(labels.dtype, np.integer):
        raise ValueError(f"{path}: {split}_labels must be integer class indices, but they are"
                         f" {labels.dtype}")
    return probs, labels.astype(np.int64)
