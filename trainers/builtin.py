"""The training loop of the built-in trainers (``mlp``, ``cnn``), for any dp x mp.

Every rank runs this same function, over Horovod or torch.distributed
(trainers.comm). Data parallelism: gradients are averaged over the rank's
data-parallel group (Horovod's `DistributedOptimizer`, or torch's
`DistributedDataParallel`; optionally compressed to fp16); parameters and
optimizer state start equal by broadcast. Model parallelism: the wide layers
are `ShardedLinear`s (see models.py). With both, gradients of split weights
are averaged only over their data-parallel group (the ranks holding the same
shard); replicated weights get the same average in every group, since the
ranks of a model-parallel group compute identical gradients for them.

Losses are weighted so that the average over data-parallel ranks is the
mean over the global batch: with the dp-independent batches of data.py,
dp = 2 follows dp = 1's loss curve up to float rounding.
"""

from __future__ import annotations

import math
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from nestor.trainers import checkpoint as ckpt
from nestor.trainers._types import (
    Heartbeat,
    Report,
    ResultStatus,
    ShouldStop,
    TrialRequest,
    TrialResult,
)
from nestor.trainers.catalog import resolve_options
from nestor.trainers.data import epoch_batches, shard_slice, splits_of, steps_per_epoch
from nestor.trainers.feed import Feed
from nestor.trainers.gpu import (
    autocast,
    device_metrics,
    gpu_share,
    grad_scaler,
    resolve_precision,
    select_device,
)
from nestor.trainers.models import build_model, freeze_groups, make_arch
from nestor.trainers.parallel import Parallel, allreduce_sum, broadcast_flag

EVAL_CHUNK = 1000


class TrialFailed(Exception):
    """A trial cannot go on; its message becomes the TrialResult's reason."""


def _set_threads(par: Parallel) -> None:
    # Ranks on one node share its cores; oversubscribed intra-op threads make
    # data-parallel CPU runs slower than one rank. OMP_NUM_THREADS wins if set.
    if "OMP_NUM_THREADS" not in os.environ:
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // max(1, par.local_size)))


def device_for(par: Parallel) -> torch.device:
    """The rank's GPU (by local rank) where it has one it can use, else the CPU; a rank
    granted a GPU that cannot use it fails instead (trainers.gpu)."""
    return select_device(par)


def make_optimizer(options: dict[str, Any], params: list[torch.nn.Parameter],
                   lr: float) -> torch.optim.Optimizer:
    name, wd, momentum = options["optimizer"], options["weight_decay"], options["momentum"]
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr, weight_decay=wd)
    if name == "momentum":
        return torch.optim.SGD(params, lr=lr, momentum=momentum, weight_decay=wd)
    if name == "nesterov":
        return torch.optim.SGD(params, lr=lr, momentum=momentum, nesterov=True, weight_decay=wd)
    if name == "adam":
        return torch.optim.Adam(params, lr=lr, weight_decay=wd)
    if name == "adamw":
        return torch.optim.AdamW(params, lr=lr, weight_decay=wd)
    if name == "rmsprop":
        return torch.optim.RMSprop(params, lr=lr, momentum=momentum, weight_decay=wd)
    raise ValueError(f"optimizer must be one of sgd, momentum, nesterov, adam, adamw, rmsprop,"
                     f" but got {name!r}")


def scaled_lr(options: dict[str, Any], dp: int) -> float:
    """lr after scaling with the data-parallel size: none, x dp, or x sqrt(dp)."""
    factor = {"none": 1.0, "linear": float(dp), "sqrt": math.sqrt(dp)}[options["lr_scaling"]]
    return options["lr"] * factor


def warmup_factor(step: int, warmup_steps: int) -> float:
    """Linear warm-up per step: 1/W, 2/W, ... 1 over the first W steps, then 1."""
    return 1.0 if warmup_steps <= 0 else min(1.0, (step + 1) / warmup_steps)


def _broadcast(model: torch.nn.Module, optimizer: Any, par: Parallel) -> None:
    """Start every rank of a data-parallel group from its root's weights and state.

    Per data-parallel group, not globally: split weights differ across a
    model-parallel group. A fresh optimizer has no state to send."""
    comm = par.comm
    for name, tensor in sorted(model.state_dict().items()):
        comm.broadcast_(tensor, par.dp_root, par.dp_set, f"bcast.{name}")
    for index, entry in sorted(optimizer.state_dict()["state"].items()):
        for key, value in sorted(entry.items()):
            if torch.is_tensor(value) and value.dim() > 0:
                comm.broadcast_(value, par.dp_root, par.dp_set, f"bcast.opt.{index}.{key}")


def _evaluate(model: torch.nn.Module, x: np.ndarray, y: np.ndarray, par: Parallel,
              device: torch.device, name: str, precision: str = "fp32") -> tuple[float, float]:
    """Mean loss and accuracy over a split; each data-parallel rank takes a share.

    Sums stay on the device; the host reads them once, at the end."""
    model.eval()
    own = shard_slice(len(y), par.dp_rank, par.dp)
    sums = torch.zeros(2, dtype=torch.float64, device=device)  # loss, correct
    with torch.no_grad(), autocast(precision, device):
        for start in range(own.start, own.stop, EVAL_CHUNK):
            stop = min(start + EVAL_CHUNK, own.stop)
            xb = torch.from_numpy(x[start:stop]).to(device)
            yb = torch.from_numpy(y[start:stop]).to(device)
            out = model(xb).float()
            sums[0] += F.cross_entropy(out, yb, reduction="sum")
            sums[1] += (out.argmax(1) == yb).sum()
    loss_sum, correct = sums.tolist()
    loss_sum, correct, count = allreduce_sum([loss_sum, correct, float(own.stop - own.start)],
                                             par, par.dp_set, f"eval.{name}")
    if count == 0:
        return math.nan, math.nan
    return loss_sum / count, correct / count


def _step(optimizer: Any, scaler: Any) -> None:
    """One optimizer step through the loss scaler (a plain step unless fp16).

    Horovod's DistributedOptimizer reduces gradients asynchronously: under fp16
    they are unscaled only once reduced (its synchronize), then stepped without
    reducing again, as Horovod's mixed-precision example does."""
    if scaler.is_enabled() and hasattr(optimizer, "synchronize"):
        optimizer.synchronize()
        scaler.unscale_(optimizer)
        with optimizer.skip_synchronize():
            scaler.step(optimizer)
    else:
        scaler.step(optimizer)
    scaler.update()


def run_builtin(request: TrialRequest, par: Parallel, report: Report | None,
                should_stop: ShouldStop | None,
                heartbeat: Heartbeat | None = None) -> TrialResult:
    """Train one trial of a built-in trainer in this rank; see trainers.run_trial."""
    started = time.perf_counter()
    trainer = request.trainer.name or ""
    options = resolve_options(trainer, request.settings, request.config)
    _set_threads(par)
    device = device_for(par)
    precision = resolve_precision(options["precision"], device)
    splits = splits_of(options)
    global_batch = options["batch_size"] * (par.dp if options["batch_per_rank"] else 1)
    if global_batch < par.dp:
        raise TrialFailed(
            f"batch_size must be at least the data-parallel size ({par.dp}), but got"
            f" {options['batch_size']}"
        )
    arch = make_arch(trainer, options, splits.image_shape, splits.num_classes)
    model = build_model(arch, par, seed=options["seed"]).to(device)

    history: list[dict[str, float]] = []
    start_epoch = 0
    saved_optimizer = None
    latest = ckpt.latest_checkpoint(request.checkpoint_dir)
    if par.comm is not None and par.size > 1:
        # Rank 0 decides which checkpoint to resume from: on a shared file
        # system another rank might see an older listing.
        chosen = par.comm.broadcast_object(str(latest) if latest else None, 0, "ckpt.latest")
        latest = Path(chosen) if chosen else None
    if latest is None and request.continue_from:  # another trial's: carry on from it
        latest = ckpt.resolve_source(request.continue_from)
    if latest is not None:
        payload = ckpt.load_checkpoint(latest)
        if payload["arch"] != arch:
            raise TrialFailed(
                f"checkpoint_dir {request.checkpoint_dir} holds a checkpoint of another model"
                f" ({payload['arch']}), not {arch}; use a fresh directory or init_from"
            )
        ckpt.load_weights(model, payload, freeze=request.freeze)
        start_epoch, history = int(payload["epoch"]), list(payload.get("history", []))
        saved_optimizer = payload.get("optimizer")
    elif request.init_from:
        source = request.init_from if isinstance(request.init_from, str) else \
            ckpt.mean_weights(request.init_from, request.init_groups or ("features",))
        ckpt.load_weights(model, source, groups=request.init_groups, freeze=request.freeze)
    else:
        freeze_groups(model, request.freeze)

    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    if not named:
        raise TrialFailed(f"freeze {list(request.freeze)} leaves no parameters to train")
    lr = scaled_lr(options, par.dp)
    optimizer: Any = make_optimizer(options, [p for _, p in named], lr)
    net: torch.nn.Module = model  # what trains: the model, or DDP's wrapper of it
    if par.dp > 1:
        net, optimizer = par.comm.data_parallel(model, optimizer, named, par.dp_set,
                                                options["fp16_allreduce"])
    names = [n for n, _ in named]
    if saved_optimizer is not None:
        ckpt.load_optimizer_state(optimizer, saved_optimizer, names, model)
    if par.dp > 1:
        _broadcast(model, optimizer, par)

    n_train = len(splits.train)
    steps = steps_per_epoch(n_train, global_batch, par.dp)
    warmup_steps = options["warmup_epochs"] * steps
    feed = Feed(splits.train.x, splits.train.y, device, gpu_share())
    scaler = grad_scaler(precision, device)
    last_checkpoint = str(latest) if latest is not None else None
    stopped = False
    epochs = options["epochs"]

    for epoch in range(start_epoch, epochs):
        model.train()
        torch.manual_seed(int(np.random.SeedSequence([options["seed"], epoch, par.dp_rank])
                              .generate_state(1)[0]))
        tick = time.perf_counter()
        # Summed on the device and read once per epoch: a read per step would make
        # the host wait for the GPU at every step.
        loss_total = torch.zeros((), dtype=torch.float64, device=device)
        count = samples = 0
        for step, (idx, batch_size) in enumerate(epoch_batches(
                n_train, global_batch, seed=options["seed"], epoch=epoch, rank=par.dp_rank,
                size=par.dp)):
            for group in optimizer.param_groups:
                group["lr"] = lr * warmup_factor(epoch * steps + step, warmup_steps)
            xb, yb = feed.batch(idx)
            with autocast(precision, device):
                out = net(xb)
            batch_loss = F.cross_entropy(out.float(), yb, reduction="sum")
            optimizer.zero_grad()
            scaler.scale(batch_loss * (par.dp / batch_size)).backward()
            _step(optimizer, scaler)
            if heartbeat is not None and par.is_root:
                heartbeat()
            loss_total += batch_loss.detach()
            count += len(idx)
            samples += batch_size
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        epoch_time = time.perf_counter() - tick
        loss_sum, count = allreduce_sum([float(loss_total), float(count)], par, par.dp_set,
                                        "train.loss")
        train_loss = loss_sum / max(count, 1.0)
        val_loss, val_accuracy = _evaluate(model, splits.val.x, splits.val.y, par, device, "val",
                                           precision)
        metrics = {
            "epoch": epoch + 1,
            "train_loss": train_loss,
            "val_loss": val_loss,
            "val_accuracy": val_accuracy,
            "samples_per_second": samples / epoch_time if epoch_time > 0 else math.nan,
            "epoch_time": epoch_time,
            "lr": float(optimizer.param_groups[0]["lr"]),
        }
        history.append(metrics)
        if not math.isfinite(train_loss):
            raise TrialFailed(f"training diverged: train loss is {train_loss} at epoch"
                              f" {epoch + 1} (lr {lr:g}); lower lr")
        if request.checkpoint_dir is not None:
            full_model = ckpt.full_state_dict(model, par) if par.dp_rank == 0 else None
            full_opt = (ckpt.full_optimizer_state(optimizer, names, model, par)
                        if par.dp_rank == 0 else None)
            if par.is_root:
                path = ckpt.save_checkpoint(request.checkpoint_dir, {
                    "epoch": epoch + 1, "arch": arch, "model": full_model,
                    "optimizer": full_opt, "options": options, "history": history,
                    "trial_id": request.trial_id,
                })
                last_checkpoint = str(path)
        if par.is_root and report is not None:
            report(dict(metrics), epoch + 1)
        wants_stop = bool(should_stop()) if (par.is_root and should_stop is not None) else False
        # Always collective, so ranks that were given no should_stop stay in step.
        if broadcast_flag(wants_stop, par, "should_stop"):
            stopped = epoch + 1 < epochs
            break

    test_loss, test_accuracy = _evaluate(model, splits.test.x, splits.test.y, par, device,
                                         "test", precision)
    final: dict[str, float] = {}
    if history:
        last = history[-1]
        final.update({k: last[k] for k in ("train_loss", "val_loss", "val_accuracy")})
        final["samples_per_second"] = float(np.mean([h["samples_per_second"] for h in history]))
        final["epochs"] = float(last["epoch"])
    if not math.isnan(test_accuracy):
        final["test_accuracy"], final["test_loss"] = test_accuracy, test_loss
    final["wall_time"] = time.perf_counter() - started
    final.update(device_metrics(device))
    return TrialResult(
        trial_id=request.trial_id, status=ResultStatus.OK, metrics=final, history=history,
        stopped_early=stopped, checkpoint=last_checkpoint, resumed_from_epoch=start_epoch,
    )
