"""Asking a Ray cluster about itself without joining it for a run: `nestor doctor`'s
probe of a cluster (from a child process with a time limit, because a cluster with
token authentication makes a driver without the token wait for ever), and the torch
and Horovod builds on each GPU node that ``nestor run`` checks before any trial.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

RAY_PROBE_TIMEOUT_S = 20.0

_RAY_PROBE = r"""
import json, sys
import ray
try:
    ray.init(address=sys.argv[1], log_to_driver=False, logging_level="ERROR")
except Exception as exc:
    said = (str(exc).splitlines() or [""])[0]
    print(json.dumps({"error": f"{type(exc).__name__}: {said}"}))
    sys.exit(0)
nodes = []
for node in ray.nodes():
    if not node.get("Alive"):
        continue
    res = node.get("Resources", {})
    nodes.append({"node_id": node["NodeID"], "address": node.get("NodeManagerAddress"),
                  "cpus": res.get("CPU", 0), "gpus": res.get("GPU", 0)})
found = {"address": ray.get_runtime_context().gcs_address, "nodes": nodes}
if len(sys.argv) > 2:  # --run-dir: does every node see it?
    from pathlib import Path
    from nestor.orchestrator.backends.ray.visibility import RunDirNotShared, check_run_dir_shared
    try:
        views = check_run_dir_shared(Path(sys.argv[2]))
        found["run_dir"] = {"path": sys.argv[2], "shared": True, "nodes": len(views)}
    except RunDirNotShared as exc:
        found["run_dir"] = {"path": sys.argv[2], "shared": False, "error": str(exc)}
    except OSError as exc:
        found["run_dir"] = {"path": sys.argv[2], "shared": False,
                            "error": f"cannot write a marker there: {exc}"}
print(json.dumps(found))
"""


def local_ray_address() -> str | None:
    """The cluster last started on this machine, as ``ray.init(address="auto")`` finds
    it (Ray's own record, left behind even when that cluster is gone)."""
    record = Path(os.environ.get("RAY_TMPDIR", "/tmp")) / "ray" / "ray_current_cluster"
    try:
        return record.read_text().strip() or None
    except OSError:
        return None


def _listening(address: str, timeout_s: float = 2.0) -> bool:
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]") or "127.0.0.1", int(port)),
                                      timeout=timeout_s):
            return True
    except (OSError, ValueError):
        return False


def ray_cluster(address: str | None, timeout_s: float = RAY_PROBE_TIMEOUT_S,
                run_dir: Path | None = None) -> dict[str, Any]:
    """The Ray cluster at ``address`` (or RAY_ADDRESS, or the one last started on this
    machine), asked from a child process that gives up after ``timeout_s``; with
    ``run_dir``, also whether every node sees that directory
    (``orchestrator.backends.ray.visibility``).

    Nothing is started, and nothing is waited for where no one listens: a GCS port
    that refuses the connection is answered at once."""
    target = address or os.environ.get("RAY_ADDRESS") or local_ray_address()
    if target is None:
        return {"reachable": False, "asked": None,
                "error": "none given (--address or RAY_ADDRESS) and none started here"}
    if target.count(":") == 1 and not target.startswith(("ray://", "http")) \
            and not _listening(target):
        return {"reachable": False, "asked": target, "error": "nothing listens there"}
    try:
        extra = [str(Path(run_dir).resolve())] if run_dir is not None else []
        done = subprocess.run([sys.executable, "-c", _RAY_PROBE, target, *extra],
                              capture_output=True, text=True, check=False,
                              timeout=timeout_s + (30 if run_dir is not None else 0))
    except subprocess.TimeoutExpired:
        return {"reachable": False, "asked": target,
                "error": f"it listens but did not let this driver in within {timeout_s:.0f} s"
                         " (a cluster with token authentication needs RAY_AUTH_MODE=token and"
                         " its RAY_AUTH_TOKEN)"}
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return {"reachable": False, "asked": target, "error": tail}
    found = json.loads(lines[-1])
    if "error" in found:
        return {"reachable": False, "asked": target, "error": found["error"]}
    return {"reachable": True, "asked": target, **found}


def node_builds(timeout_s: float = 120.0) -> list[dict[str, Any]]:
    """The torch and Horovod builds on each live node of the connected Ray cluster
    that offers GPUs, as its ranks import them: one zero-CPU task per node."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    def build() -> dict[str, Any]:  # nested: sent by value, the node need not import this
        import socket

        found: dict[str, Any] = {"host": socket.gethostname()}
        try:
            import torch

            found.update(torch=torch.__version__, torch_cuda=torch.version.cuda)
        except Exception as exc:
            found.update(torch=None, torch_error=f"{type(exc).__name__}: {exc}")
        try:
            import horovod
            import horovod.torch as hvd

            found.update(horovod=horovod.__version__, nccl_built=bool(hvd.nccl_built()))
        except Exception:  # no Horovod: the torch backend needs none
            found.update(horovod=None)
        return found

    probe = ray.remote(num_cpus=0)(build)
    nodes = [n for n in ray.nodes() if n.get("Alive") and n["Resources"].get("GPU")]
    refs = [probe.options(scheduling_strategy=NodeAffinitySchedulingStrategy(
        n["NodeID"], soft=False)).remote() for n in nodes]
    return [{**found, "gpus": node["Resources"]["GPU"]}
            for found, node in zip(ray.get(refs, timeout=timeout_s), nodes, strict=True)]


def build_problems(builds: list[dict[str, Any]], backends: set[str]) -> list[str]:
    """What would make ranks granted GPUs unable to use them, per node.

    >>> build_problems([{"host": "n1", "gpus": 8, "torch": "2.13.0+cpu", "torch_cuda": None,
    ...                  "horovod": None}], {"torch"})
    ['n1 (8 GPUs): torch 2.13.0+cpu is a CPU-only build']
    """
    problems = []
    for node in builds:
        where = f"{node['host']} ({node['gpus']:g} GPUs)"
        if node.get("torch") is None:
            problems.append(f"{where}: torch cannot be imported ({node.get('torch_error')})")
        elif not node.get("torch_cuda"):
            problems.append(f"{where}: torch {node['torch']} is a CPU-only build")
        if "horovod" in backends and node.get("horovod") and not node.get("nccl_built"):
            problems.append(f"{where}: Horovod {node['horovod']} was built without NCCL")
    return problems


def wait_for_nodes(address: str, nodes: int, deadline: float) -> tuple[int, float]:
    """Join the cluster at ``address`` until ``nodes`` of its nodes are alive or the
    ``time.monotonic()`` deadline passes; returns the live nodes and the cluster's
    CPUs, and leaves the cluster (a Slurm job's node helper waits so)."""
    import logging

    import ray

    logging.getLogger("ray").setLevel(logging.WARNING)
    ray.init(address=address, log_to_driver=False, configure_logging=False)
    try:
        alive = 0
        while time.monotonic() < deadline:
            up = [n for n in ray.nodes() if n.get("Alive")]
            alive = len(up)
            # A node is alive in the node table before the cluster's resource view
            # counts its CPUs (seen on a loaded machine: 2 nodes alive, the CPUs of
            # one): wait for both, or the driver started next finds too few slots.
            declared = sum((n.get("Resources") or {}).get("CPU", 0) for n in up)
            if alive >= nodes and ray.cluster_resources().get("CPU", 0) >= declared:
                return alive, ray.cluster_resources().get("CPU", 0)
            time.sleep(0.5)
        return alive, ray.cluster_resources().get("CPU", 0)
    finally:
        ray.shutdown()
