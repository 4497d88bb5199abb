"""Which device a rank trains on, and why a rank granted a GPU never falls back to the CPU.

A GPU node set up with the CPU build of torch, a driver torch cannot use, or a
Horovod built without NCCL would otherwise train every trial on the CPU, slowly
and in silence, while the GPUs it holds sit idle. So a rank whose gang was
granted GPUs (``NESTOR_GPU_GRANTED``, set by orchestrator.backends.ray.gangs) and cannot use
one fails its trial, naming the check that failed and `nestor doctor`. A rank
outside a gang (``python -m nestor.trainers``) takes a usable GPU if there is one, else
the CPU, as before.

Every Python trainer nestor starts (built-in and function trainers) gets its
device here: ``set_device(local rank)`` so that ``model.cuda()`` lands on the
rank's own GPU, the memory cap of a packed rank, and TF32 matmuls. Every trial,
command trials too (from the GPU nestor gave the command), records its device
through :func:`gpu_metrics`.
"""

from __future__ import annotations

import os
import sys
from typing import Any

GRANTED_ENV = "NESTOR_GPU_GRANTED"  # "1" in every rank of a gang that holds GPUs
SHARE_ENV = "NESTOR_GPU_SHARE"      # the share of its GPU a packed rank holds (below 1)
DOCTOR = "run `nestor doctor` on this node to see what is wrong"


class GpuUnusable(Exception):
    """A rank was granted a GPU but cannot train on one; the message says which check
    failed. Its message becomes the trial's reason."""


def gpu_granted(environ: Any = None) -> bool:
    """Was this rank's gang granted GPUs?"""
    environ = os.environ if environ is None else environ
    return environ.get(GRANTED_ENV) == "1"


# The device nodes a GPU driver makes (NVIDIA's, AMD ROCm's): without either, and not
# granted a GPU, a rank trains on the CPU, known without importing torch.
GPU_DRIVER_NODES = ("/dev/nvidiactl", "/dev/kfd")


def surely_cpu(environ: Any = None) -> bool:
    """Whether this rank can only train on the CPU, known without importing torch
    (about 1.5 s, once a rank process): not granted a GPU, torch not yet imported, and
    no GPU driver on the node. A function trial that never touches torch then does not
    pay for it (its ``ctx.device`` is resolved when first asked)."""
    return (not gpu_granted(environ) and "torch" not in sys.modules
            and not any(os.path.exists(node) for node in GPU_DRIVER_NODES))


def gpu_share(environ: Any = None) -> float:
    """The share of its GPU this rank was given (``resources.gpus_per_trial``; 1: all)."""
    environ = os.environ if environ is None else environ
    return float(environ.get(SHARE_ENV) or 1.0)


def gpu_problem(par: Any) -> str | None:
    """Why this rank cannot train on a GPU (the first check that fails), or None."""
    import torch

    if not torch.version.cuda:
        return f"torch {torch.__version__} is a CPU-only build (torch.version.cuda is None)"
    if not torch.cuda.is_available():
        seen = os.environ.get("CUDA_VISIBLE_DEVICES")
        return (f"torch.cuda.is_available() is False (CUDA {torch.version.cuda} build,"
                f" CUDA_VISIBLE_DEVICES={seen!r}): no usable GPU or driver")
    comm = getattr(par, "comm", None)
    if comm is not None and par.size > 1 and not comm.gpu_tensors():
        if comm.backend == "horovod":
            return ("Horovod was built without NCCL (horovod.torch.nccl_built() is 0), so its"
                    " collectives cannot take GPU tensors")
        return "torch.distributed's process group has no NCCL backend for GPU tensors"
    return None


def select_device(par: Any) -> Any:
    """This rank's device, made current: ``cuda:<local rank>`` (``cuda:0`` for a packed
    rank, which sees only its own GPU), else the CPU where no GPU was granted.

    Raises GpuUnusable where a GPU was granted and cannot be used."""
    import torch

    granted = gpu_granted()
    problem = gpu_problem(par) if (granted or torch.cuda.is_available()) else "no GPU"
    if problem is not None:
        if granted:
            raise GpuUnusable(f"this rank was granted a GPU but cannot use it: {problem};"
                              f" {DOCTOR}")
        return torch.device("cpu")
    share = gpu_share()
    # A rank that shares its GPU sees only that one; else local rank i has cuda:i.
    index = 0 if share < 1 else par.local_rank % torch.cuda.device_count()
    torch.cuda.set_device(index)
    if share < 1:  # packed with other trials: a runaway one fails alone, not all
        torch.cuda.set_per_process_memory_fraction(share, index)
    # TF32 tensor cores for float32 matmuls and convolutions (Ampere and newer).
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    return torch.device("cuda", index)


def device_metrics(device: Any) -> dict[str, float]:
    """What a trial records of the torch device its rank 0 trained on (see gpu_metrics);
    None: a device never resolved, the CPU (:func:`surely_cpu`)."""
    on_gpu = getattr(device, "type", "cpu") == "cuda"
    return gpu_metrics((device.index or 0) if on_gpu else None)


def gpu_metrics(index: int | None) -> dict[str, float]:
    """What every trial records of its device, whatever its trainer kind (numbers, so
    they reach the journal and MLflow as metrics): ``device_gpu`` 1 on a GPU and 0 on
    the CPU, ``device_index`` the CUDA index of rank 0's GPU (``cuda:<local rank>``
    among the GPUs its rank sees), -1 on the CPU (``index`` None)."""
    return {"device_gpu": 0.0 if index is None else 1.0,
            "device_index": -1.0 if index is None else float(index)}


PRECISIONS = ("auto", "bf16", "fp16", "fp32")


def resolve_precision(asked: str, device: Any) -> str:
    """The built-in trainers' ``precision`` on this device: ``auto`` is bf16 on a GPU
    that supports it (Ampere and newer), else fp32; fp16 needs a GPU (its GradScaler).

    >>> import torch
    >>> resolve_precision("auto", torch.device("cpu"))
    'fp32'
    """
    import torch

    if asked not in PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, but got {asked!r}")
    on_gpu = getattr(device, "type", "cpu") == "cuda"
    if asked == "auto":
        return "bf16" if on_gpu and torch.cuda.is_bf16_supported() else "fp32"
    if asked == "fp16" and not on_gpu:
        raise ValueError("precision fp16 needs a GPU (a GradScaler keeps its small gradients),"
                         " but this rank trains on the CPU; use bf16 or fp32")
    return asked


def autocast(precision: str, device: Any) -> Any:
    """The forward pass's mixed-precision context (disabled for fp32)."""
    import torch

    dtype = torch.float16 if precision == "fp16" else torch.bfloat16
    return torch.autocast(device.type, dtype=dtype, enabled=precision != "fp32")


def grad_scaler(precision: str, device: Any) -> Any:
    """fp16's loss scaler (a no-op for bf16 and fp32, whose range needs none)."""
    import torch

    return torch.amp.GradScaler(device.type, enabled=precision == "fp16")
