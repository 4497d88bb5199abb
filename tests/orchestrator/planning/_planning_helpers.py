"""Synthetic cost models for the planner's tests: every number known, no profile needed."""

from __future__ import annotations

from nestor.orchestrator.planning import CommParams, ComputeParams, CostModel, model_size


def synthetic_model(*, width: int = 512, channels: int = 32, per_sample: float = 1e-3,
                    split_share: float = 0.5, alpha: float = 1e-4, beta: float = 1e-9,
                    gamma: float = 0.0, skew: float = 0.0, contention: float = 0.0,
                    train_samples: int = 4000, cores: int = 1024) -> CostModel:
    size = model_size("cnn", {"dataset": "mnist5k", "width": width, "depth": 1,
                              "channels": channels, "optimizer": "momentum", "classes": None})
    compute = ComputeParams(1e-3, 0.0, per_sample * (1 - split_share), per_sample * split_share,
                            contention)
    return CostModel(size, compute, CommParams(alpha, beta, gamma, "ring", skew), train_samples,
                     cores_per_node=cores)
