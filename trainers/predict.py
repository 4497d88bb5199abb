"""Class probabilities from a saved checkpoint, in one plain process.

Ensembles are combined and served after training, far from the Horovod gang
that trained them: a checkpoint holds the unsplit weights, the architecture
and the resolved options, which is all it takes to rebuild the model and the
exact data splits (and normalisation) it was trained with.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

import numpy as np

EVAL_CHUNK = 1024


def _splits(options: Mapping[str, Any]) -> Any:
    key = tuple(sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in options.items()
                       if k in _SPLIT_KEYS))
    return _cached_splits(key)


_SPLIT_KEYS = ("dataset", "data_dir", "split_seed", "val_fraction", "test_fraction", "classes",
               "max_train_samples", "train_data", "bootstrap")


@lru_cache(maxsize=8)
def _cached_splits(key: tuple[tuple[str, Any], ...]) -> Any:
    from nestor.trainers.data import splits_of

    return splits_of({k: list(v) if isinstance(v, tuple) else v for k, v in key})


def split_predictions(checkpoint: str | os.PathLike[str], split: str) -> tuple[Any, Any]:
    """Class probabilities and true labels of the val or test split, for an ensemble:
    a built-in trainer's from its checkpoint file (its model predicts them), a
    function or command trainer's from the ``predictions.npz`` it left in its
    checkpoint folder (trainers.outputs)."""
    if os.path.isdir(checkpoint):
        from nestor.trainers.outputs import read_predictions

        return read_predictions(checkpoint, split)
    return Predictor(checkpoint).split(split)


class Predictor:
    """One trained model, ready to give probabilities for a split or raw images."""

    def __init__(self, checkpoint: str | os.PathLike[str]) -> None:
        import torch

        from nestor.trainers.checkpoint import load_checkpoint, load_weights
        from nestor.trainers.models import build_model

        torch.set_num_threads(max(1, min(4, os.cpu_count() or 1)))
        payload = load_checkpoint(checkpoint)
        self.options: dict[str, Any] = dict(payload["options"])
        self.arch: dict[str, Any] = dict(payload["arch"])
        self.model = build_model(self.arch)
        load_weights(self.model, payload)
        self.model.eval()

    @property
    def splits(self) -> Any:
        return _splits(self.options)

    def split(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        """Probabilities (N, classes) and true labels of the val or test split."""
        part = getattr(self.splits, name)
        return self._probabilities(part.x), part.y

    def raw(self, images: np.ndarray) -> np.ndarray:
        """Probabilities for raw images (N, H, W), (N, H*W) or (N, 1, H, W), as the
        dataset stores them (0-255 grey levels for mnist, mnist5k and digits); they are
        normalised as the training data was."""
        shape = tuple(self.arch["image_shape"])  # (1, H, W)
        x = np.asarray(images, dtype=np.float32)
        pixels = int(np.prod(shape))
        if x.ndim < 1 or x.size % pixels or x.size == 0:
            raise ValueError(f"inputs must be images of {shape[1]}x{shape[2]} pixels"
                             f" ({pixels} values each), but got an array of shape {x.shape}")
        x = x.reshape((-1, *shape))
        splits = self.splits
        return self._probabilities((x - splits.mean) / splits.std)

    def _probabilities(self, x: np.ndarray) -> np.ndarray:
        import torch

        out = []
        with torch.no_grad():
            for start in range(0, len(x), EVAL_CHUNK):
                chunk = np.ascontiguousarray(x[start:start + EVAL_CHUNK])
                logits = self.model(torch.from_numpy(chunk))
                out.append(torch.softmax(logits, dim=1).numpy())
        return np.concatenate(out) if out else np.zeros((0, self.arch["num_classes"]), np.float32)
