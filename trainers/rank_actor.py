"""The process one rank of a torch-backend gang lives in (a Ray actor).

A Horovod gang's ranks are Horovod's own worker actors
(``horovod.ray.worker.BaseHorovodWorker``). A torch gang must not need
Horovod at all (the torch backend is for sites that cannot build it), so its
ranks are this class: the same few calls the gang makes of a rank (where it
is, which GPUs Ray gave it, its environment, run a function), and one more,
a free port for the process group's rendezvous on rank 0.

It lives with the trainers, not the orchestrator, because it is what the
ranks import: nothing here knows of trials or searches.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from typing import Any


class RankActor:
    """One rank: ``execute(fn)`` runs ``fn(self)`` in this process, trial after trial."""

    def __init__(self, world_rank: int, world_size: int) -> None:
        self.world_rank = world_rank
        self.world_size = world_size

    def node_id(self) -> str:
        import ray

        return ray.get_runtime_context().get_node_id()

    def hostname(self) -> str:
        return socket.gethostname()

    def get_gpu_ids(self) -> list[Any]:
        import ray

        return list(ray.get_gpu_ids())

    def update_env_vars(self, env: dict[str, Any]) -> None:
        os.environ.update({str(k): str(v) for k, v in env.items()})

    def free_port(self) -> int:
        """A port free on this node now, for torch.distributed's store on rank 0.

        Closed again before the store binds it: a race with another process is
        possible but rare, and fails the gang's start, which is retried."""
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("", 0))
            return int(sock.getsockname()[1])

    def execute(self, fn: Callable[[Any], Any]) -> Any:
        return fn(self)
