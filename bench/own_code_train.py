"""The user's own training function that ``bench/own_code_bench.py`` tunes with every
system: a small PyTorch CNN on scikit-learn's digits, written to nestor's function
contract (``train(config, ctx)``); the bench's adapters give Ray Tune, Optuna and
Syne Tune the same ``ctx``.

The data split is fixed (stratified, ``random_state=0``): 60 % train, 20 % validation,
20 % test; no trial trains or is chosen on the test split. Each epoch the model is
evaluated on validation and test, checkpointed (model, optimizer, epochs so far) into
``ctx.checkpoint_dir`` and reported; a trial that carries on from another
(``ctx.continue_from``: ASHA promotions, PBT's exploit) loads that checkpoint and trains
on up to ``config["epochs"]`` with its own lr, momentum and batch size.

``config["log"]`` (a file) gets one JSON line per evaluated epoch, written by the
function itself, so every system is measured the same way: by what the user's code
saw, when it saw it.
"""

from __future__ import annotations

import functools
import json
import os
import time
from pathlib import Path
from typing import Any

import torch
from torch import nn

CHECKPOINT = "model.pt"


@functools.lru_cache(maxsize=1)
def data() -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """Digits (8x8 grey images, 1,797 of them), split once: train, val, test."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    x, y = load_digits(return_X_y=True)
    x_rest, x_test, y_rest, y_test = train_test_split(x, y, test_size=0.2, stratify=y,
                                                      random_state=0)
    x_train, x_val, y_train, y_val = train_test_split(x_rest, y_rest, test_size=0.25,
                                                      stratify=y_rest, random_state=0)

    def tensors(a: Any, b: Any) -> tuple[torch.Tensor, torch.Tensor]:
        return (torch.tensor(a / 16.0, dtype=torch.float32).reshape(-1, 1, 8, 8),
                torch.tensor(b, dtype=torch.long))

    return {"train": tensors(x_train, y_train), "val": tensors(x_val, y_val),
            "test": tensors(x_test, y_test)}


def model() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(),
        nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(64 * 4 * 4, 128), nn.ReLU(), nn.Linear(128, 10))


def accuracy(net: nn.Module, split: tuple[torch.Tensor, torch.Tensor]) -> float:
    with torch.no_grad():
        return float((net(split[0]).argmax(1) == split[1]).float().mean())


def _checkpoint(folder: str | None) -> Path | None:
    if folder and (Path(folder) / CHECKPOINT).is_file():
        return Path(folder) / CHECKPOINT
    return None


def train(config: dict[str, Any], ctx: Any) -> dict[str, float]:
    torch.set_num_threads(1)  # a slot is one core
    splits = data()
    torch.manual_seed(0)  # every configuration starts from the same weights
    net = model()
    opt = torch.optim.SGD(net.parameters(), lr=config["lr"], momentum=config["momentum"])
    epoch = 0
    source = _checkpoint(ctx.checkpoint_dir) or _checkpoint(ctx.continue_from)
    if source is not None:
        state = torch.load(source, weights_only=True)
        net.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        epoch = int(state["epoch"])
    for group in opt.param_groups:  # this trial's own (PBT changes them)
        group["lr"], group["momentum"] = config["lr"], config["momentum"]
    x, y = splits["train"]
    batch = int(config["batch_size"])
    val = test = 0.0
    while epoch < int(config["epochs"]):
        net.train()
        order = torch.randperm(len(x))
        for i in range(0, len(x), batch):
            idx = order[i:i + batch]
            opt.zero_grad()
            nn.functional.cross_entropy(net(x[idx]), y[idx]).backward()
            opt.step()
        epoch += 1
        net.eval()
        val, test = accuracy(net, splits["val"]), accuracy(net, splits["test"])
        if ctx.checkpoint_dir:
            tmp = Path(ctx.checkpoint_dir) / (CHECKPOINT + ".tmp")
            torch.save({"model": net.state_dict(), "optimizer": opt.state_dict(),
                        "epoch": epoch}, tmp)
            os.replace(tmp, Path(ctx.checkpoint_dir) / CHECKPOINT)
        if config.get("log"):
            line = json.dumps({"t": time.time(), "val": val, "test": test, "epoch": epoch,
                               "config": {k: config[k] for k in
                                          ("lr", "momentum", "batch_size")}})
            with open(config["log"], "a") as f:  # one short append: whole lines
                f.write(line + "\n")
        ctx.report({"val_accuracy": val, "test_accuracy": test, "epoch": epoch},
                   step=epoch)
        if ctx.should_stop():
            break
    return {"val_accuracy": val, "test_accuracy": test}
