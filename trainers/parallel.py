"""Horovod set-up for one trial shape (dp x mp), and the model-parallel collectives.

Rank layout: global rank = dp_rank * mp + mp_rank, so the ranks of one
model-parallel group are neighbours (on one node when a gang is packed,
where their per-layer allgathers are cheapest). Each model-parallel group
{d*mp .. d*mp+mp-1} and each data-parallel group {m, m+mp, m+2mp, ..} is a
Horovod process set.

`setup` may be called again and again in the same processes (a warm gang
runs trial after trial): Horovod is initialised once, with dynamic process
sets, and each group's process set is added the first time a shape needs it
and reused afterwards. Every rank must call `setup` with the same shape at
the same point, since adding a process set is collective.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

_LAUNCHER_SIZE_VARS = ("HOROVOD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE")
_process_sets: dict[tuple[int, ...], Any] = {}


def launched_size() -> int:
    """How many ranks a launcher (horovodrun, Ray, mpirun) started, 1 if none."""
    for name in _LAUNCHER_SIZE_VARS:
        if os.environ.get(name, "").isdigit():
            return int(os.environ[name])
    return 1


@dataclass
class Parallel:
    """Where this process sits in a trial of ``dp`` x ``mp`` ranks.

    ``hvd`` is the ``horovod.torch`` module, or None in a plain single
    process (dp = mp = 1 and no launcher). ``dp_set``/``mp_set`` are Horovod
    process sets, or None when the group has one rank (nothing to
    communicate); a group of all ranks is Horovod's global process set.
    """

    dp: int
    mp: int
    rank: int = 0
    local_rank: int = 0
    local_size: int = 1
    hvd: Any = None
    dp_set: Any = None
    mp_set: Any = None
    dp_ranks: tuple[int, ...] = field(default_factory=tuple)
    mp_ranks: tuple[int, ...] = field(default_factory=tuple)

    @property
    def size(self) -> int:
        return self.dp * self.mp

    @property
    def dp_rank(self) -> int:
        return self.rank // self.mp

    @property
    def mp_rank(self) -> int:
        return self.rank % self.mp

    @property
    def dp_root(self) -> int:
        """Global rank of the first member of this rank's data-parallel group."""
        return self.mp_rank

    @property
    def is_root(self) -> bool:
        return self.rank == 0


def _process_set(hvd: Any, ranks: tuple[int, ...]) -> Any:
    if len(ranks) == 1:
        return None
    if len(ranks) == hvd.size():
        return hvd.global_process_set
    existing = _process_sets.get(ranks)
    if existing is None or existing.process_set_id is None:
        existing = hvd.add_process_set(list(ranks))
        _process_sets[ranks] = existing
    return existing


def _ensure_horovod() -> Any:
    try:
        import horovod.torch as hvd
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise ImportError(
            "data or model parallelism needs Horovod built with PyTorch (horovod.torch);"
            " run scripts/setup.sh"
        ) from exc
    if hvd.is_initialized() and os.environ.get("HOROVOD_DYNAMIC_PROCESS_SETS") != "1":
        # Someone (a launcher's wrapper, user code) initialised Horovod without
        # dynamic process sets: start it again with them.
        hvd.shutdown()
        _process_sets.clear()
    if not hvd.is_initialized():
        _process_sets.clear()
        hvd.init(process_sets="dynamic")
    return hvd


def setup(dp: int, mp: int) -> Parallel:
    """Initialise (once) Horovod and the process sets a dp x mp trial needs.

    Raises ValueError when the running ranks do not match dp x mp.
    """
    for name, value in (("data_parallel", dp), ("model_parallel", mp)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be an integer of at least 1, but got {value!r}")
    if dp * mp == 1 and launched_size() == 1:
        hvd = None
        try:
            import horovod.torch as maybe_hvd

            if maybe_hvd.is_initialized() and maybe_hvd.size() == 1:
                hvd = maybe_hvd
        except ImportError:  # pragma: no cover - depends on the install
            pass
        return Parallel(1, 1, hvd=hvd, dp_ranks=(0,), mp_ranks=(0,))
    hvd = _ensure_horovod()
    if hvd.size() != dp * mp:
        raise ValueError(
            f"a trial of {dp} data x {mp} model-parallel ranks needs {dp * mp} ranks, but"
            f" {hvd.size()} are running"
        )
    rank = hvd.rank()
    dp_rank, mp_rank = divmod(rank, mp)
    # Adding process sets is collective: every rank adds every group, in one order.
    for group in range(dp):
        _process_set(hvd, tuple(range(group * mp, group * mp + mp)))
    for group in range(mp):
        _process_set(hvd, tuple(range(group, dp * mp, mp)))
    mp_ranks = tuple(range(dp_rank * mp, dp_rank * mp + mp))
    dp_ranks = tuple(range(mp_rank, dp * mp, mp))
    return Parallel(
        dp,
        mp,
        rank=rank,
        local_rank=hvd.local_rank(),
        local_size=hvd.local_size(),
        hvd=hvd,
        dp_set=_process_set(hvd, dp_ranks),
        mp_set=_process_set(hvd, mp_ranks),
        dp_ranks=dp_ranks,
        mp_ranks=mp_ranks,
    )


def split_sizes(total: int, parts: int) -> list[int]:
    """Sizes of ``parts`` near-equal shares of ``total`` (the first ones one larger)."""
    base, extra = divmod(total, parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]


# --- collectives that need torch: imported lazily ------------------------------------


def gather_features(local: Any, par: Parallel, name: str, widths: list[int]) -> Any:
    """Concatenate the model-parallel ranks' output features (dim 1), differentiably.

    ``widths`` are the features each rank of the group holds, in rank order.
    Forward: an allgather over the model-parallel process set. Backward: this
    rank's slice of the incoming gradient, with no communication: what comes
    after the gather is either replicated (every rank of the group computes the
    same thing, so the same gradient: dropout masks are drawn alike across a
    group) or another split layer, whose `enter_split` has already summed the
    group's contributions.
    """
    if par.mp == 1:
        return local
    return _functions()[1].apply(local, par, name, widths)


def enter_split(x: Any, par: Parallel, name: str) -> Any:
    """Mark the (replicated) input of a split layer: identity forward, and a sum over
    the model-parallel group backward.

    Each rank's share of a split layer contributes only part of the gradient
    with respect to its input; the input's true gradient is their sum.
    """
    if par.mp == 1 or not x.requires_grad:
        return x
    return _functions()[0].apply(x, par, name)


_fns: tuple[Any, Any] | None = None


def _functions() -> tuple[Any, Any]:
    global _fns
    if _fns is None:
        _fns = _make_functions()
    return _fns


def _make_functions() -> tuple[Any, Any]:
    import torch

    class EnterSplit(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, x: Any, par: Parallel, name: str) -> Any:
            ctx.par, ctx.name = par, name
            return x.view_as(x)

        @staticmethod
        def backward(ctx: Any, grad: Any) -> Any:
            par = ctx.par
            total = par.hvd.allreduce(grad.contiguous(), op=par.hvd.Sum, name=f"{ctx.name}.in",
                                      process_set=par.mp_set)
            return total, None, None

    class GatherFeatures(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, local: Any, par: Parallel, name: str, widths: list[int]) -> Any:
            ctx.offset = sum(widths[: par.mp_rank])
            ctx.width = widths[par.mp_rank]
            gathered = par.hvd.allgather(
                local.detach().t().contiguous(), name=f"{name}.out", process_set=par.mp_set
            )
            return gathered.t().contiguous()

        @staticmethod
        def backward(ctx: Any, grad: Any) -> Any:
            share = grad[:, ctx.offset:ctx.offset + ctx.width].contiguous()
            return share, None, None, None

    return EnterSplit, GatherFeatures


def allreduce_sum(values: list[float], par: Parallel, process_set: Any, name: str) -> list[float]:
    """Sum a few floats over a process set (None: this rank alone)."""
    if process_set is None or par.hvd is None:
        return list(values)
    import torch

    total = par.hvd.allreduce(
        torch.tensor(values, dtype=torch.float64), op=par.hvd.Sum, name=name,
        process_set=process_set,
    )
    return [float(v) for v in total]


def broadcast_flag(flag: bool, par: Parallel, name: str) -> bool:
    """Rank 0's answer, on every rank: keeps decisions such as stopping collective."""
    if par.hvd is None or par.size == 1:
        return flag
    import torch

    value = par.hvd.broadcast(torch.tensor([1 if flag else 0]), root_rank=0, name=name)
    return bool(value.item())
