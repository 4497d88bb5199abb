"""Is the run directory the same directory on every node of the Ray cluster?

Every rank writes its trial's result, checkpoint and logs into the run
directory, and the driver reads them back from there. On a cluster whose nodes
do not share it (a node-local ``/tmp``, ``runs/`` relative to a home directory
that is not mounted on the compute nodes, a scratch filesystem missing from one
node) nothing fails at once: ranks write where the driver never looks, results
are lost and re-run, a greedy ensemble falls back to top-k because it cannot
read its members' checkpoints. So the driver checks before it starts: it writes
a marker file with a random token into the run directory, and one tiny Ray task
pinned to each alive node (``NodeAffinitySchedulingStrategy``, ``soft=False``:
that node or nowhere) reads it back. A node that cannot find the file, or finds
one with other content (its own directory of the same name), is named in the
error.

>>> import ray; ray.init(address="auto")                       # doctest: +SKIP
>>> check_run_dir_shared(Path("runs/mnist-20261124-101500"))   # doctest: +SKIP
[NodeView(node_id='6c1f...', address='10.0.0.5', seen=True, reason='')]
"""

from __future__ import annotations

import os
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MARKER_PREFIX = ".nestor-visible-"
SETTLE_S = 10.0  # NFS caches "no such file" for a few seconds; each node retries this long
ANSWER_TIMEOUT_S = 120.0  # a node whose task has not answered by then counts as not seeing it


@dataclass(frozen=True)
class NodeView:
    """What one Ray node saw at the run directory's path."""

    node_id: str
    address: str
    seen: bool
    reason: str = ""  # why not, when not seen


class RunDirNotShared(Exception):
    """Some nodes of the Ray cluster do not see the run directory the driver sees."""

    def __init__(self, run_dir: Path, blind: list[NodeView], total: int) -> None:
        self.run_dir = run_dir
        self.blind = blind
        self.total = total
        nodes = "; ".join(f"node {view.node_id[:12]} at {view.address}: {view.reason}"
                          for view in blind)
        super().__init__(
            f"the run directory {run_dir} is not visible from {len(blind)} of the Ray"
            f" cluster's {total} nodes ({nodes}). Every node writes trial results and"
            " checkpoints there and the driver reads them back: put it on a filesystem every"
            " node mounts (--run-dir on the shared project or scratch space, not /tmp or a"
            " node-local disk)")


def _look(marker: str, token: str, settle_s: float) -> tuple[bool, str, str]:
    """Runs on one node: does ``marker`` exist there with ``token`` in it?

    Lists the directory before each try: on NFS a listing revalidates the
    directory, where a bare open may still hit a cached "no such file"."""
    import ray

    node_id = ray.get_runtime_context().get_node_id()
    path = Path(marker)
    deadline = time.monotonic() + settle_s
    while True:
        try:
            os.listdir(path.parent)
            content = path.read_text()
        except FileNotFoundError:
            reason = (f"no {path.name} in {path.parent}" if path.parent.is_dir()
                      else f"{path.parent} does not exist there")
        except OSError as exc:
            reason = f"cannot read it: {exc.strerror or exc}"
        else:
            if content == token:
                return True, node_id, ""
            reason = (f"{path.parent} exists there but is another directory (the marker"
                      " holds another token)")
        if time.monotonic() >= deadline:
            return False, node_id, reason
        time.sleep(0.5)


def alive_nodes() -> list[dict[str, Any]]:
    import ray

    return [node for node in ray.nodes() if node.get("Alive")]


def check_run_dir_shared(run_dir: Path, *, settle_s: float = SETTLE_S,
                         timeout_s: float = ANSWER_TIMEOUT_S) -> list[NodeView]:
    """Check every alive node of the connected Ray cluster sees ``run_dir``.

    Returns what each node saw; raises ``RunDirNotShared`` naming the path and the
    nodes that do not see it. Needs ``ray.init`` first. Costs one small task per
    node (no CPU reserved: it runs beside trials already there), and on a node
    that cannot see the directory, ``settle_s`` of retries.
    """
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    run_dir = Path(run_dir).resolve()
    token = secrets.token_hex(16)
    marker = run_dir / f"{MARKER_PREFIX}{token}"
    fd = os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        os.write(fd, token.encode())
        os.fsync(fd)  # on the server before any node looks
    finally:
        os.close(fd)
    look = ray.remote(num_cpus=0, max_retries=0)(_look)
    try:
        nodes = alive_nodes()
        pending = {
            look.options(scheduling_strategy=NodeAffinitySchedulingStrategy(
                node["NodeID"], soft=False)).remote(str(marker), token, settle_s): node
            for node in nodes}
        views: list[NodeView] = []
        ready, late = ray.wait(list(pending), num_returns=len(pending), timeout=timeout_s)
        for ref in ready:
            node = pending[ref]
            try:
                seen, _, reason = ray.get(ref)
            except Exception as exc:  # the node died, or its worker could not start
                seen, reason = False, f"its check failed ({type(exc).__name__})"
            views.append(NodeView(node["NodeID"], node.get("NodeManagerAddress", "?"), seen,
                                  reason))
        for ref in late:
            node = pending[ref]
            ray.cancel(ref, force=True)
            views.append(NodeView(node["NodeID"], node.get("NodeManagerAddress", "?"), False,
                                  f"did not answer within {timeout_s:.0f} s"))
    finally:
        marker.unlink(missing_ok=True)
    blind = [view for view in views if not view.seen]
    if blind:
        raise RunDirNotShared(run_dir, blind, len(views))
    return views
