"""DDP's "no extra syncs" options in the spelling the installed torch offers.

A GPU node's preinstalled torch (2.4-2.12) lacks ``forward_sync_buffers``, which
torch 2.13 added; passing it there failed every multi-rank ``backend: torch`` trial
with a TypeError. The signatures below are copied from those releases' DDP."""

from __future__ import annotations

from typing import Any

from nestor.trainers.comm import ddp_no_sync_options


class Torch213DDP:  # torch 2.13: both names; the per-forward one is forward_sync_buffers
    def __init__(self, module: Any, device_ids: Any = None, broadcast_buffers: bool = True,
                 init_sync: bool = True, forward_sync_buffers: bool = True) -> None: ...


class Torch211DDP:  # torch 2.11-2.12 (2.6 has no init_sync)
    def __init__(self, module: Any, device_ids: Any = None, broadcast_buffers: bool = True,
                 init_sync: bool = True) -> None: ...


class Torch23DDP:  # torch 2.6 and older: no init_sync
    def __init__(self, module: Any, device_ids: Any = None,
                 broadcast_buffers: bool = True) -> None: ...


def test_each_release_gets_only_the_arguments_it_takes() -> None:
    assert ddp_no_sync_options(Torch213DDP) == {"forward_sync_buffers": False,
                                                "init_sync": False}
    assert ddp_no_sync_options(Torch211DDP) == {"broadcast_buffers": False, "init_sync": False}
    assert ddp_no_sync_options(Torch23DDP) == {"broadcast_buffers": False}


def test_the_installed_torch_accepts_what_is_chosen_for_it() -> None:
    import inspect

    from torch.nn.parallel import DistributedDataParallel

    options = ddp_no_sync_options(DistributedDataParallel)
    signature = inspect.signature(DistributedDataParallel.__init__)
    signature.bind(None, None, **options)
    # init_sync where this torch has it (2.11 and 2.13 do; 2.6 does not, checked on
    # the short run's torch 2.6 venv), and the per-forward buffer sync off either way.
    assert ("init_sync" in options) == ("init_sync" in signature.parameters)
    assert options.get("forward_sync_buffers", options.get("broadcast_buffers")) is False
