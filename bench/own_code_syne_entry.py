"""Syne Tune's entry point for ``bench/own_code_train.py:train`` (its local backend runs
a script per trial, passing the configuration as ``--name value`` and its checkpoint
folder as ``--st_checkpoint_dir``); reports go through Syne Tune's ``Reporter``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from syne_tune import Reporter

from bench.own_code_train import train


class SyneCtx:
    def __init__(self, checkpoint_dir: str | None) -> None:
        self.checkpoint_dir = checkpoint_dir
        self.continue_from = None  # a promoted trial finds its own in checkpoint_dir
        self._report = Reporter()

    def report(self, metrics: dict[str, float], step: int) -> None:
        self._report(**metrics)

    def should_stop(self) -> bool:
        return False  # Syne Tune stops a trial by killing its process


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--lr", type=float)
    p.add_argument("--momentum", type=float)
    p.add_argument("--batch_size", type=int)
    p.add_argument("--epochs", type=int)
    p.add_argument("--log")
    p.add_argument("--st_checkpoint_dir")
    a, _ = p.parse_known_args()
    if a.st_checkpoint_dir:
        Path(a.st_checkpoint_dir).mkdir(parents=True, exist_ok=True)
    train({"lr": a.lr, "momentum": a.momentum, "batch_size": a.batch_size,
           "epochs": a.epochs, "log": a.log}, SyneCtx(a.st_checkpoint_dir))
