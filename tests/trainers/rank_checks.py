"""Rank-side checks, run under horovodrun or torchrun by the tests:
``python rank_checks.py CHECK OUTDIR``.

Each rank writes ``OUTDIR/CHECK-<rank>.json``; the test reads and judges them.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any


def mp_equivalence(out: Path) -> dict[str, Any]:
    """mp = 2 against the unsplit model, same seed: forward output and every gradient."""
    import torch
    import torch.nn.functional as F

    from nestor.trainers.models import build_model, sharded_layers
    from nestor.trainers.parallel import setup

    par = setup(1, 2)
    archs = {
        # 63 units split 32 + 31: uneven shares; two split layers in a row.
        "mlp": {"trainer": "mlp", "image_shape": [1, 8, 8], "num_classes": 10, "width": 63,
                "depth": 3, "activation": "tanh", "dropout": 0.0, "channels": None},
        "cnn": {"trainer": "cnn", "image_shape": [1, 8, 8], "num_classes": 10, "width": 40,
                "depth": 2, "activation": "relu", "dropout": 0.0, "channels": 4},
    }
    report: dict[str, Any] = {"rank": par.rank, "mp_rank": par.mp_rank}
    for name, arch in archs.items():
        split = build_model(arch, par, seed=7)
        full = build_model(arch, None, seed=7)
        x = torch.randn(16, 1, 8, 8, generator=torch.Generator().manual_seed(1))
        y = torch.arange(16) % 10
        out_split, out_full = split(x), full(x)
        F.cross_entropy(out_split, y).backward()
        F.cross_entropy(out_full, y).backward()
        owners = sharded_layers(split)
        full_params = dict(full.named_parameters())
        grads = {}
        for pname, p in split.named_parameters():
            ref = full_params[pname].grad
            if pname in owners:
                ref = owners[pname].shard(ref)
            assert p.grad is not None, f"{name}: no gradient for {pname}"
            grads[pname] = {
                "max_diff": float((p.grad - ref).abs().max()),
                "scale": float(ref.abs().max()),
                "shape": list(p.shape),
                "full_shape": list(full_params[pname].shape),
            }
        report[name] = {
            "out_max_diff": float((out_split - out_full).detach().abs().max()),
            "out_scale": float(out_full.detach().abs().max()),
            "grads": grads,
        }
    return report


def _request(trial: str, dp: int, mp: int, checkpoint_dir: Path | None = None,
             **settings: Any) -> Any:
    from nestor.trainers import TrainerRef, TrialRequest

    base = {"dataset": "digits", "epochs": 2, "max_train_samples": 200}
    return TrialRequest(trial, TrainerRef.builtin("mlp"), settings={**base, **settings},
                        config={"width": 32, "batch_size": 20, "lr": 0.1},
                        data_parallel=dp, model_parallel=mp,
                        checkpoint_dir=str(checkpoint_dir) if checkpoint_dir else None)


def warm(out: Path) -> dict[str, Any]:
    """Successive trials of different shapes in the same two processes, as a warm gang runs them."""
    from nestor.trainers import TrainerRef, TrialRequest, run_trial

    results: dict[str, Any] = {}
    # Stopped after epoch 1 (as a killed trial would be), then restarted: the
    # restart resumes from the checkpoint, optimizer state included.
    for name, dp, mp in (("dp2", 2, 1), ("mp2", 1, 2)):
        request = _request(f"{name}-resume", dp, mp, checkpoint_dir=out / f"{name}-ckpt")
        results[f"{name}_stopped"] = run_trial(request, should_stop=lambda: True).to_dict()
        results[f"{name}_resumed"] = run_trial(request).to_dict()
    for name, request in [
        ("dp2", _request("a", 2, 1)),
        ("mp2", _request("b", 1, 2)),
        ("dp2_again", _request("c", 2, 1)),
        ("dp2_fp16", _request("d", 2, 1, fp16_allreduce=True)),
        # batch_size 10 per rank x 2 ranks is the global batch 20 of the others.
        ("dp2_per_rank", TrialRequest("i", TrainerRef.builtin("mlp"),
                                      settings={"dataset": "digits", "epochs": 2,
                                                "max_train_samples": 200,
                                                "batch_per_rank": True},
                                      config={"width": 32, "batch_size": 10, "lr": 0.1},
                                      data_parallel=2)),
        ("tiny_batch", TrialRequest("j", TrainerRef.builtin("mlp"), config={"batch_size": 1},
                                    data_parallel=2)),
        ("bad_option", TrialRequest("e", TrainerRef.builtin("mlp"),
                                    config={"widht": 3}, data_parallel=2)),
        ("wrong_size", _request("f", 2, 2)),
        ("function", TrialRequest("g", TrainerRef.python("nestor.trainers.examples:softmax_digits"),
                                  config={"epochs": 2}, data_parallel=2)),
        ("dp2_after_failures", _request("h", 2, 1)),
    ]:
        results[name] = run_trial(request).to_dict()
    from nestor.trainers.parallel import process_rank, setup

    results["rank"] = process_rank()
    results["backend"] = setup(2, 1).backend  # what the trials above ran on
    return results


HYBRID_SETTINGS = {"dataset": "digits", "epochs": 2, "max_train_samples": 160, "seed": 1}
HYBRID_CONFIG = {"width": 30, "depth": 2, "channels": 4, "batch_size": 32, "lr": 0.1,
                 "optimizer": "adam"}


def hybrid(out: Path) -> dict[str, Any]:
    """dp 2 x mp 2: one epoch, then a restart to two epochs from the checkpoint.

    The restart resumes split weights and split optimizer state (Adam's
    moments) in a dp x mp gang; the test compares the outcome with one
    unsplit process.
    """
    from nestor.trainers import TrainerRef, TrialRequest, run_trial

    results = {}
    for name, epochs in (("first", 1), ("resumed", 2)):
        request = TrialRequest("hybrid", TrainerRef.builtin("cnn"),
                               settings={**HYBRID_SETTINGS, "epochs": epochs},
                               config=HYBRID_CONFIG, data_parallel=2, model_parallel=2,
                               checkpoint_dir=str(out / "hybrid-ckpt"))
        results[name] = run_trial(request).to_dict()
    return results


CHECKS = {"mp_equivalence": mp_equivalence, "warm": warm, "hybrid": hybrid}

if __name__ == "__main__":
    check, outdir = sys.argv[1], Path(sys.argv[2])
    result = CHECKS[check](outdir)
    from nestor.trainers.parallel import exit_process, process_rank

    (outdir / f"{check}-{process_rank()}.json").write_text(json.dumps(result, default=str))
    exit_process(0)
