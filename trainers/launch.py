"""What a multi-rank command needs to start its own ranks: placeholders and environment.

A command trainer with ``parallel: {data: N}`` gets a gang of N slots, but
nestor starts the command once, in rank 0's process: the command is a
launcher (``horovodrun``, ``torchrun``, ``srun``, ``mpirun``) that starts its
ranks itself, and two launchers would start 2 x N ranks. The gang's other
ranks only hold their slots (and, on other nodes, the CPUs or GPUs the
launcher's remote ranks use). So the launcher must be told where the slots
are; it is, by placeholders in its argv and by the environment::

    command: [horovodrun, -np, "{np}", -H, "{hosts}", python, fit.py]
    command: [torchrun, --nproc_per_node, "{nproc_per_node}", --nnodes, "{nnodes}",
              --master_addr, "{master_addr}", --master_port, "{master_port}", fit.py]
    command: [srun, -n, "{np}", python, fit.py]

A command that uses ``{node_rank}`` is launched per node instead, as most
multi-node torchrun scripts are written: it runs once on the first rank of
each node the gang's ranks are on, each with its own ``{node_rank}`` (0 on the
node of rank 0), while the other ranks hold their slots::

    command: [torchrun, --nnodes, "{nnodes}", --node_rank, "{node_rank}",
              --nproc_per_node, "{nproc_per_node}", --master_addr, "{master_addr}",
              --master_port, "{master_port}", fit.py]

There ``{nnodes}`` counts the gang's nodes, ``{nproc_per_node}`` is this
node's ranks, and every node gets the same ``{master_addr}`` and
``{master_port}`` (rank 0's node picks the port and publishes it to the others
through Ray's key-value store). The trial's result is rank 0's command's;
a command on another node need only exit 0, and one that fails fails the
trial.

Each placeholder is replaced inside one argv word and nothing else: a value
with spaces or quotes (a log directory's path) stays one word, and no shell
ever reads it. ``{{np}}`` is a literal ``{np}``; any other brace (a JSON
argument, a ``python -c`` dict) is left alone. A ``{name}`` that is not a
placeholder is an error, in ``nestor validate`` and at run time, so a typo
does not reach the program as text.
"""

from __future__ import annotations

import itertools
import os
import re
import socket
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

# Set by orchestrator.backends.ray.gangs.GroupedRanks in every rank of a gang (the same in all):
# each host's ranks, in rank order, and the address of rank 0's node.
GANG_HOSTS_ENV = "NESTOR_GANG_HOSTS"
GANG_ADDR_ENV = "NESTOR_GANG_ADDR"
# ... and each rank's node, in rank order, numbered by the node's first rank: "0,0,1,1".
GANG_NODES_ENV = "NESTOR_GANG_NODES"

PLACEHOLDERS: dict[str, str] = {
    "np": "ranks of the trial (data x model)",
    "hosts": "host:ranks per node, comma-separated (horovodrun -H)",
    "hostfile": "a file with one 'host slots=N' line per node (mpirun, horovodrun --hostfile)",
    "master_addr": "the address of the first node (rank 0's)",
    "master_port": "a free TCP port on the first node",
    "nnodes": "the number of nodes the ranks are on",
    "nproc_per_node": "ranks per node (only when every node has the same number; with"
                      " {node_rank}: this node's)",
    "node_rank": "this node's index, 0 on rank 0's; the command then runs once per node",
}
PER_NODE = "node_rank"  # the placeholder that makes a command run once per node
# {{name}} is a literal {name}; {name} a placeholder. Other braces are not ours.
_FIELD = re.compile(r"\{\{([A-Za-z_]\w*)\}\}|\{([A-Za-z_]\w*)\}")


def placeholders_in(word: str) -> Iterator[str]:
    """The placeholder names one argv word uses (unknown ones included)."""
    for match in _FIELD.finditer(word):
        if match.group(2) is not None:
            yield match.group(2)


def unknown_placeholders(argv: Sequence[str]) -> list[tuple[int, str]]:
    """``(word index, name)`` of every ``{name}`` in ``argv`` that is not a placeholder.

    >>> unknown_placeholders(["torchrun", "--nproc_per_node={nprocs}", "{{x}}", "{np}"])
    [(1, 'nprocs')]
    """
    return [(index, name) for index, word in enumerate(argv)
            for name in placeholders_in(word) if name not in PLACEHOLDERS]


def per_node(argv: Sequence[str]) -> bool:
    """Does this command run once per node (it names ``{node_rank}``)?

    >>> per_node(["torchrun", "--node_rank={node_rank}", "fit.py"])
    True
    >>> per_node(["srun", "--x={{node_rank}}", "fit.py"])  # a literal {node_rank}
    False
    """
    return any(name == PER_NODE for word in argv for name in placeholders_in(word))


@dataclass(frozen=True)
class Node:
    """A rank's node, for a command launched per node: its index (``rank``) among
    the gang's ``count`` nodes, the gang's ranks on it, and whether this rank is
    its first (the one that runs the command)."""

    rank: int
    count: int
    ranks: int
    leader: bool

    @classmethod
    def here(cls, rank: int, np: int, environ: Mapping[str, str] | None = None) -> Node:
        """Gang rank ``rank``'s node (outside a gang: the one node of all ``np`` ranks).

        >>> Node.here(2, 4, {GANG_NODES_ENV: "0,0,1,1"})
        Node(rank=1, count=2, ranks=2, leader=True)
        """
        environ = os.environ if environ is None else environ
        text = environ.get(GANG_NODES_ENV, "")
        if not text:
            return cls(0, 1, np, rank == 0)
        nodes = [int(n) for n in text.split(",")]
        if len(nodes) != np or not 0 <= rank < np:
            raise ValueError(f"the trial wants {np} ranks but its gang holds {len(nodes)}"
                             f" ({GANG_NODES_ENV}={text}, rank {rank})")
        mine = nodes[rank]
        return cls(mine, max(nodes) + 1, nodes.count(mine), nodes.index(mine) == rank)


def fill(argv: Sequence[str], values: Mapping[str, str]) -> list[str]:
    """``argv`` with its placeholders replaced, word by word (never re-split).

    >>> fill(["-np", "{np}", "--x={{np}}", '{"a": 1}'], {"np": "2"})
    ['-np', '2', '--x={np}', '{"a": 1}']
    """
    def one(match: re.Match[str]) -> str:
        if match.group(1) is not None:
            return "{" + match.group(1) + "}"
        name = match.group(2)
        if name not in values:
            raise KeyError(name)
        return values[name]

    return [_FIELD.sub(one, word) for word in argv]


@dataclass(frozen=True)
class Layout:
    """Where a trial's ranks are: ``hosts`` as (host, ranks) in rank order, the
    first node's address, and a port free there.

    Read in rank 0 from the environment its gang set (:func:`Layout.here`);
    outside a gang (a direct ``run_trial``, ``python -m nestor.trainers``) every rank
    is on this host."""

    hosts: tuple[tuple[str, int], ...]
    master_addr: str
    master_port: int
    node: Node | None = None  # set for a command launched per node

    @property
    def np(self) -> int:
        return sum(n for _, n in self.hosts)

    @property
    def nproc_per_node(self) -> int | None:
        counts = {n for _, n in self.hosts}
        return counts.pop() if len(counts) == 1 else None

    @classmethod
    def here(cls, np: int, environ: Mapping[str, str] | None = None) -> Layout:
        """This trial's layout: the gang's, or ``np`` ranks on this host.

        Raises ValueError when the gang's hosts do not add up to ``np`` (the
        request is for a gang of another shape)."""
        environ = os.environ if environ is None else environ
        text = environ.get(GANG_HOSTS_ENV, "")
        if text:
            hosts = tuple(parse_hosts(text))
            addr = environ.get(GANG_ADDR_ENV) or "127.0.0.1"
        else:
            hosts, addr = ((socket.gethostname(), np),), "127.0.0.1"
        layout = cls(hosts, addr, free_port())
        if layout.np != np:
            raise ValueError(f"the trial wants {np} ranks but its gang holds {layout.np}"
                             f" ({format_hosts(hosts)})")
        return layout

    def values(self, hostfile: Path) -> dict[str, str]:
        """The placeholders' values (``nproc_per_node`` only when it has one)."""
        values = {
            "np": str(self.np), "hosts": format_hosts(self.hosts), "hostfile": str(hostfile),
            "master_addr": self.master_addr, "master_port": str(self.master_port),
            "nnodes": str(len(self.hosts)),
        }
        if self.nproc_per_node is not None:
            values["nproc_per_node"] = str(self.nproc_per_node)
        if self.node is not None:
            values.update(node_rank=str(self.node.rank), nnodes=str(self.node.count),
                          nproc_per_node=str(self.node.ranks))
        return values

    def env(self, hostfile: Path) -> dict[str, str]:
        """The launcher's environment: the usual rendezvous variables, nestor's own,
        and torchrun's defaults (``PET_*``: a bare ``torchrun fit.py`` on one node
        starts every rank). No RANK: the launcher is not a rank."""
        env = {
            "WORLD_SIZE": str(self.np), "MASTER_ADDR": self.master_addr,
            "MASTER_PORT": str(self.master_port),
            "NESTOR_NP": str(self.np), "NESTOR_HOSTS": format_hosts(self.hosts),
            "NESTOR_HOSTFILE": str(hostfile), "NESTOR_NNODES": str(len(self.hosts)),
            "PET_NNODES": str(len(self.hosts)), "PET_MASTER_ADDR": self.master_addr,
            "PET_MASTER_PORT": str(self.master_port),
        }
        if self.nproc_per_node is not None:
            env["PET_NPROC_PER_NODE"] = str(self.nproc_per_node)
        if self.node is not None:
            node = {"NNODES": str(self.node.count), "NODE_RANK": str(self.node.rank),
                    "NPROC_PER_NODE": str(self.node.ranks)}
            env.update({f"PET_{k}": v for k, v in node.items()})
            env.update({f"NESTOR_{k}": v for k, v in node.items()})
            env["NODE_RANK"] = str(self.node.rank)
        return env

    def hostfile_text(self) -> str:
        return "".join(f"{host} slots={n}\n" for host, n in self.hosts)


def group_hosts(hostnames: Sequence[str]) -> list[tuple[str, int]]:
    """Ranks per host, hosts in the order of their first rank.

    >>> group_hosts(["a", "a", "b", "a"])
    [('a', 3), ('b', 1)]
    """
    counts: dict[str, int] = {}
    for host in hostnames:
        counts[host] = counts.get(host, 0) + 1
    return list(counts.items())


def format_hosts(hosts: Sequence[tuple[str, int]]) -> str:
    return ",".join(f"{host}:{n}" for host, n in hosts)


def parse_hosts(text: str) -> Iterator[tuple[str, int]]:
    for item in text.split(","):
        host, _, n = item.rpartition(":")
        yield host, int(n)


_LAUNCHES = itertools.count()
_PUBLISHED: list[str] = []  # the key rank 0 published last (removed when it publishes the next)
PORT_NAMESPACE = "nestor"


def next_launch() -> int:
    """Counts the command trials this process has run. Every rank of a gang runs
    every trial the gang is given, so its ranks agree on the count: the key under
    which one trial's per-node launch shares its port."""
    return next(_LAUNCHES)


def share_port(launch: int, node: Node, port: int, timeout_s: float) -> int:
    """The master port of a per-node launch, the same on every node.

    Rank 0's node publishes ``port`` (free there) in Ray's key-value store under
    its gang's placement group and ``launch``; every other node's first rank
    waits for it, up to ``timeout_s``. The previous launch's key is removed when
    the next is published: by then every rank of the gang has returned from it.

    Raises TimeoutError when nothing is published in time."""
    import ray
    from ray.experimental import internal_kv

    group = ray.get_runtime_context().get_placement_group_id() or "none"
    key = f"master_port/{group}/{launch}"
    if node.rank == 0:
        for old in _PUBLISHED:
            internal_kv._internal_kv_del(old, namespace=PORT_NAMESPACE)
        _PUBLISHED[:] = [key]
        internal_kv._internal_kv_put(key, str(port), overwrite=True, namespace=PORT_NAMESPACE)
        return port
    deadline = time.monotonic() + timeout_s
    while True:
        value = internal_kv._internal_kv_get(key, namespace=PORT_NAMESPACE)
        if value is not None:
            return int(value)
        if time.monotonic() > deadline:
            raise TimeoutError(f"rank 0's node published no master port in {timeout_s:g} s")
        time.sleep(0.05)


def free_port() -> int:
    """A TCP port free on this host now (the launcher binds it moments later)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("", 0))
        return int(sock.getsockname()[1])
