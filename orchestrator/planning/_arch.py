"""Sizes of the built-in models, counted from their settings without torch.

The cost model needs how many gradient bytes a rank reduces, how many bytes
each split layer gathers per sample, how much of the arithmetic splits over
model-parallel ranks, and how much memory a rank holds; all follow from the
architecture in trainers/models.py. Counting them here keeps `nestor
validate` and `nestor plan` instant (no torch import), and a test checks the
counts against the real torch models, so the two cannot drift apart.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

FLOAT_BYTES = 4
IMAGE_SHAPES: dict[str, tuple[int, int, int]] = {
    "mnist5k": (1, 28, 28),
    "mnist": (1, 28, 28),
    "digits": (1, 8, 8),
    "synthetic": (1, 8, 8),
}
# Optimizer state tensors kept per parameter (momentum buffer; Adam's two moments).
OPTIMIZER_SLOTS = {"sgd": 0, "momentum": 1, "nesterov": 1, "adam": 2, "adamw": 2, "rmsprop": 2}


@dataclass(frozen=True)
class SplitLayer:
    """One `ShardedLinear`: what it gathers forward and reduces backward."""

    in_features: int
    out_features: int
    input_needs_grad: bool  # False for a first layer fed the images: no backward allreduce


@dataclass(frozen=True)
class ModelSize:
    """Counts for one built-in model; ``split`` parts shrink with model parallelism."""

    replicated_params: int
    split_params: int
    replicated_macs: int  # multiply-accumulates per sample, forward
    split_macs: int
    replicated_activations: int  # floats kept per sample for backward
    split_activations: int
    split_layers: tuple[SplitLayer, ...]
    optimizer_slots: int

    @property
    def params(self) -> int:
        return self.replicated_params + self.split_params

    @property
    def split_share(self) -> float:
        """Share of the forward arithmetic that model parallelism divides."""
        total = self.replicated_macs + self.split_macs
        return self.split_macs / total if total else 0.0

    def max_model_parallel(self) -> int:
        """The widest split: every rank must hold at least one unit of each split layer."""
        return min((layer.out_features for layer in self.split_layers), default=1)

    def params_per_rank(self, mp: int) -> int:
        """Parameters on the rank holding the largest share (shares differ by one unit)."""
        extra = 0
        for layer in self.split_layers:
            share = math.ceil(layer.out_features / mp)
            extra += share * (layer.in_features + 1)
        return self.replicated_params + extra if mp > 1 else self.params

    def gradient_bytes(self, mp: int, fp16: bool = False) -> int:
        return self.params_per_rank(mp) * (2 if fp16 else FLOAT_BYTES)

    def state_bytes(self, mp: int) -> int:
        """Weights, gradients and optimizer state of one rank."""
        return self.params_per_rank(mp) * FLOAT_BYTES * (2 + self.optimizer_slots)

    def activation_bytes(self, mp: int) -> int:
        """Bytes of activations one sample keeps for backward on one rank."""
        return FLOAT_BYTES * (self.replicated_activations
                              + math.ceil(self.split_activations / max(1, mp)))


def model_size(trainer: str, options: Mapping[str, Any]) -> ModelSize:
    """Count ``trainer``'s model (``mlp`` or ``cnn``) for resolved ``options``.

    >>> model_size("mlp", {"dataset": "digits", "width": 8, "depth": 1,
    ...                    "optimizer": "sgd", "classes": None}).params
    610
    """
    dataset = options.get("dataset", "mnist5k")
    if dataset not in IMAGE_SHAPES:
        raise ValueError(f"dataset must be one of {', '.join(IMAGE_SHAPES)}, but got {dataset!r}")
    c, h, w = IMAGE_SHAPES[dataset]
    classes = options.get("classes")
    num_classes = len(classes) if classes else 10
    width, depth = int(options["width"]), int(options["depth"])
    slots = OPTIMIZER_SLOTS.get(str(options.get("optimizer", "momentum")), 1)
    rep_p = rep_m = rep_a = 0
    layers: list[SplitLayer] = []
    if trainer == "mlp":
        flat = c * h * w
        layers.append(SplitLayer(flat, width, False))
        layers += [SplitLayer(width, width, True) for _ in range(depth - 1)]
        rep_a += flat  # the flattened input
    elif trainer == "cnn":
        ch = int(options["channels"])
        conv1 = ch * (c * 9 + 1)
        conv2 = 2 * ch * (ch * 9 + 1)
        rep_p += conv1 + conv2
        rep_m += h * w * ch * c * 9 + (h // 2) * (w // 2) * 2 * ch * ch * 9
        # conv out, activation, pool; twice (the flatten is a view)
        rep_a += 2 * h * w * ch + (h // 2) * (w // 2) * ch
        rep_a += 2 * (h // 2) * (w // 2) * 2 * ch + (h // 4) * (w // 4) * 2 * ch
        flat = 2 * ch * (h // 4) * (w // 4)
        layers.append(SplitLayer(flat, width, True))
        layers += [SplitLayer(width, width, True) for _ in range(depth - 1)]
    else:
        raise ValueError(f"trainer must be one of mlp, cnn, but got {trainer!r}")
    split_p = sum(layer.out_features * (layer.in_features + 1) for layer in layers)
    split_m = sum(layer.out_features * layer.in_features for layer in layers)
    # Per split layer: its local output (split); the gathered output, the
    # activation and the dropout after it (replicated).
    split_a = sum(layer.out_features for layer in layers)
    rep_a += sum(3 * layer.out_features for layer in layers)
    rep_p += width * num_classes + num_classes  # the classifier
    rep_m += width * num_classes
    rep_a += num_classes
    return ModelSize(rep_p, split_p, rep_m, split_m, rep_a, split_a, tuple(layers), slots)
