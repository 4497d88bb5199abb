"""Set-up for one trial shape (dp x mp) over Horovod or torch.distributed, and the
model-parallel collectives.

Rank layout: global rank = dp_rank * mp + mp_rank, so the ranks of one
model-parallel group are neighbours (on one node when a gang is packed,
where their per-layer allgathers are cheapest). Each model-parallel group
{d*mp .. d*mp+mp-1} and each data-parallel group {m, m+mp, m+2mp, ..} is a
group of the backend (trainers.comm): a Horovod process set or a
torch.distributed group.

`setup` may be called again and again in the same processes (a warm gang
runs trial after trial): the backend is initialised once (Horovod with
dynamic process sets), and each group is added the first time a shape needs
it and reused afterwards. Every rank must call `setup` with the same shape
at the same point, since adding a group is collective.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from nestor.trainers.comm import Comm, HorovodComm, backend_from_env, comm_class

_comms: dict[str, Comm] = {}


def launched_size(backend: str | None = None) -> int:
    """How many ranks a launcher (a gang, horovodrun, torchrun, mpirun) started, 1 if none."""
    return comm_class(backend_from_env(backend)).launched_size()


def process_rank(backend: str | None = None) -> int:
    """This process's rank once a trial has initialised its backend (0 before, or alone)."""
    comm = _comms.get(backend_from_env(backend))
    try:
        return comm.rank() if comm is not None else 0
    except (RuntimeError, ValueError):  # shut down since
        return 0


def exit_process(code: int) -> None:
    """End a rank that a launcher (torchrun) started, after its work: flushed, then
    ``os._exit``. With a torch.distributed group still alive, the interpreter's own
    teardown sometimes aborts the process ("terminate called without an active
    exception", SIGABRT: Gloo threads destroyed unjoined), which the launcher then
    reports as a failed job although every rank had finished."""
    import sys

    sys.stdout.flush()
    sys.stderr.flush()
    for comm in list(_comms.values()):
        if comm.close():
            os._exit(code)
    sys.exit(code)


@dataclass
class Parallel:
    """Where this process sits in a trial of ``dp`` x ``mp`` ranks.

    ``comm`` is the backend's collectives (trainers.comm), or None in a plain
    single process (dp = mp = 1 and no launcher). ``dp_set``/``mp_set`` are
    its groups, or None when the group has one rank (nothing to communicate);
    a group of all ranks is the backend's global one. ``hvd`` is the
    ``horovod.torch`` module on the Horovod backend (for user code that
    calls it directly), else None.
    """

    dp: int
    mp: int
    rank: int = 0
    local_rank: int = 0
    local_size: int = 1
    comm: Comm | None = None
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

    @property
    def hvd(self) -> Any:
        return self.comm.hvd if isinstance(self.comm, HorovodComm) else None

    @property
    def backend(self) -> str | None:
        return None if self.comm is None else self.comm.backend


def _connect(backend: str) -> Comm:
    """This process's comm on ``backend``, initialised once (Comm.connect)."""
    _comms[backend] = comm_class(backend).connect(_comms.get(backend))
    return _comms[backend]


def _alone(backend: str) -> Comm | None:
    """A one-rank trial's comm where its backend has one (a Horovod user code started)."""
    comm = comm_class(backend).alone()
    return None if comm is None else _comms.setdefault(backend, comm)


def setup(dp: int, mp: int, backend: str | None = None) -> Parallel:
    """Initialise (once) the backend and the groups a dp x mp trial needs.

    ``backend``: ``horovod`` or ``torch``; None takes the gang's (``NESTOR_GANG_COMM``),
    else Horovod. Raises ValueError when the running ranks do not match dp x mp.
    """
    for name, value in (("data_parallel", dp), ("model_parallel", mp)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be an integer of at least 1, but got {value!r}")
    backend = backend_from_env(backend)
    if dp * mp == 1 and launched_size(backend) == 1:
        return Parallel(1, 1, comm=_alone(backend), dp_ranks=(0,), mp_ranks=(0,))
    comm = _connect(backend)
    if comm.size() != dp * mp:
        raise ValueError(
            f"a trial of {dp} data x {mp} model-parallel ranks needs {dp * mp} ranks, but"
            f" {comm.size()} are running"
        )
    rank = comm.rank()
    dp_rank, mp_rank = divmod(rank, mp)
    # Adding groups is collective: every rank adds every group, in one order.
    for group in range(dp):
        comm.group(tuple(range(group * mp, group * mp + mp)))
    for group in range(mp):
        comm.group(tuple(range(group, dp * mp, mp)))
    mp_ranks = tuple(range(dp_rank * mp, dp_rank * mp + mp))
    dp_ranks = tuple(range(mp_rank, dp * mp, mp))
    return Parallel(
        dp,
        mp,
        rank=rank,
        local_rank=comm.local_rank(),
        local_size=comm.local_size(),
        comm=comm,
        dp_set=comm.group(dp_ranks),
        mp_set=comm.group(mp_ranks),
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
            total = par.comm.allreduce_sum(grad.contiguous(), par.mp_set, f"{ctx.name}.in")
            return total, None, None

    class GatherFeatures(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, local: Any, par: Parallel, name: str, widths: list[int]) -> Any:
            ctx.offset = sum(widths[: par.mp_rank])
            ctx.width = widths[par.mp_rank]
            sent = local.detach().t().contiguous()
            if sent.dtype == torch.bfloat16 and not par.comm.bfloat16:
                sent = sent.float()  # Horovod 0.28 has no bfloat16 collectives
            gathered = par.comm.allgather(sent, par.mp_set, f"{name}.out", lengths=widths)
            return gathered.t().contiguous().to(local.dtype)

        @staticmethod
        def backward(ctx: Any, grad: Any) -> Any:
            share = grad[:, ctx.offset:ctx.offset + ctx.width].contiguous()
            return share, None, None, None

    return EnterSplit, GatherFeatures


def allreduce_sum(values: list[float], par: Parallel, process_set: Any, name: str) -> list[float]:
    """Sum a few floats over a process set (None: this rank alone)."""
    if process_set is None or par.comm is None:
        return list(values)
    import torch

    total = par.comm.allreduce_sum(torch.tensor(values, dtype=torch.float64), process_set, name)
    return [float(v) for v in total]


def broadcast_flag(flag: bool, par: Parallel, name: str) -> bool:
    """Rank 0's answer, on every rank: keeps decisions such as stopping collective."""
    if par.comm is None or par.size == 1:
        return flag
    import torch

    value = torch.tensor([1 if flag else 0])
    par.comm.broadcast_(value, 0, None, name)
    return bool(value.item())
