"""Batches to the rank's device without making the GPU wait on the host.

A batch gathered from a NumPy array sits in pageable memory, and a copy from
pageable memory to a GPU is synchronous however it is asked for. So on a GPU a
training split small enough (a quarter of the rank's share of the GPU's memory:
``DEVICE_SHARE``) is copied to the GPU once and each batch is gathered there;
a larger one is gathered on the host into pinned memory and copied
asynchronously. On the CPU a batch is the NumPy rows, as before.
"""

from __future__ import annotations

import numpy as np
import torch

DEVICE_SHARE = 0.25  # of the rank's GPU memory (its share of it when packed)


def fits_on_device(nbytes: int, total_memory: int, gpu_share: float = 1.0) -> bool:
    """Is a split of ``nbytes`` kept on a GPU of ``total_memory`` bytes (this share of it)?

    >>> fits_on_device(2 * 2**30, 80 * 2**30)   # 2 GiB of 80
    True
    >>> fits_on_device(2 * 2**30, 80 * 2**30, gpu_share=0.0625)  # of a 5 GiB share
    False
    """
    return nbytes <= DEVICE_SHARE * total_memory * gpu_share


class Feed:
    """One split's batches on ``device``: ``feed.batch(indices) -> (x, y)``."""

    def __init__(self, x: np.ndarray, y: np.ndarray, device: torch.device,
                 gpu_share: float = 1.0) -> None:
        self.x, self.y, self.device = x, y, device
        self.on_gpu = device.type == "cuda"
        self.on_device = False
        if self.on_gpu:
            total = torch.cuda.get_device_properties(device).total_memory
            self.on_device = fits_on_device(x.nbytes + y.nbytes, total, gpu_share)
        if self.on_device:
            self.x_dev = torch.from_numpy(x).to(device)
            self.y_dev = torch.from_numpy(y).to(device)

    def batch(self, idx: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        if self.on_device:
            where = torch.from_numpy(idx).pin_memory().to(self.device, non_blocking=True)
            return self.x_dev.index_select(0, where), self.y_dev.index_select(0, where)
        xb, yb = torch.from_numpy(self.x[idx]), torch.from_numpy(self.y[idx])
        if not self.on_gpu:
            return xb, yb
        return (xb.pin_memory().to(self.device, non_blocking=True),
                yb.pin_memory().to(self.device, non_blocking=True))

