"""What the tests of multi-rank trials share: the rank scripts a launcher starts,
a sweep spec around a launcher command, and a Ray cluster of several logical
nodes on this one machine.

This folder is on ``sys.path`` for every test (pytest puts the folder of the
root ``conftest.py`` there), so a test anywhere below imports it by name::

    from rank_helpers import TORCH_SUM, command_sweep_spec, ray_cluster
"""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import psutil

# Each rank adds ``rank + 1`` to an allreduce over Gloo, so the sum is 3.0 only
# when both of 2 ranks took part; each rank prints a line of its own, and rank 0
# prints the sum as the figure of merit.
HOROVOD_SUM = """
import os
import horovod.torch as hvd
import torch

hvd.init()
total = hvd.allreduce(torch.tensor([float(hvd.rank() + 1)]), op=hvd.Sum).item()
print(f"rank {hvd.rank()} of {hvd.size()} pid {os.getpid()}", flush=True)
if hvd.rank() == 0:
    print(f"FoM: {total}", flush=True)
"""

# The same with torch.distributed, for torchrun. The node is torchrun's
# ``GROUP_RANK`` (its ``--node_rank``); a first argument ``--x=N`` (a trial's
# hyperparameter) is added to the figure of merit.
TORCH_SUM = """
import os
import sys
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
total = torch.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(total)
print(f"rank {dist.get_rank()} of {dist.get_world_size()} node {os.environ.get('GROUP_RANK')}"
      f" args {sys.argv[1:]}", flush=True)
extra = float(sys.argv[1].split("=")[1]) if sys.argv[1:] else 0.0
if dist.get_rank() == 0:
    print(f"FoM: {total.item() + extra}", flush=True)
dist.destroy_process_group()
"""



def command_sweep_spec(name: str, command: Sequence[str]) -> str:
    """A workflow of one grid search over ``x`` in (10, 20) whose trials run
    ``command`` (a launcher) on 2 data-parallel slots; ``fom`` is minimised."""
    return textwrap.dedent(f"""
        name: {name}
        resources: {{slots: 2}}
        stages:
          - name: tune
            kind: hpo
            trainer: {{command: {json.dumps(list(command))}}}
            parallel: {{data: 2}}
            search: {{algorithm: grid}}
            space:
              x: {{type: categorical, values: [10, 20]}}
            objective: {{metric: fom, mode: min}}
            trial: {{timeout: 240}}
        """)


# A head with no CPUs and the nodes given as JSON in argv[1] (``add_node``'s
# keyword arguments, one mapping a node). Prints the address and each node's
# raylet pid (to kill a node as a crash would), then waits until stdin closes.
_CLUSTER = """
import json, sys
from ray import ray_constants
from ray.cluster_utils import Cluster

cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0,
                                                        "include_dashboard": False})
nodes = [cluster.add_node(**args) for args in json.loads(sys.argv[1])]
cluster.wait_for_nodes()
raylets = {n.node_id: n.all_processes[ray_constants.PROCESS_TYPE_RAYLET][0].process.pid
           for n in nodes}
print(json.dumps({"address": cluster.address, "raylets": raylets}), flush=True)
sys.stdin.read()  # until the test closes it
cluster.shutdown()
"""


@contextlib.contextmanager
def ray_cluster(env: Mapping[str, str],
                nodes: Sequence[Mapping[str, Any]]) -> Iterator[dict[str, Any]]:
    """A ``ray.cluster_utils.Cluster`` in a helper process, for ``nestor run --address``.

    Yields ``{"address": ..., "raylets": {node id: raylet pid}}``; shuts the
    cluster down on the way out (killed if it takes over a minute). Processes it
    leaves behind are the caller's to reap (``kill_tagged``)::

        with ray_cluster(env, [{"num_cpus": 3}] * 4) as cluster:
            subprocess.run([NESTOR, "run", spec, "--address", cluster["address"]], env=env)
    """
    proc = subprocess.Popen([sys.executable, "-c", _CLUSTER, json.dumps(list(nodes))],
                            env=dict(env), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True)
    try:
        line = proc.stdout.readline() if proc.stdout is not None else ""
        if not line:
            raise RuntimeError(f"the Ray cluster did not start (exit status {proc.wait()})")
        yield json.loads(line)
    finally:
        if proc.stdin is not None:
            proc.stdin.close()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def rank_log(path: Path) -> list[dict[str, Any]]:
    """The JSON lines a test trainer's ranks appended to ``path`` (none yet: [])."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def lose_node(raylet: int) -> None:
    """What a crashed node does to a cluster: its raylet and every process it
    started (workers, ranks) are gone at once."""
    node = psutil.Process(raylet)
    for process in [node, *node.children(recursive=True)]:
        with contextlib.suppress(psutil.NoSuchProcess):
            process.send_signal(signal.SIGKILL)


def alive(pid: int) -> bool:
    """Running, not a zombie waiting for PID 1 to reap it (from outside: /proc)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"
