"""Function trainers for the GPU readiness tests (tests/trainers/test_gpu_readiness.py):
they record what the rank saw, without touching a GPU."""

from __future__ import annotations

from typing import Any

SEEN: list[dict[str, Any]] = []


def record_device(config: dict[str, Any], ctx: Any) -> dict[str, float]:
    import torch

    SEEN.append({"device": ctx.device, "current": torch.cuda.current_device()})
    return {"val_accuracy": 1.0}
