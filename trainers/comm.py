"""The collectives a trial's ranks use, over Horovod or over torch.distributed.

Horovod is the default the mission names; it is also unmaintained (0.28.1,
2023) and needs source patches to build against torch 2.x. So the same
trainer code runs on either backend through one small surface: :class:`Comm`.
Its two implementations differ only where the libraries do:

- groups: a Horovod dynamic process set, or a ``torch.distributed`` group
  (both are created collectively, by every rank, in one order);
- data parallelism: Horovod's ``DistributedOptimizer`` (it averages gradients
  as they are ready) or torch's ``DistributedDataParallel`` (it wraps the
  model, and averages bucketed gradients in backward); both average over the
  data-parallel group, so a trial trains the same on either;
- uneven ``allgather`` (model-parallel shares of 32 + 31 features): Horovod
  gathers tensors whose first dimensions differ; torch's Gloo does not, so
  :class:`TorchComm` pads to the largest and trims.

Every ``root`` is a global rank; every ``group`` is what :meth:`Comm.group`
returned (None: this rank alone, so nothing to communicate).

A backend is named once, by its class (``backend = "torch"``), and registers with
``@register``: :data:`BACKENDS` maps each name to its class, and everything that lists
the backends reads it (the spec's ``backend`` field, `nestor sweep --backend` and its
help, ``python -m nestor.trainers --backend``, :class:`~orchestrator.backends.shape.Shape`).
What the rest of nestor does differently per backend it reads from the class's
traits: how its ranks meet (``rendezvous``), how the planner's profiler launches
ranks on one machine (:meth:`Comm.launcher`), how a rank joins (:meth:`Comm.connect`).
So a backend whose ranks meet as torch's do (rank, size and a port or file store from
the gang) is its class alone; modules registered under the ``nestor.comm``
entry-point group are loaded too (a backend that lives outside nestor).
"""

from __future__ import annotations

import atexit
import contextlib
import datetime
import os
import sys
from pathlib import Path
from typing import Any, ClassVar, TypeVar

BACKENDS: dict[str, type[Comm]] = {}
"""Name -> the :class:`Comm` that runs it, in the order registered (:func:`register`)."""
DEFAULT_BACKEND = "horovod"
ENTRY_POINTS = "nestor.comm"
# How a gang's ranks meet (Comm.rendezvous): "env", through the NESTOR_GANG_* variables
# below (rank, size, and a port on rank 0's node or a file store), set by the gang;
# "horovod", through Horovod's own coordinator (orchestrator.backends.ray.gangs).
RENDEZVOUS = ("env", "horovod")
# Set in each rank of a gang by the orchestrator (orchestrator.backends.ray.gangs): which
# backend the gang was started for, and (torch) who the rank is and where the
# ranks meet. A command trainer's program sees none of them (trainers.command).
BACKEND_ENV = "NESTOR_GANG_COMM"
RANK_ENV, SIZE_ENV = "NESTOR_GANG_RANK", "NESTOR_GANG_SIZE"
LOCAL_RANK_ENV, LOCAL_SIZE_ENV = "NESTOR_GANG_LOCAL_RANK", "NESTOR_GANG_LOCAL_SIZE"
ADDR_ENV, PORT_ENV = "NESTOR_GANG_ADDR", "NESTOR_GANG_PORT"  # rank 0's node, its free port
# A gang on one node meets through a file store in a private folder instead: torch's
# TCPStore listens on every address of rank 0's node and takes no bind address.
STORE_ENV = "NESTOR_GANG_STORE"
# How long a torch collective waits for a peer before it fails (Horovod's
# counterpart is HOROVOD_STALL_SHUTDOWN_TIME_SECONDS, set by the gang too).
TIMEOUT_ENV = "NESTOR_COLLECTIVE_TIMEOUT_S"
DEFAULT_TIMEOUT_S = 300


def backend_from_env(backend: str | None = None) -> str:
    """``backend`` if given, else the gang's (``NESTOR_GANG_COMM``), else Horovod."""
    chosen = backend or os.environ.get(BACKEND_ENV) or DEFAULT_BACKEND
    comm_class(chosen)  # a name no backend has is refused, naming those there are
    return chosen


C = TypeVar("C", bound="type[Comm]")


def register(cls: C) -> C:
    """Class decorator: ``cls`` is the backend its ``backend`` attribute names."""
    name = cls.backend
    if not name:
        raise TypeError(f"{cls.__qualname__} must name its backend (backend = 'name')")
    if cls.rendezvous not in RENDEZVOUS:
        raise ValueError(f"{cls.__qualname__}.rendezvous must be one of"
                         f" {', '.join(RENDEZVOUS)}, but got {cls.rendezvous!r}")
    known = BACKENDS.get(name)
    if known is not None and (known.__module__, known.__qualname__) != (
            cls.__module__, cls.__qualname__):
        raise ValueError(f"backend {name!r} is taken by {known.__module__}.{known.__qualname__}")
    BACKENDS[name] = cls
    return cls


_discovered = False


def discover() -> None:
    """Load the modules registered under the ``nestor.comm`` entry-point group once (each
    registers its backends as the built-in ones here do)."""
    global _discovered
    if _discovered:
        return
    _discovered = True
    from importlib.metadata import entry_points

    for point in entry_points(group=ENTRY_POINTS):
        point.load()


def comm_class(backend: str) -> type[Comm]:
    """The class of the backend called ``backend`` (a ValueError names the known ones)."""
    discover()
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {', '.join(BACKENDS)}, but got {backend!r}")
    return BACKENDS[backend]


def backend_names() -> tuple[str, ...]:
    """Every backend's name, the built-in ones first."""
    discover()
    return tuple(BACKENDS)


class Comm:
    """One process's view of its trial's ranks, and the collectives among them.

    A backend subclasses it, names itself (``backend``), says what it is in a line
    (``about``: `nestor sweep --help`) and how its ranks meet (``rendezvous``), and
    registers (``@register``)."""

    backend: ClassVar[str] = ""
    about: ClassVar[str] = ""
    rendezvous: ClassVar[str] = "env"
    # Its collectives take bfloat16 tensors (Horovod 0.28's do not: they are sent as float).
    bfloat16: ClassVar[bool] = True

    @classmethod
    def connect(cls, current: Comm | None) -> Comm:
        """This process's comm, initialising the backend the first time (``current``:
        the one made before in this process, or None)."""
        raise NotImplementedError

    @classmethod
    def launched_size(cls) -> int:
        """Ranks a launcher (a gang, or the backend's own) started; 1 if none."""
        return torch_launched_size()

    @classmethod
    def alone(cls) -> Comm | None:
        """The comm of a one-rank trial no launcher started (None: it needs none)."""
        return None

    @classmethod
    def launcher(cls, ranks: int, module_args: list[str]) -> list[str]:
        """``python -m ...`` as ``ranks`` ranks of this backend on this machine (the
        planner's profiler): torchrun's, by default."""
        return [sys.executable, "-m", "torch.distributed.run", "--standalone",
                "--nproc_per_node", str(ranks), *module_args]

    def close(self) -> bool:
        """Before a launched rank exits: wait for its peers where leaving first would
        break them; True: then leave at once (``os._exit``), the interpreter's own
        teardown would break what is still alive. Nothing, False, by default."""
        return False

    def size(self) -> int:
        raise NotImplementedError

    def rank(self) -> int:
        raise NotImplementedError

    def local_rank(self) -> int:
        raise NotImplementedError

    def local_size(self) -> int:
        raise NotImplementedError

    def group(self, ranks: tuple[int, ...]) -> Any:
        """The group of ``ranks``, made (collectively) the first time it is asked for."""
        raise NotImplementedError

    def gpu_tensors(self) -> bool:
        """Can its collectives take CUDA tensors (NCCL), or only CPU ones (Gloo)?"""
        raise NotImplementedError

    def allreduce_sum(self, tensor: Any, group: Any, name: str) -> Any:
        raise NotImplementedError

    def allreduce_mean(self, tensors: list[Any], group: Any, name: str) -> list[Any]:
        """Average several tensors over ``group`` (a data-parallel gradient step)."""
        raise NotImplementedError

    def allgather(self, tensor: Any, group: Any, name: str,
                  lengths: list[int] | None = None) -> Any:
        """The group's tensors concatenated along dim 0, in rank order; their first
        dimensions may differ. ``lengths``: those dimensions where the caller knows
        them already (a split layer's widths), so none need be exchanged."""
        raise NotImplementedError

    def broadcast_(self, tensor: Any, root: int, group: Any, name: str) -> None:
        """Overwrite ``tensor`` in place with global rank ``root``'s."""
        raise NotImplementedError

    def broadcast_object(self, obj: Any, root: int, name: str) -> Any:
        raise NotImplementedError

    def allgather_object(self, obj: Any, name: str) -> list[Any]:
        raise NotImplementedError

    def data_parallel(self, model: Any, optimizer: Any, named: list[tuple[str, Any]],
                      group: Any, fp16: bool) -> tuple[Any, Any]:
        """(what to call forward on, what to step) so that gradients are averaged over
        the data-parallel ``group``; ``fp16`` compresses what is sent."""
        raise NotImplementedError


_LAUNCHER_SIZE_VARS = ("HOROVOD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE")


@register
class HorovodComm(Comm):
    """``horovod.torch`` with dynamic process sets (one init per process)."""

    backend = "horovod"
    about = "Horovod"
    rendezvous = "horovod"
    bfloat16 = False  # Horovod 0.28 has no bfloat16 collectives

    def __init__(self, hvd: Any) -> None:
        self.hvd = hvd
        self._sets: dict[tuple[int, ...], Any] = {}

    @classmethod
    def connect(cls, current: Comm | None) -> Comm:
        try:
            import horovod.torch as hvd
        except ImportError as exc:  # pragma: no cover - depends on the install
            raise ImportError(
                "data or model parallelism on the horovod backend needs Horovod built with"
                " PyTorch (horovod.torch); run scripts/setup.sh, or use backend: torch"
            ) from exc
        if hvd.is_initialized() and os.environ.get("HOROVOD_DYNAMIC_PROCESS_SETS") != "1":
            # Someone (a launcher's wrapper, user code) initialised Horovod without
            # dynamic process sets: start it again with them.
            hvd.shutdown()
            current = None
        if not hvd.is_initialized():
            current = None
            hvd.init(process_sets="dynamic")
        return current if current is not None else cls(hvd)

    @classmethod
    def launched_size(cls) -> int:
        for name in _LAUNCHER_SIZE_VARS:
            if os.environ.get(name, "").isdigit():
                return int(os.environ[name])
        return 1

    @classmethod
    def alone(cls) -> Comm | None:
        """A one-rank Horovod someone already initialised (user code may call hvd):
        only one already imported can be, so none is imported to ask (horovod.torch
        imports torch: about 1.5 s, once a rank process)."""
        maybe_hvd = sys.modules.get("horovod.torch")
        if maybe_hvd is not None and maybe_hvd.is_initialized() and maybe_hvd.size() == 1:
            return cls(maybe_hvd)
        return None

    @classmethod
    def launcher(cls, ranks: int, module_args: list[str]) -> list[str]:
        horovodrun = str(Path(sys.executable).parent / "horovodrun")
        return [horovodrun, "-np", str(ranks), "-H", f"localhost:{ranks}", "--gloo",
                sys.executable, *module_args]

    def size(self) -> int:
        return int(self.hvd.size())

    def rank(self) -> int:
        return int(self.hvd.rank())

    def local_rank(self) -> int:
        return int(self.hvd.local_rank())

    def local_size(self) -> int:
        return int(self.hvd.local_size())

    def group(self, ranks: tuple[int, ...]) -> Any:
        if len(ranks) == 1:
            return None
        if len(ranks) == self.size():
            return self.hvd.global_process_set
        existing = self._sets.get(ranks)
        if existing is None or existing.process_set_id is None:
            existing = self.hvd.add_process_set(list(ranks))
            self._sets[ranks] = existing
        return existing

    def gpu_tensors(self) -> bool:
        # NCCL, as `nestor doctor` checks: a CUDA-built Horovod without NCCL stages GPU
        # tensors through the host for its (Gloo/MPI) collectives.
        return bool(self.hvd.nccl_built())

    def allreduce_sum(self, tensor: Any, group: Any, name: str) -> Any:
        return self.hvd.allreduce(tensor, op=self.hvd.Sum, name=name,
                                  process_set=self._set(group))

    def allreduce_mean(self, tensors: list[Any], group: Any, name: str) -> list[Any]:
        return self.hvd.grouped_allreduce(tensors, op=self.hvd.Average, name=name,
                                          process_set=self._set(group))

    def allgather(self, tensor: Any, group: Any, name: str,
                  lengths: list[int] | None = None) -> Any:
        return self.hvd.allgather(tensor, name=name, process_set=self._set(group))

    def broadcast_(self, tensor: Any, root: int, group: Any, name: str) -> None:
        self.hvd.broadcast_(tensor, root_rank=root, name=name, process_set=self._set(group))

    def broadcast_object(self, obj: Any, root: int, name: str) -> Any:
        return self.hvd.broadcast_object(obj, root_rank=root, name=name)

    def allgather_object(self, obj: Any, name: str) -> list[Any]:
        return list(self.hvd.allgather_object(obj, name=name))

    def data_parallel(self, model: Any, optimizer: Any, named: list[tuple[str, Any]],
                      group: Any, fp16: bool) -> tuple[Any, Any]:
        hvd = self.hvd
        compression = hvd.Compression.fp16 if fp16 else hvd.Compression.none
        return model, hvd.DistributedOptimizer(optimizer, named_parameters=named,
                                               compression=compression,
                                               process_set=self._set(group))

    def _set(self, group: Any) -> Any:
        return self.hvd.global_process_set if group is None else group


@register
class TorchComm(Comm):
    """``torch.distributed``: Gloo on CPU, NCCL where the ranks have GPUs.

    Initialised once per process, from the gang's ``NESTOR_GANG_*`` variables, or
    from torchrun's (``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``...) when a
    user launches ``python -m nestor.trainers`` under torchrun.
    """

    backend = "torch"
    about = "torch.distributed (DDP; needs no Horovod)"

    @classmethod
    def connect(cls, current: Comm | None) -> Comm:
        import torch.distributed as dist

        return current if current is not None and dist.is_initialized() else cls()

    def close(self) -> bool:
        if not self.dist.is_initialized():
            return False
        self.dist.barrier()  # no rank leaves while a peer still talks to it
        return True  # with a group alive, the teardown may abort (exit_process)

    def __init__(self) -> None:
        import torch.distributed as dist

        self.dist = dist
        self._groups: dict[tuple[int, ...], Any] = {}
        if not dist.is_initialized():
            init_torch_distributed()
            # Taken down before the interpreter's own teardown: a Gloo group still alive
            # then has its threads destroyed unjoined, and the process aborts
            # ("terminate called without an active exception") after its work is done.
            atexit.register(_destroy_process_group)

    def size(self) -> int:
        return int(self.dist.get_world_size())

    def rank(self) -> int:
        return int(self.dist.get_rank())

    def local_rank(self) -> int:
        return int(_env(LOCAL_RANK_ENV, "LOCAL_RANK", default=0))

    def local_size(self) -> int:
        return int(_env(LOCAL_SIZE_ENV, "LOCAL_WORLD_SIZE", default=1))

    def group(self, ranks: tuple[int, ...]) -> Any:
        if len(ranks) == 1:
            return None
        if len(ranks) == self.size():
            return self.dist.group.WORLD
        existing = self._groups.get(ranks)
        if existing is None:
            # Collective over the whole world, members or not, in the same order.
            existing = self.dist.new_group(list(ranks))
            self._groups[ranks] = existing
        return existing

    def gpu_tensors(self) -> bool:
        return "nccl" in str(self.dist.get_backend())

    def allreduce_sum(self, tensor: Any, group: Any, name: str) -> Any:
        out = tensor.clone()
        self.dist.all_reduce(out, op=self.dist.ReduceOp.SUM, group=self._group(group))
        return out

    def allreduce_mean(self, tensors: list[Any], group: Any, name: str) -> list[Any]:
        import torch

        flat = torch.cat([t.reshape(-1) for t in tensors])
        self.dist.all_reduce(flat, op=self.dist.ReduceOp.SUM, group=self._group(group))
        flat /= self.dist.get_world_size(self._group(group))
        out, offset = [], 0
        for t in tensors:
            out.append(flat[offset:offset + t.numel()].view_as(t))
            offset += t.numel()
        return out

    def allgather(self, tensor: Any, group: Any, name: str,
                  lengths: list[int] | None = None) -> Any:
        import torch

        pg = self._group(group)
        members = self.dist.get_world_size(pg)
        if lengths is None:  # unknown: exchanged (a collective, and a read on the host)
            found = [torch.zeros(1, dtype=torch.int64, device=tensor.device)
                     for _ in range(members)]
            self.dist.all_gather(found, torch.tensor([tensor.shape[0]], device=tensor.device),
                                 group=pg)
            lengths = [int(n) for n in found]
        longest = max(lengths)
        padded = tensor.new_zeros((longest, *tensor.shape[1:]))
        padded[:tensor.shape[0]] = tensor
        parts = [torch.empty_like(padded) for _ in range(members)]
        self.dist.all_gather(parts, padded.contiguous(), group=pg)
        return torch.cat([part[:int(n)] for part, n in zip(parts, lengths, strict=True)])

    def broadcast_(self, tensor: Any, root: int, group: Any, name: str) -> None:
        self.dist.broadcast(tensor, src=root, group=self._group(group))

    def broadcast_object(self, obj: Any, root: int, name: str) -> Any:
        box = [obj]
        self.dist.broadcast_object_list(box, src=root)
        return box[0]

    def allgather_object(self, obj: Any, name: str) -> list[Any]:
        out: list[Any] = [None] * self.size()
        self.dist.all_gather_object(out, obj)
        return out

    def data_parallel(self, model: Any, optimizer: Any, named: list[tuple[str, Any]],
                      group: Any, fp16: bool) -> tuple[Any, Any]:
        from torch.nn.parallel import DistributedDataParallel

        device = next(model.parameters()).device
        # Weights are broadcast by the trainer (per data-parallel group, from its
        # root), optimizer state with them: DDP need not do it again.
        ddp = DistributedDataParallel(
            model, process_group=self._group(group),
            device_ids=[device.index] if device.type == "cuda" else None,
            **ddp_no_sync_options(DistributedDataParallel))
        if fp16:
            from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

            ddp.register_comm_hook(self._group(group), default_hooks.fp16_compress_hook)
        return ddp, optimizer

    def _group(self, group: Any) -> Any:
        return self.dist.group.WORLD if group is None else group


def _destroy_process_group() -> None:
    import torch.distributed as dist

    if dist.is_initialized():
        with contextlib.suppress(Exception):  # a peer already gone: nothing left to tidy
            dist.destroy_process_group()


def _env(*names: str, default: Any = None) -> Any:
    for name in names:
        value = os.environ.get(name)
        if value not in (None, ""):
            return value
    return default


def torch_launched_size() -> int:
    """Ranks a gang (``NESTOR_GANG_SIZE``) or torchrun (``WORLD_SIZE``) started; 1 if none."""
    return int(_env(SIZE_ENV, "WORLD_SIZE", default=1))


def init_torch_distributed() -> None:
    """Join the gang's process group: Gloo, and NCCL for CUDA tensors where there is a GPU."""
    import torch
    import torch.distributed as dist

    timeout = datetime.timedelta(seconds=float(_env(TIMEOUT_ENV, default=DEFAULT_TIMEOUT_S)))
    # On a GPU node each tensor goes by its device: CUDA ones over NCCL, the few
    # CPU ones (metrics, flags, objects) over Gloo, as Horovod does.
    backend = "gloo"
    if torch.cuda.is_available() and dist.is_nccl_available():
        backend = "cpu:gloo,cuda:nccl"
        torch.cuda.set_device(int(_env(LOCAL_RANK_ENV, "LOCAL_RANK", default=0))
                              % torch.cuda.device_count())
    if os.environ.get(STORE_ENV):  # a nestor gang on one node: a file only its user reaches
        store = Path(os.environ[STORE_ENV])
        store.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        dist.init_process_group(backend, init_method=store.as_uri(),
                                rank=int(os.environ[RANK_ENV]),
                                world_size=torch_launched_size(), timeout=timeout)
    elif os.environ.get(PORT_ENV):  # a nestor gang: its rank, size and rank 0's free port
        dist.init_process_group(
            backend, init_method=f"tcp://{os.environ.get(ADDR_ENV) or '127.0.0.1'}"
                                 f":{os.environ[PORT_ENV]}",
            rank=int(os.environ[RANK_ENV]), world_size=torch_launched_size(), timeout=timeout)
    elif os.environ.get("MASTER_PORT"):  # torchrun (its store), or a user's own launcher
        dist.init_process_group(backend, init_method="env://", timeout=timeout)
    else:
        raise RuntimeError(
            f"the torch backend needs its rendezvous: {ADDR_ENV}/{PORT_ENV} (set by a"
            " nestor gang) or MASTER_ADDR/MASTER_PORT/RANK/WORLD_SIZE (set by torchrun)")


def ddp_no_sync_options(ddp_class: Any) -> dict[str, bool]:
    """The keyword arguments that turn DDP's own buffer and initial-weight syncs off,
    in the spelling the installed torch offers: torch 2.13 calls the per-forward buffer
    broadcast ``forward_sync_buffers``, older releases (a GPU node's preinstalled torch
    2.4-2.12) ``broadcast_buffers``; ``init_sync`` came after 2.6 (2.6 lacks it, 2.11
    has it). Chosen from the signature, not a version string, so a backport or a vendor
    build works too."""
    import inspect

    params = inspect.signature(ddp_class.__init__).parameters
    options: dict[str, bool] = {}
    for name in ("forward_sync_buffers", "broadcast_buffers"):
        if name in params:
            options[name] = False
            break
    if "init_sync" in params:
        options["init_sync"] = False
    return options
