"""The built-in models, whose wide layers can be split across model-parallel ranks.

Both models have two named layer groups, ``features`` (the input part) and
``head`` (the wide layers and the classifier), as their two top-level
children, so parameter names start with the group (``features.0.weight``):
that is what ``freeze`` and ``init_groups`` select by.

A split layer (`ShardedLinear`) is always initialised as the full layer from
the seeded generator, on every rank, and then cut to the rank's share of
output features: an mp=2 model therefore starts with exactly the unsplit
model's weights, and construction consumes the same random numbers. (This
costs a full layer's memory during construction; for layers that do not fit
one rank, initialise the shard directly instead.)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from nestor.trainers.parallel import Parallel, enter_split, gather_features, split_sizes

ACTIVATIONS: dict[str, type[nn.Module]] = {
    "relu": nn.ReLU,
    "tanh": nn.Tanh,
    "gelu": nn.GELU,
    "elu": nn.ELU,
    "leaky_relu": nn.LeakyReLU,
    "sigmoid": nn.Sigmoid,
}
ARCH_KEYS = ("trainer", "image_shape", "num_classes", "width", "depth", "activation", "dropout",
             "channels")


class ShardedLinear(nn.Module):
    """A linear layer whose output features are split across the model-parallel group.

    Each rank holds rows ``offset : offset + width`` of the full weight (and
    bias), computes its share of the output, and the shares are allgathered
    into the full output, so the next layer sees exactly what the unsplit
    layer would give. Backward, the gradient of the input is summed over the
    group (each share contributes part of it) and each rank keeps its slice
    of the output's gradient. With mp = 1 it is an ordinary linear layer.
    """

    def __init__(self, in_features: int, out_features: int, par: Parallel, name: str) -> None:
        super().__init__()
        full = nn.Linear(in_features, out_features)
        self.in_features, self.out_features = in_features, out_features
        self.widths = split_sizes(out_features, par.mp)
        if min(self.widths) < 1:
            raise ValueError(
                f"a layer of {out_features} units cannot be split over {par.mp} model-parallel"
                f" ranks: width must be at least model_parallel, but got {out_features}"
            )
        self.offset = sum(self.widths[: par.mp_rank])
        rows = slice(self.offset, self.offset + self.widths[par.mp_rank])
        self.weight = nn.Parameter(full.weight.detach()[rows].clone())
        self.bias = nn.Parameter(full.bias.detach()[rows].clone())
        self.par, self.name = par, name

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = enter_split(x, self.par, self.name)
        return gather_features(F.linear(x, self.weight, self.bias), self.par, self.name,
                               self.widths)

    def shard(self, full: torch.Tensor) -> torch.Tensor:
        """This rank's rows of a full-size weight or bias (or optimizer state of one)."""
        return full[self.offset:self.offset + self.widths[self.par.mp_rank]]

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features},"
                f" shard={self.offset}:{self.offset + self.weight.shape[0]}")


class MLP(nn.Module):
    """Flatten, ``depth`` hidden layers of ``width`` units (all split), a classifier."""

    def __init__(self, arch: Mapping[str, Any], par: Parallel) -> None:
        super().__init__()
        act = ACTIVATIONS[arch["activation"]]
        c, h, w = arch["image_shape"]
        width, dropout = arch["width"], arch["dropout"]
        self.features = nn.Sequential(
            nn.Flatten(), ShardedLinear(c * h * w, width, par, "mp.fc0"), act()
        )
        head: list[nn.Module] = []
        for i in range(1, arch["depth"]):
            head += [nn.Dropout(dropout), ShardedLinear(width, width, par, f"mp.fc{i}"), act()]
        head += [nn.Dropout(dropout), nn.Linear(width, arch["num_classes"])]
        self.head = nn.Sequential(*head)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))


class DigitsCNN(nn.Module):
    """The seed's specialized digits CNN.

    features: conv 3x3 (``channels``) - act - maxpool 2 - conv 3x3
    (2 x ``channels``) - act - maxpool 2 - flatten; head: ``depth`` wide
    fully connected layers of ``width`` units (the largest layers: 3136 x 512
    weights for MNIST at the defaults; split across model-parallel ranks),
    then the classifier. Dropout goes before each fully connected layer.
    """

    def __init__(self, arch: Mapping[str, Any], par: Parallel) -> None:
        super().__init__()
        act = ACTIVATIONS[arch["activation"]]
        c, h, w = arch["image_shape"]
        ch, width, dropout = arch["channels"], arch["width"], arch["dropout"]
        if h < 4 or w < 4:
            raise ValueError(f"the cnn needs images of at least 4x4, but got {h}x{w}")
        self.features = nn.Sequential(
            nn.Conv2d(c, ch, 3, padding=1), act(), nn.MaxPool2d(2),
            nn.Conv2d(ch, 2 * ch, 3, padding=1), act(), nn.MaxPool2d(2),
            nn.Flatten(),
        )
        flat = 2 * ch * (h // 4) * (w // 4)
        head: list[nn.Module] = []
        for i in range(arch["depth"]):
            head += [nn.Dropout(dropout), ShardedLinear(flat if i == 0 else width, width, par,
                                                        f"mp.fc{i}"), act()]
        head += [nn.Dropout(dropout), nn.Linear(width, arch["num_classes"])]
        self.head = nn.Sequential(*head)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))


MODELS: dict[str, type[nn.Module]] = {"mlp": MLP, "cnn": DigitsCNN}


def make_arch(trainer: str, options: Mapping[str, Any], image_shape: tuple[int, ...],
              num_classes: int) -> dict[str, Any]:
    """The plain-data description a checkpoint stores to rebuild its model."""
    return {
        "trainer": trainer,
        "image_shape": list(image_shape),
        "num_classes": int(num_classes),
        "width": options["width"],
        "depth": options["depth"],
        "activation": options["activation"],
        "dropout": options["dropout"],
        "channels": options.get("channels"),
    }


def build_model(arch: Mapping[str, Any], par: Parallel | None = None, *,
                seed: int | None = None) -> nn.Module:
    """Build a model from its arch dict, split for ``par`` (None: one process, unsplit).

    With ``seed`` the weights are drawn from ``torch.manual_seed(seed)``,
    the same on every rank whatever the split.
    """
    if arch["trainer"] not in MODELS:
        raise ValueError(f"trainer must be one of {', '.join(MODELS)}, but got {arch['trainer']!r}")
    if seed is not None:
        torch.manual_seed(seed)
    return MODELS[arch["trainer"]](arch, par or Parallel(1, 1))


def sharded_layers(model: nn.Module) -> dict[str, ShardedLinear]:
    """Parameter (and state) names of split layers -> the layer that owns them."""
    owners: dict[str, ShardedLinear] = {}
    for module_name, module in model.named_modules():
        if isinstance(module, ShardedLinear):
            for pname in ("weight", "bias"):
                owners[f"{module_name}.{pname}"] = module
    return owners


def layer_groups(model: nn.Module) -> tuple[str, ...]:
    """Names of the model's layer groups (its top-level children)."""
    return tuple(name for name, _ in model.named_children())


def freeze_groups(model: nn.Module, groups: tuple[str, ...] | list[str]) -> None:
    """Stop training the parameters of the named layer groups."""
    known = layer_groups(model)
    for group in groups:
        if group not in known:
            raise ValueError(f"freeze must name layer groups ({', '.join(known)}), but got"
                             f" {group!r}")
        for param in getattr(model, group).parameters():
            param.requires_grad_(False)
