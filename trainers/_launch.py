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

Each placeholder is replaced inside one argv word and nothing else: a value
with spaces or quotes (a log directory's path) stays one word, and no shell
ever reads it. ``{{np}}`` is a literal ``{np}``; any other brace (a JSON
argument, a ``python -c`` dict) is left alone. A ``{name}`` that is not a
placeholder is an error, in ``nestor validate`` and at run time, so a typo
does not reach the program as text.
"""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

# Set by orchestrator.gangs.GroupedRanks in every rank of a gang (the same in all):
# each host's ranks, in rank order, and the address of rank 0's node.
GANG_HOSTS_ENV = "NESTOR_GANG_HOSTS"
GANG_ADDR_ENV = "NESTOR_GANG_ADDR"

PLACEHOLDERS: dict[str, str] = {
    "np": "ranks of the trial (data x model)",
    "hosts": "host:ranks per node, comma-separated (horovodrun -H)",
    "hostfile": "a file with one 'host slots=N' line per node (mpirun, horovodrun --hostfile)",
    "master_addr": "the address of the first node (rank 0's)",
    "master_port": "a free TCP port on the first node",
    "nnodes": "the number of nodes the ranks are on",
    "nproc_per_node": "ranks per node (only when every node has the same number)",
}
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
    outside a gang (a direct ``run_trial``, ``python -m trainers``) every rank
    is on this host."""

    hosts: tuple[tuple[str, int], ...]
    master_addr: str
    master_port: int

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


def free_port() -> int:
    """A TCP port free on this host now (the launcher binds it moments later)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("", 0))
        return int(sock.getsockname()[1])
