"""Warm Horovod gangs on Ray, reused by trials of the same shape.

Starting a 2-rank ``horovod.ray.RayExecutor`` costs about 1.8 s here and a
placement group about 0.5 s, while running one more function on a warm gang
costs milliseconds (DESIGN.md). So a gang, once started, is kept and handed
to the next trial of the same data x model shape. The pool never holds more
ranks than it has slots unless told to oversubscribe: an idle gang of another
shape is shut down to make room.

A gang spans nodes, but a model-parallel group never does: its ranks swap
activations every layer, so they belong on one node, while the data-parallel
replicas meet once per step. Each gang is one PACK placement group of ``dp``
bundles of ``mp`` slots, one bundle per model-parallel group; Ray never splits
a bundle across nodes, and PACK still fills a node before it spills to the
next. Horovod's own strategies cannot say this: its PGStrategy puts one rank
per bundle (a 4-rank gang on 3-slot nodes lands 3 + 1, splitting a group) and
its ColocatedStrategy wants the same number of ranks on every host. So
:class:`GroupedRanks` makes the placement group and starts Horovod's worker
actors in it itself, rank ``d * mp + m`` in bundle ``d``: exactly the groups
``trainers.parallel`` builds its model-parallel process sets from.

A command trainer's gang is booked and started the same way, but only its
rank 0 runs the command, a launcher (horovodrun, torchrun, srun) that starts
the ranks itself on the slots the other ranks hold; or, when the command
names ``{node_rank}``, the first rank of each node runs it once for its node.
Each rank knows the gang's layout (:meth:`GroupedRanks.layout_env`) to tell
the launcher.

A gang whose rank died, or that ran past a trial's timeout, is discarded
(its actors killed, its placement group removed) rather than reused, so the
next trial gets fresh processes.

Hangs are caught twice. A rank that stops answering (SIGSTOP, a dead NFS
mount) leaves the trial past its timeout: the gang is killed. A collective
that some rank never joins is also caught by Horovod itself: its ranks run
with ``HOROVOD_STALL_CHECK_TIME_SECONDS`` (warn) and
``HOROVOD_STALL_SHUTDOWN_TIME_SECONDS`` (shut Horovod down) set, so the
waiting ranks fail with an error instead of waiting for the trial timeout, and
a gang in which any rank's Horovod failed is discarded too: its ranks no
longer agree on what is initialised.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import re
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from nestor.orchestrator.backends.ray.listening import establish_rendezvous, private_dir

# Shape and place() live beside the Backend interface; still importable from here.
from nestor.orchestrator.backends.shape import Shape, place, place_groups  # noqa: F401
from nestor.orchestrator.journal.text import first_line
from nestor.trainers import ResultStatus

log = logging.getLogger(__name__)
# How long Horovod waits for Ray to place a new gang's ranks before the attempt fails.
PLACEMENT_TIMEOUT_S = int(os.environ.get("NESTOR_PLACEMENT_TIMEOUT_S", "100"))
# How long the pool trusts its last look at the nodes' sizes (one GCS call).
NODE_SLOTS_TTL_S = 1.0


def slot_resource() -> str:
    """What one slot is on the connected Ray cluster: a GPU where it has any, else a CPU."""
    import ray

    return "GPU" if ray.cluster_resources().get("GPU") else "CPU"


def cluster_slot_counts(resource: str, packing: int = 1) -> tuple[int, int]:
    """The connected Ray cluster's ``resource`` slots now: (all, free); ``packing``
    slots to one GPU where small trials share GPUs (``resources.gpus_per_trial``)."""
    import ray

    return (int(ray.cluster_resources().get(resource, 0) * packing + 1e-9),
            int(ray.available_resources().get(resource, 0) * packing + 1e-9))


def gpu_packing(gpu_share: float) -> int:
    """Ranks that share one GPU when each takes ``gpu_share`` of it (1, 1/2, 1/3...).

    >>> gpu_packing(0.25)
    4
    """
    packing = round(1 / gpu_share)
    if not 0 < gpu_share <= 1 or abs(packing * gpu_share - 1) > 1e-6:
        raise ValueError(f"a GPU share must be 1/k (1, 0.5, 0.25...), but got {gpu_share!r}")
    return packing


# Horovod's stall checks for gang ranks (seconds); the driver's environment, or
# the pool's ``env``, may set others. Horovod's own defaults are 60 s and never.
# The shutdown is generous: a rank may legitimately work alone (rank 0 testing
# a model) while the others wait in a collective.
STALL_ENV = {
    "HOROVOD_STALL_CHECK_TIME_SECONDS": "60",
    "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS": "300",
    # torch.distributed's counterpart: a collective fails after this long (trainers.comm)
    "NESTOR_COLLECTIVE_TIMEOUT_S": "300",
}
# Rank failures after which the gang's communication state is not to be trusted:
# Horovod's, and torch.distributed's (a collective timed out, a peer's socket
# closed, the process group aborted).
HOROVOD_BROKE = ("HorovodInternalError", "Horovod has been shut down", "DistBackendError",
                 "DistNetworkError", "Connection closed by peer", "Connection reset by peer",
                 "ProcessGroupGloo", "Timed out waiting", "NCCL error")


def stall_env(env: dict[str, str] | None = None) -> dict[str, str]:
    """The ranks' environment: ``env`` over this process's settings over STALL_ENV."""
    merged = {key: os.environ.get(key, value) for key, value in STALL_ENV.items()}
    merged.update(env or {})
    return merged


# What a site sets for its network and collectives (NCCL, Gloo, UCX, libfabric), where
# `nestor` starts (the driver, or the sbatch script that starts it): handed to every
# rank, since a cluster the driver joins (--address) was started without them.
SITE_ENV_PREFIXES = ("NCCL_", "UCX_", "FI_")
SITE_ENV_NAMES = ("GLOO_SOCKET_IFNAME", "TP_SOCKET_IFNAME")


def site_env(environ: dict[str, str] | None = None) -> dict[str, str]:
    """The site's NCCL_*, UCX_*, FI_* and Gloo interface settings in ``environ``
    (this process's by default).

    >>> site_env({"NCCL_DEBUG": "INFO", "GLOO_SOCKET_IFNAME": "ib0", "HOME": "/h"})
    {'NCCL_DEBUG': 'INFO', 'GLOO_SOCKET_IFNAME': 'ib0'}
    """
    environ = dict(os.environ) if environ is None else environ
    return {k: v for k, v in environ.items()
            if k.startswith(SITE_ENV_PREFIXES) or k in SITE_ENV_NAMES}


def ranks_env(env: dict[str, str] | None = None) -> dict[str, str]:
    """Everything every rank of a gang started here receives besides its place in
    the gang: the site's settings (:func:`site_env`), the stall timeouts, ``env``.
    Set after the interface detection of a Horovod gang, so a site's
    ``NCCL_SOCKET_IFNAME`` wins over what Horovod detects."""
    return {**site_env(), **stall_env(env)}


def horovod_broke(result: Any) -> bool:
    """Did this rank's trial fail inside its backend's collectives (a Horovod stall
    shutdown, a lost peer, a torch.distributed timeout)?"""
    text = f"{getattr(result, 'reason', '') or ''}\n{getattr(result, 'details', '') or ''}"
    return (getattr(result, "status", None) == ResultStatus.FAILED
            and any(w in text for w in HOROVOD_BROKE))


def how_it_died(exc: BaseException) -> str:
    """Why a rank's actor is gone, in words a person can act on: Ray's first line
    ("The actor died unexpectedly ...") says nothing of the cause, and the cause it
    names further down is a guess list. A worker whose connection ended without an
    exit of its own was killed by a signal (SIGKILL: the kernel's OOM killer, a
    person, a batch system) or crashed; Ray's memory monitor says when it killed."""
    text = str(exc)
    where = ""
    pid = re.search(r"\bpid: (\d+)", text)
    ip = re.search(r"\bip: (\S+)", text)
    if pid:
        where = f" (pid {pid.group(1)}" + (f" on {ip.group(1)})" if ip else ")")
    if re.search(r"memory monitor|OUT_OF_MEMORY|running low on memory", text):
        return f"its Ray worker{where} was killed by Ray's memory monitor: the node ran low" \
               " on memory"
    if "connection error" in text or "SYSTEM_ERROR" in text or "unexpectedly exits" in text:
        return (f"its Ray worker{where} was killed by a signal (SIGKILL: the kernel's OOM"
                " killer, see dmesg on that node, or a person or the batch system) or crashed")
    if "INTENDED" in text or "ray.kill" in text:
        return f"its Ray worker{where} was stopped on purpose (ray.kill or a shutdown)"
    return first_line(exc)


class GangFailure(RuntimeError):
    """A rank of the gang died or stopped answering; the gang is unusable."""


class GangTimeout(GangFailure):
    """The function ran past its deadline; the gang was killed."""


class GangStartError(RuntimeError):
    """Ray could not place or start the ranks (a placement group never ready, a
    worker lost while starting): the trial's attempt fails and is retried, the
    driver goes on."""


@dataclass
class Gang:
    """One started gang of ``shape.ranks`` Horovod ranks (its ``executor``: a GroupedRanks)."""

    id: int
    shape: Shape
    executor: Any
    started_s: float
    trials_run: int = 0
    busy: bool = False
    broken: bool = False
    pending: list[Any] = field(default_factory=list)
    killed: bool = False
    _kill_lock: threading.Lock = field(default_factory=threading.Lock, repr=False,
                                       compare=False)

    def submit(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> list[Any]:
        """Start ``fn(*args, **kwargs)`` on every rank; returns one ObjectRef per rank."""
        if self.broken:
            raise GangFailure(f"gang {self.id} is broken and cannot run anything")
        self.pending = self.executor.run_remote(fn, args=list(args), kwargs=kwargs)
        self.trials_run += 1
        return self.pending

    def collect(self, timeout_s: float | None = None) -> list[Any]:
        """Wait for the submitted function on all ranks and return their results.

        A rank that died raises GangFailure; a deadline that passes raises
        GangTimeout. Either marks the gang broken: the pool discards it. Ranks
        that already ended are read first, so a dead rank is reported at once
        rather than after waiting on the ranks it left stuck in a collective.
        """
        import ray
        from ray.exceptions import GetTimeoutError, RayActorError, RayError

        ready, _ = ray.wait(self.pending, num_returns=len(self.pending), timeout=0)
        try:
            for ref in ready:
                ray.get(ref)
            results = ray.get(self.pending, timeout=timeout_s)
            if any(horovod_broke(r) for r in results):
                self.broken = True  # the trial's failure is reported; the gang is not reused
                log.warning("gang %s: Horovod failed in a rank; the gang will be rebuilt", self.id)
            return results
        except GetTimeoutError:
            self.broken = True
            raise GangTimeout(f"gang {self.id} ran past its {timeout_s:g} s deadline") from None
        except RayActorError as exc:
            self.broken = True
            raise GangFailure(f"a rank of gang {self.id} died: {how_it_died(exc)}") from None
        except RayError as exc:  # anything else Ray could not deliver: the gang is suspect
            self.broken = True
            raise GangFailure(f"a rank of gang {self.id} failed: {first_line(exc)}") from None
        finally:
            self.pending = []

    def nodes(self) -> list[str]:
        """The Ray node of each rank, in rank order (short ids; empty if unknown)."""
        return [node[:8] for node in getattr(self.executor, "node_ids", None) or []]

    def pids(self) -> list[int]:
        """Process ids of the ranks, in rank order (for tests and chaos drivers)."""
        import os

        return self.executor.run(os.getpid)

    def kill(self) -> None:
        """Kill the ranks and remove the placement group; safe to call again, from
        any thread (a cancel and the attempt's own end may both do it)."""
        with self._kill_lock:
            if self.executor is None or self.killed:  # never started, or done already
                return
            self.killed = True
            try:
                self.executor.shutdown()
            except Exception:
                log.debug("shutdown of gang %s raised; its placement group may be gone",
                          self.id)


class GangPool:
    """Hands out warm gangs by shape, within a fixed number of slots.

    >>> pool = GangPool(slots=2)                          # doctest: +SKIP
    >>> gang = pool.acquire(Shape(data=2))                # doctest: +SKIP
    >>> gang.submit(train, config); gang.collect()        # doctest: +SKIP
    >>> pool.release(gang)  # kept warm for the next 2x1 trial  # doctest: +SKIP
    """

    def __init__(
        self,
        slots: int,
        *,
        oversubscribe: bool = False,
        use_gpu: bool = False,
        rendezvous_timeout_s: int = 60,
        placement_timeout_s: int = PLACEMENT_TIMEOUT_S,
        env: dict[str, str] | None = None,
        executor_factory: Callable[[Shape], Any] | None = None,
        shared: bool = False,
        gpu_share: float = 1.0,
    ) -> None:
        """``gpu_share``: the share of a GPU each rank takes (a slot is then that share:
        small trials packed several to a GPU)."""
        if slots < 1:
            raise ValueError(f"slots must be at least 1, but got {slots}")
        self.slots = slots
        self.oversubscribe = oversubscribe
        self.use_gpu = use_gpu
        self.gpu_share = gpu_share
        self.packing = gpu_packing(gpu_share) if use_gpu else 1
        self.rendezvous_timeout_s = rendezvous_timeout_s
        self.placement_timeout_s = placement_timeout_s
        # On a cluster other drivers use, this pool's own count is not enough: a new
        # gang also needs the cluster's free slots, or Horovod waits for them until
        # its placement timeout.
        self.shared = shared
        self.env = stall_env(env)
        self._factory = executor_factory or self._start_executor
        self._gangs: list[Gang] = []
        self._ids = itertools.count(1)
        # Held around every change to the gangs; a backend that starts gangs in
        # threads holds it too while it books, releases and counts.
        self.lock = threading.RLock()
        self.started = 0  # gangs started over the pool's life, for reports and tests
        self._nodes: dict[str, int] | None = None  # live node -> its slots, cached
        self._nodes_read_s = 0.0

    # -- accounting -------------------------------------------------------------------

    @property
    def gangs(self) -> Sequence[Gang]:
        return tuple(self._gangs)

    @property
    def used_slots(self) -> int:
        return sum(g.shape.ranks for g in self._gangs)

    @property
    def busy_slots(self) -> int:
        return sum(g.shape.ranks for g in self._gangs if g.busy)

    def fits(self, shape: Shape) -> bool:
        """Could a trial of this shape start now (reusing or evicting idle gangs)?"""
        if any(not g.busy and not g.broken and g.shape == shape for g in self._gangs):
            return True
        return (self._room(shape) and not self.cluster_shortfall(shape)
                and self._groups_room(shape, [g for g in self._gangs if g.busy]))

    def _room(self, shape: Shape) -> bool:
        """By this pool's own count (what other drivers hold can change under it)."""
        return self.oversubscribe or self.busy_slots + shape.ranks <= self.slots

    def _groups_room(self, shape: Shape, kept: Sequence[Gang]) -> bool:
        """Do ``shape``'s model-parallel groups fit on the nodes beside ``kept``?

        Counting slots is not enough once a group must sit on one node: 12
        slots on 4 nodes of 3 hold only two 2 x 2 gangs (one 2-rank group per
        node), and a third would wait in placement for the whole timeout while
        the two it waits for finish and stay up, warm, holding their nodes."""
        if self.oversubscribe:
            return True
        nodes = self._node_slots()
        if not nodes or place_groups(list(nodes.values()), shape) is None:
            return True  # unknown, or never: starting it says why (check_groups_fit)
        free = self._free_by_node(kept)
        return free is None or place_groups(free, shape) is not None

    def _free_by_node(self, kept: Sequence[Gang]) -> list[int] | None:
        """Each live node's slots left beside ``kept`` (None when nodes are unknown).

        A started gang counts where its ranks are; one still starting is put
        where best-fit would put it (Ray decides, and the guess is replaced by
        the truth once it has started)."""
        nodes = self._node_slots()
        if not nodes:
            return None
        free = dict(nodes)
        starting = []
        for gang in kept:
            placed = getattr(gang.executor, "node_ids", None)
            if not placed:
                starting.append(gang.shape)
            for node in placed or []:
                if node in free:  # a node that left frees nothing and holds nothing
                    free[node] -= 1
        left = list(free.values())
        for shape in starting:
            left = place_groups(left, shape) or left  # unplaceable now: it waits on others
        return left

    def _node_slots(self) -> dict[str, int] | None:
        """Each live node's ``slot`` count, read from Ray at most once a second."""
        now = time.monotonic()
        if self._nodes is None or now - self._nodes_read_s > NODE_SLOTS_TTL_S:
            import ray

            if not ray.is_initialized():
                return None
            self._nodes = {n["NodeID"]: int(n["Resources"].get(self._slot_resource, 0)
                                            * self.packing + 1e-9)
                           for n in ray.nodes() if n.get("Alive")}
            self._nodes_read_s = now
        return self._nodes

    def cluster_shortfall(self, shape: Shape) -> int:
        """Slots a new gang of ``shape`` lacks because other drivers hold them (0 when
        the cluster is this pool's alone). Idle gangs of this pool count as free:
        ``acquire`` shuts them down to make room."""
        free = self._cluster_free()
        if free is None:
            return 0
        idle = sum(g.shape.ranks for g in self._gangs if not g.busy)
        return max(0, shape.ranks - free - idle)

    def cluster_size(self) -> int:
        """The slots the whole Ray cluster has now (nodes may have left it)."""
        return cluster_slot_counts(self._slot_resource, self.packing)[0]

    def _cluster_free(self) -> int | None:
        if not self.shared:
            return None
        return cluster_slot_counts(self._slot_resource, self.packing)[1]

    @property
    def _slot_resource(self) -> str:
        return "GPU" if self.use_gpu else "CPU"

    # -- life cycle -------------------------------------------------------------------

    def acquire(self, shape: Shape) -> Gang:
        """A warm idle gang of ``shape``, or a new one if the slots allow, started.

        Raises RuntimeError when the busy gangs leave too few slots; callers
        check ``fits`` first. The scheduler uses ``reserve`` and ``start``
        instead, so that a slow start-up runs off its loop.
        """
        gang, evicted = self.reserve(shape)
        for old in evicted:
            old.kill()
        if gang.executor is None:
            self.start(gang)
        return gang

    def reserve(self, shape: Shape) -> tuple[Gang, list[Gang]]:
        """Book a gang of ``shape`` at once: a warm idle one, or the slots for a new
        one (``executor`` None until ``start``). Returns it and the idle gangs of
        other shapes evicted to make room; the caller kills those (slowly, off
        the scheduling loop). Cheap: no Ray call but, on a shared cluster, one
        look at its free slots."""
        if shape.ranks > self.slots and not self.oversubscribe:
            raise ValueError(
                f"a trial of {shape} needs {shape.ranks} slots but the pool has {self.slots}"
            )
        for gang in self._gangs:
            if not gang.busy and not gang.broken and gang.shape == shape:
                gang.busy = True
                return gang, []
        if not self._room(shape):
            raise RuntimeError(
                f"no room for a {shape} gang: {self.busy_slots} of {self.slots} slots are busy"
            )
        # Make room: evict idle gangs of other shapes, oldest first, until this
        # pool, (when shared) the cluster, and the nodes (for whole groups) have
        # the slots. The nodes are not a reason to refuse: ``fits`` asked them.
        free, freed, evicted = self._cluster_free(), 0, []
        for gang in sorted((g for g in self._gangs if not g.busy), key=lambda g: g.started_s):
            room_here = self.used_slots + shape.ranks <= self.slots
            room_there = free is None or free + freed >= shape.ranks
            if self.oversubscribe or (room_here and room_there
                                      and self._groups_room(shape, self._gangs)):
                break
            freed += gang.shape.ranks
            self._gangs.remove(gang)
            evicted.append(gang)
        gang = Gang(next(self._ids), shape, None, started_s=time.monotonic(), busy=True)
        self._gangs.append(gang)
        return gang, evicted

    def start(self, gang: Gang) -> None:
        """Start a reserved gang's ranks (seconds: placement, rendezvous, imports).

        Safe to call from a thread other than the one that reserved the gang.
        A gang that cannot start leaves the pool and raises GangStartError."""
        start = time.monotonic()
        try:
            executor = self._factory(gang.shape)
        except Exception as exc:
            self.forget(gang)
            raise GangStartError(
                f"could not start a {gang.shape} gang: {first_line(exc)}") from exc
        with self.lock:
            gang.executor = executor
            gang.started_s = time.monotonic()
            self.started += 1
        log.info("started gang %s (%s) in %.2f s on nodes %s", gang.id, gang.shape,
                 time.monotonic() - start, gang.nodes())

    def release(self, gang: Gang) -> None:
        """Return a gang after a trial: kept warm if healthy, discarded if broken."""
        gang.busy = False
        if gang.broken:
            self.discard(gang)

    def discard(self, gang: Gang) -> None:
        """Kill a gang's ranks and free its slots."""
        self.forget(gang)
        gang.kill()

    def forget(self, gang: Gang) -> None:
        """Free a gang's slots without killing it (the caller kills it, or it is dead)."""
        with self.lock:
            if gang in self._gangs:
                self._gangs.remove(gang)

    def shutdown(self) -> None:
        for gang in list(self._gangs):
            self.discard(gang)

    def __enter__(self) -> GangPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    def _start_executor(self, shape: Shape) -> GroupedRanks:
        ranks = GroupedRanks(shape, use_gpu=self.use_gpu, gpu_share=self.gpu_share,
                             env=self.env, rendezvous_timeout_s=self.rendezvous_timeout_s,
                             placement_timeout_s=self.placement_timeout_s)
        ranks.start()
        return ranks


class GroupTooBig(ValueError):
    """The live nodes could never hold the gang's model-parallel groups (no node
    holds one, or not all of them at once, even idle): waiting for the placement
    would only run out the placement timeout."""


def group_bundle(shape: Shape, use_gpu: bool = False,
                 gpu_share: float = 1.0) -> dict[str, float]:
    """What one model-parallel group asks Ray for: one bundle, so one node; each rank
    a CPU and ``gpu_share`` of a GPU (Ray's fractional GPUs pack small trials).

    >>> group_bundle(Shape(data=2, model=4), use_gpu=True)
    {'CPU': 4.0, 'GPU': 4.0}
    >>> group_bundle(Shape(data=1, model=1), use_gpu=True, gpu_share=0.25)
    {'CPU': 1.0, 'GPU': 0.25}
    """
    bundle = {"CPU": float(shape.model)}
    if use_gpu:
        bundle["GPU"] = float(shape.model) * gpu_share
    return bundle


def check_groups_fit(shape: Shape, use_gpu: bool = False,
                     nodes: list[dict[str, Any]] | None = None,
                     gpu_share: float = 1.0) -> None:
    """Raise GroupTooBig unless the live nodes, empty, could hold the gang's groups:
    one group on some node, and all ``dp`` of them, each whole on a node.

    Counts the nodes' total resources, not their free ones: a node that is
    busy now frees up, a node that is too small never grows. ``nodes`` is
    ``ray.nodes()`` (read from the connected cluster when not given).
    """
    if nodes is None:
        import ray

        nodes = ray.nodes()
    alive = [n for n in nodes if n.get("Alive")]
    bundle = group_bundle(shape, use_gpu, gpu_share)
    holds = [min(int(n["Resources"].get(k, 0) / v + 1e-9) for k, v in bundle.items())
             for n in alive]
    wants = ", ".join(f"{v:g} {k}s" for k, v in bundle.items())
    resource = "GPU" if use_gpu else "CPU"
    if not any(holds):
        largest = max(alive, key=lambda n: n["Resources"].get(resource, 0), default=None)
        if largest is None:
            where = "the cluster has no live node"
        else:
            has = largest["Resources"]
            sizes = ", ".join(f"{has.get(k, 0):g} {k}s" for k in bundle)
            where = f"the largest node ({largest['NodeID'][:12]}) has {sizes}"
        raise GroupTooBig(
            f"a model-parallel group must sit on one node, so mp={shape.model} needs a node"
            f" with {wants}, but {where}; use mp of at most the largest node's {resource}s")
    if sum(holds) < shape.data:
        raise GroupTooBig(
            f"a {shape} gang needs {shape.data} model-parallel groups of {wants}, each on"
            f" one node, but the {len(alive)} live nodes hold at most {sum(holds)} such"
            f" groups even when idle")


class GroupedRanks:
    """The ranks of one gang, one placement-group bundle per model-parallel group.

    Rank ``r`` runs in bundle ``r // mp``: the ranks ``d*mp .. d*mp+mp-1`` that
    ``trainers.parallel`` makes one model-parallel group share a bundle,
    hence a node. On the Horovod backend the ranks are Horovod's own worker
    actors (``horovod.ray.worker.BaseHorovodWorker``) wired up by Horovod's own
    ``Coordinator`` (local and cross ranks by node, the Gloo rendezvous), so
    inside a rank this is indistinguishable from a ``RayExecutor`` gang: only
    where the ranks sit differs. On the torch backend they are
    ``trainers.rank_actor.RankActor``s told their rank, local rank (by node)
    and rank 0's address and a free port there; each joins the
    torch.distributed process group the first time a trial needs it, and
    Horovod is never imported.

    >>> ranks = GroupedRanks(Shape(data=2, model=2))      # doctest: +SKIP
    >>> ranks.start()                                     # doctest: +SKIP
    >>> ranks.run(os.getpid)                              # doctest: +SKIP
    >>> ranks.node_ids                                    # doctest: +SKIP
    ['a1..', 'a1..', 'b7..', 'b7..']
    """

    def __init__(self, shape: Shape, *, use_gpu: bool = False,
                 env: dict[str, str] | None = None, rendezvous_timeout_s: int = 60,
                 placement_timeout_s: int = PLACEMENT_TIMEOUT_S,
                 gpu_share: float = 1.0, backend: str | None = None) -> None:
        self.shape = shape
        self.backend = backend or shape.backend
        self.use_gpu = use_gpu
        self.gpu_share = gpu_share if use_gpu else 1.0
        self.env = {**site_env(), **(env or {})}
        if use_gpu:  # a rank granted a GPU fails rather than train on the CPU (trainers.gpu)
            self.env["NESTOR_GPU_GRANTED"] = "1"
        if self.gpu_share < 1:  # the trainer caps its memory to its share of the GPU
            self.env["NESTOR_GPU_SHARE"] = repr(self.gpu_share)
        self.rendezvous_timeout_s = rendezvous_timeout_s
        self.placement_timeout_s = placement_timeout_s
        self.workers: list[Any] = []
        self.node_ids: list[str] = []  # by rank, once started
        self.placement_group: Any = None
        self._rendezvous: Any = None
        self._lock = threading.Lock()

    def start(self) -> None:
        """Place the groups, start a rank per slot and wire Horovod's rendezvous.

        Anything that fails on the way removes what was made (actors, the
        placement group, the rendezvous server) before it raises."""
        try:
            self._place()
            self._start_ranks()
        except BaseException:
            self.shutdown()
            raise

    def _place(self) -> None:
        import ray
        from ray.util.placement_group import placement_group

        check_groups_fit(self.shape, self.use_gpu, gpu_share=self.gpu_share)
        bundle = group_bundle(self.shape, self.use_gpu, self.gpu_share)
        self.placement_group = placement_group(
            [dict(bundle) for _ in range(self.shape.data)], strategy="PACK")
        if not self.placement_group.wait(timeout_seconds=self.placement_timeout_s):
            resource = "GPU" if self.use_gpu else "CPU"
            raise TimeoutError(
                f"Placement group of {self.shape.data} x {bundle} for a {self.shape} gang"
                f" not placed within {self.placement_timeout_s} s; the cluster has"
                f" {ray.available_resources().get(resource, 0):g} {resource}s free")

    def _spawn(self, actor_class: type) -> list[str]:
        """One actor of ``actor_class`` per rank, rank r in bundle r // mp; their hostnames."""
        import ray
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        size, mp = self.shape.ranks, self.shape.model
        worker = ray.remote(actor_class)
        for rank in range(size):
            where = PlacementGroupSchedulingStrategy(
                placement_group=self.placement_group, placement_group_bundle_index=rank // mp,
                placement_group_capture_child_tasks=False)  # a rank's own tasks go elsewhere
            self.workers.append(worker.options(
                num_cpus=1, num_gpus=self.gpu_share if self.use_gpu else 0,
                scheduling_strategy=where,
            ).remote(world_rank=rank, world_size=size))
        # Bounded: a rank whose process never comes up fails the start, not hangs it.
        self.node_ids = ray.get([w.node_id.remote() for w in self.workers],
                                timeout=self.rendezvous_timeout_s)
        return ray.get([w.hostname.remote() for w in self.workers],
                       timeout=self.rendezvous_timeout_s)

    def _start_ranks(self) -> None:
        from nestor.trainers.comm import BACKEND_ENV, comm_class

        if comm_class(self.backend).rendezvous == "horovod":
            per_rank, shared, hostnames = self._horovod_rendezvous()
        else:  # "env": the ranks meet through the variables set here (trainers.comm)
            per_rank, shared, hostnames = self._env_rendezvous()
        shared.update(self.layout_env(hostnames))
        shared[BACKEND_ENV] = self.backend
        shared.update(self.env)
        self._set_env(per_rank, shared)

    def _set_env(self, per_rank: list[dict[str, str]], shared: dict[str, str]) -> None:
        import ray

        gpus = self._visible_devices() if self.use_gpu else {}
        ray.get([w.update_env_vars.remote({**per_rank[rank], **shared, **gpus.get(rank, {})})
                 for rank, w in enumerate(self.workers)])

    def _horovod_rendezvous(self) -> tuple[list[dict[str, str]], dict[str, str], list[str]]:
        from horovod.ray.runner import Coordinator, RayExecutor
        from horovod.ray.utils import detect_nics, nics_to_env_var
        from horovod.ray.worker import BaseHorovodWorker

        hostnames = self._spawn(BaseHorovodWorker)
        settings = RayExecutor.create_settings(
            timeout_s=self.rendezvous_timeout_s,
            placement_group_timeout_s=self.placement_timeout_s)
        coordinator = Coordinator(settings)
        for rank, (host, node) in enumerate(zip(hostnames, self.node_ids, strict=True)):
            coordinator.register(host, node, rank)
        per_rank = coordinator.finalize_registration()  # local and cross ranks by node
        shared = establish_rendezvous(coordinator, self.node_ids)  # bound where it says
        self._rendezvous = coordinator.rendezvous
        one_per_host = list(dict(zip(hostnames, self.workers, strict=True)).values())
        shared.update(nics_to_env_var(detect_nics(
            settings, all_host_names=list(coordinator.hostnames), node_workers=one_per_host)))
        return [per_rank[rank] for rank in range(self.shape.ranks)], shared, hostnames

    def _env_rendezvous(self) -> tuple[list[dict[str, str]], dict[str, str], list[str]]:
        """Each rank's place, and where they meet: a free port on rank 0's node (its
        address is the layout's ``NESTOR_GANG_ADDR``). The process group itself is
        made by the ranks, in their first trial (trainers.comm)."""
        import ray

        from nestor.trainers.comm import (
            LOCAL_RANK_ENV,
            LOCAL_SIZE_ENV,
            PORT_ENV,
            RANK_ENV,
            SIZE_ENV,
            STORE_ENV,
        )
        from nestor.trainers.rank_actor import RankActor

        hostnames = self._spawn(RankActor)
        if len(set(self.node_ids)) == 1:  # one node: a file store, no port open to the world
            store = private_dir("nestor-store") / f"gang-{uuid.uuid4().hex}"
            shared = {STORE_ENV: str(store)}
        else:
            port = ray.get(self.workers[0].free_port.remote(), timeout=self.rendezvous_timeout_s)
            shared = {PORT_ENV: str(port)}
        per_rank = []
        for rank, node in enumerate(self.node_ids):
            peers = [r for r, n in enumerate(self.node_ids) if n == node]
            per_rank.append({RANK_ENV: str(rank), SIZE_ENV: str(self.shape.ranks),
                             LOCAL_RANK_ENV: str(peers.index(rank)),
                             LOCAL_SIZE_ENV: str(len(peers))})
        return per_rank, shared, hostnames

    def layout_env(self, hostnames: Sequence[str]) -> dict[str, str]:
        """Where the gang's ranks are, for a command trainer's launcher in rank 0
        (``trainers.launch``): ranks per host in rank order, the address of
        rank 0's node (``MASTER_ADDR``, where torchrun's rendezvous listens), and
        each rank's Ray node (numbered by first rank: a per-node launch runs on
        each node's first rank).

        Set once per gang, as Horovod's own variables are: a warm gang's ranks
        stay where they are, trial after trial."""
        import ray

        from nestor.trainers.launch import (
            GANG_ADDR_ENV,
            GANG_HOSTS_ENV,
            GANG_NODES_ENV,
            format_hosts,
            group_hosts,
        )

        addresses = {n["NodeID"]: n.get("NodeManagerAddress") for n in ray.nodes()}
        first = addresses.get(self.node_ids[0]) if self.node_ids else None
        number: dict[str, int] = {}
        nodes = [number.setdefault(node, len(number)) for node in self.node_ids]
        return {GANG_HOSTS_ENV: format_hosts(group_hosts(hostnames)),
                GANG_ADDR_ENV: first or hostnames[0],
                GANG_NODES_ENV: ",".join(str(n) for n in nodes)}

    def _visible_devices(self) -> dict[int, dict[str, str]]:
        """Each rank sees every GPU its node's ranks of this gang hold, in local-rank
        order: local rank i's own GPU is ``cuda:i`` (what trainers pick), and
        peers on one node can still reach each other's memory (CUDA IPC)."""
        import ray

        ids = ray.get([w.get_gpu_ids.remote() for w in self.workers])
        if self.gpu_share < 1:  # ranks share GPUs: each sees only its own, as cuda:0
            return {rank: {"CUDA_VISIBLE_DEVICES": ",".join(str(i) for i in gpu_ids)}
                    for rank, gpu_ids in enumerate(ids)}
        by_node: dict[str, list[str]] = {}
        for node, gpu_ids in zip(self.node_ids, ids, strict=True):
            by_node.setdefault(node, []).extend(str(i) for i in gpu_ids)
        return {rank: {"CUDA_VISIBLE_DEVICES": ",".join(by_node[node])}
                for rank, node in enumerate(self.node_ids)}

    def run_remote(self, fn: Callable[..., Any], args: Sequence[Any] = (),
                   kwargs: dict[str, Any] | None = None) -> list[Any]:
        """Start ``fn(*args, **kwargs)`` on every rank; one ObjectRef per rank, in rank order."""
        args, kwargs = tuple(args), dict(kwargs or {})

        def call(_executable: Any) -> Any:  # Horovod's worker runs func(executable)
            return fn(*args, **kwargs)

        # A nested function travels by value: the ranks need not import this module.
        return [w.execute.remote(call) for w in self.workers]

    def run(self, fn: Callable[..., Any], args: Sequence[Any] = (),
            kwargs: dict[str, Any] | None = None) -> list[Any]:
        """``fn(*args, **kwargs)`` on every rank, waited for; results in rank order."""
        import ray

        return ray.get(self.run_remote(fn, args, kwargs))

    def shutdown(self) -> None:
        """Kill the ranks, remove the placement group, stop the rendezvous server.

        Safe to call twice and on a half-started gang."""
        import ray
        from ray.util.placement_group import remove_placement_group

        with self._lock:
            workers, self.workers = self.workers, []
            group, self.placement_group = self.placement_group, None
            rendezvous, self._rendezvous = self._rendezvous, None
        for worker in workers:
            try:
                ray.kill(worker, no_restart=True)
            except Exception:  # already dead; nothing else to clean
                log.debug("a rank of a %s gang was already gone", self.shape)
        if group is not None:
            with contextlib.suppress(Exception):
                remove_placement_group(group)
        if rendezvous is not None:  # its HTTP loop would outlive the gang otherwise
            threading.Thread(target=rendezvous.stop, daemon=True,
                             name="nestor-rendezvous-stop").start()

