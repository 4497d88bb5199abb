"""Wiring a run to a Ray cluster: start one (or join one), count its slots, check its
GPU nodes, and make the :class:`RayBackend` whose pool of gangs lives within them.

:func:`orchestrator.backends.factory.make_backend` calls :func:`start_backend`; the
engine never sees Ray. The spec reaches here duck-typed (``resources.slots``,
``resources.oversubscribe``, ``resources.gpus_per_trial``, ``stages`` and
``backend_of``): the backends sit below the spec's layer.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import ray

from nestor.orchestrator.backends.interface import ClusterError
from nestor.orchestrator.backends.ray.backend import RayBackend
from nestor.orchestrator.backends.ray.gangs import (
    GangPool,
    cluster_slot_counts,
    gpu_packing,
    slot_resource,
)
from nestor.orchestrator.backends.ray.listening import private_dir, private_token
from nestor.orchestrator.backends.ray.probe import build_problems, node_builds

RAY_TOKEN_LOGGER = "ray._private.authentication.authentication_token_setup"
# A cluster whose GPUs are logical only (tests, dry runs) may skip the start check.
GPU_CHECK_ENV = "NESTOR_GPU_CHECK"

log = logging.getLogger(__name__)


def host_cpus() -> int:
    """This machine's CPUs (those this process may use): a local cluster's size when
    neither the spec nor ``--slots`` gives one."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def joining_runtime_env(environ: dict[str, str] | None = None) -> dict[str, Any] | None:
    """What a driver joining a cluster started elsewhere (``--address``) hands its ranks.

    Workers there have the cluster's environment, not this driver's. The spec's
    import check looked on the driver's PYTHONPATH, so the ranks get it too (made
    absolute: they run in another directory), ahead of the cluster's own."""
    environ = os.environ if environ is None else environ
    entries = [str(Path(entry).resolve())
               for entry in environ.get("PYTHONPATH", "").split(os.pathsep) if entry]
    if not entries:
        return None
    return {"env_vars": {"PYTHONPATH": os.pathsep.join([*entries, "${PYTHONPATH}"])}}


class _NoTokenAdvice(logging.Filter):
    """Drops Ray's advice, on starting a cluster, to turn its token off."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "RAY_AUTH_MODE=disabled" not in record.getMessage()


def quiet_token_advice() -> None:
    """Say nothing of the token of the Ray cluster nestor starts for a run.

    Ray's token is what keeps that cluster (its ports on this host) private to the
    run; Ray's own line about it ("... Set RAY_AUTH_MODE=disabled to opt out")
    tells every user how to turn that protection off, so it is not shown."""
    logger = logging.getLogger(RAY_TOKEN_LOGGER)
    if not any(isinstance(f, _NoTokenAdvice) for f in logger.filters):
        logger.addFilter(_NoTokenAdvice())


@contextlib.contextmanager
def ray_started(what: str) -> Iterator[None]:
    """Ray's start-up failing (its node timing out on a loaded machine, a cluster not
    there) as one :class:`ClusterError` line, not Ray's traceback: the run directory
    holds nothing a retry or `nestor resume` cannot carry on from."""
    try:
        yield
    except (ConnectionError, TimeoutError, RuntimeError, ValueError) as exc:
        raise ClusterError(f"could not start or join {what}: {_first_line(exc)}") from None
    except Exception as exc:  # Ray raises a bare Exception when its node times out
        if type(exc) is not Exception:
            raise
        raise ClusterError(f"could not start or join {what}: {_first_line(exc)} (a loaded"
                           " machine can make Ray's start time out: try again)") from None


# A local Ray's raylet connects to its object store's socket as the store's own thread
# makes it; when the socket is not there yet (most starts on this 2-core machine, seen
# with strace) it sleeps Ray's retry interval, a whole second, before it tries again.
# A twentieth of that, twenty times as many tries: the same 10 s before Ray gives up,
# and the raylet up 1 s sooner. Workers connecting to their raylet retry the same way.
QUICK_SOCKET_RETRIES = {"raylet_client_connect_timeout_milliseconds": 50,
                        "raylet_client_num_connect_attempts": 200}


@contextlib.contextmanager
def without_head_extras() -> Iterator[None]:
    """A local Ray started inside it runs without its dashboard's API server, its
    autoscaler monitor and its log monitor, and with its dashboard agent minimal:
    what a run of nestor's never uses.

    Even with ``include_dashboard=False`` Ray starts a dashboard process (to load its
    usage-statistics module) and waits for it to register, and it starts an
    autoscaler monitor that a single machine's Ray has nothing to scale with: two
    Python processes importing much of Ray while the run starts, about 1 s of the
    start on 2 cores. Its log monitor tails every worker's output to publish it to
    drivers that print it, and nestor's driver asks for none (``log_to_driver=False``:
    a trial's output goes to its own log files): 0.45 s of CPU. Its dashboard agent,
    full, serves an HTTP API (job submission among it) and Prometheus metrics on the
    node's address, and the raylet waits for its metrics server before it registers;
    a minimal agent (what Ray starts where its dashboard's packages are missing, told
    so here) serves neither: 0.2 s less of the start, 0.6 s less of the driver's CPU
    (Ray's check imports aiohttp), and no port of the agent's open. And the wait for
    the raylet to register looks every 20 ms (``registered_node``), not every second.
    nestor asks Ray
    for nothing they serve (no job submission, no state API, no metrics, no
    autoscaling, no worker output): its gangs are placement groups and actors, which
    the GCS and raylet schedule alone. Through Ray's private node class and utility,
    only for the ``ray.init`` inside (a cluster that is joined, or started by
    ``nestor submit``'s nodes, keeps all its processes); where Ray lacks any of them
    (another Ray version) Ray starts as usual."""
    try:
        from ray._private import services as ray_services
        from ray._private import utils as ray_utils
        from ray._private.node import Node
    except ImportError:  # pragma: no cover - depends on Ray's internals
        yield
        return
    names = ("start_api_server", "start_monitor", "start_log_monitor")
    saved = {name: Node.__dict__.get(name) for name in names}
    dependency_error = getattr(ray_utils, "get_dashboard_dependency_error", None)
    get_node = getattr(ray_services, "get_node", None)
    if not all(saved.values()) or dependency_error is None or get_node is None:  # pragma: no cover
        yield
        return

    def no_api_server(self: Any, **_: Any) -> None:
        self._webui_url = None

    def nothing(self: Any) -> None:
        return None

    def minimal_agent() -> ImportError:
        return ImportError("nestor's own Ray: its dashboard agent minimal")

    def node_once_registered(gcs_address: str, node_id: str) -> Any:
        registered_node(gcs_address, node_id)
        return get_node(gcs_address, node_id)

    Node.start_api_server = no_api_server  # type: ignore[method-assign]
    Node.start_monitor = Node.start_log_monitor = nothing  # type: ignore[method-assign]
    ray_utils.get_dashboard_dependency_error = minimal_agent
    ray_services.get_node = node_once_registered
    try:
        yield
    finally:
        for name, method in saved.items():
            setattr(Node, name, method)
        ray_utils.get_dashboard_dependency_error = dependency_error
        ray_services.get_node = get_node


NODE_POLL_S = 0.02  # how often a starting Ray's node table is read for its raylet


def registered_node(gcs_address: str, node_id: str, timeout_s: float = 30.0) -> bool:
    """Wait until the GCS at ``gcs_address`` lists the node ``node_id`` alive; whether
    it did within ``timeout_s``.

    ``ray.init`` asks the GCS for the node it starts through a call that, while the
    raylet has not registered yet (its first 0.5-1 s here), sleeps a whole second
    before it asks again: most of a second of every run's start spent waiting on a
    node already up. Reading the node table every ``NODE_POLL_S`` instead, the call
    that follows finds the node at once. Any failure here leaves the wait to Ray's."""
    from ray._private.services import _get_gcs_client_options
    from ray._private.state import GlobalState

    state = GlobalState()
    deadline = time.monotonic() + timeout_s
    try:
        state._initialize_global_state(_get_gcs_client_options(gcs_address))
        while time.monotonic() < deadline:
            if any(node.get("NodeID") == node_id and node.get("Alive")
                   for node in state.node_table()):
                return True
            time.sleep(NODE_POLL_S)
    except Exception as exc:  # pragma: no cover - depends on Ray's internals
        log.debug("the node table of %s was not read (%s): Ray's own wait", gcs_address, exc)
    finally:
        with contextlib.suppress(Exception):
            state.disconnect()
    return False


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def cluster_slots(workflow: Any, slots: int | None, address: str | None) -> int:
    """Slots to use: the spec's, else --slots, else the Ray cluster's CPUs (GPUs if any)."""
    if workflow.resources.slots is not None:
        wanted = workflow.resources.slots
    elif slots is not None:
        wanted = slots
    else:
        wanted = None
    if address is None and not ray.is_initialized():
        quiet_token_advice()
        with ray_started("a local Ray for this run"), without_head_extras():
            ray.init(
                address="local",  # a Ray of its own, even where another runs on this host
                num_cpus=max(wanted or host_cpus(), 1),
                include_dashboard=False,
                log_to_driver=False,
                configure_logging=False,
                # Its sessions (sockets, logs) in a folder its user alone can enter, not
                # Ray's shared /tmp/ray, whose session folders are 0777 (listening.py).
                # Ray makes its temp folder 0777 itself: it gets one inside the private one.
                _temp_dir=str(private_dir("nestor-ray") / "ray"),
                _system_config=QUICK_SOCKET_RETRIES,
            )
        private_token()
    elif not ray.is_initialized():
        with ray_started(f"the Ray cluster at {address}"):
            ray.init(address=address, log_to_driver=False, configure_logging=False,
                     runtime_env=joining_runtime_env())
    resource = slot_resource()
    packing = gpu_packing(workflow.resources.gpus_per_trial) if resource == "GPU" else 1
    available, idle = cluster_slot_counts(resource, packing)
    if address is not None and wanted is not None and wanted > available:
        available, idle = _await_joining_nodes(resource, packing, wanted, available)
    if wanted is not None and wanted > available and not workflow.resources.oversubscribe:
        raise ClusterError(
            f"the workflow asks for {wanted} slots but the Ray cluster has {available}"
        )
    if address is not None and not workflow.resources.oversubscribe:
        # A shared cluster: other drivers may hold slots. Refuse now, clearly, rather
        # than wait in placement-group creation until Horovod times out.
        if wanted is None:
            wanted = idle  # what the cluster has free now
        if wanted > idle or wanted < 1:
            raise ClusterError(
                f"the workflow asks for {wanted} slots but only {idle} of the Ray"
                f" cluster's {available} are free (other workflows hold the rest); lower"
                " resources.slots or --slots, or wait for them"
            )
    return wanted or available


JOIN_WAIT_ENV = "NESTOR_JOIN_WAIT_S"


def _await_joining_nodes(resource: str, packing: int, wanted: int,
                         available: int) -> tuple[int, int]:
    """A cluster that was just started (a Slurm job's) can list a node alive before its
    resources reach the cluster's view: its slots show up a moment later (seen in CI: 2
    of 4 slots, the second node's 2 CPUs arriving after the driver looked). Wait for them
    up to ``NESTOR_JOIN_WAIT_S`` (30 s), saying so, before refusing."""
    deadline = time.monotonic() + float(os.environ.get(JOIN_WAIT_ENV, "30"))
    print(f"waiting for the Ray cluster's slots: {available} of {wanted} so far",
          file=sys.stderr, flush=True)
    idle = available
    while time.monotonic() < deadline:
        time.sleep(0.5)
        available, idle = cluster_slot_counts(resource, packing)
        if available >= wanted:
            break
    return available, idle


def check_gpu_builds(workflow: Any) -> None:
    """Where the ranks will be granted GPUs, refuse to start on a node whose torch is a
    CPU build (or whose Horovod lacks NCCL, for Horovod stages): each of its trials
    would fail. Checked once per node, before any trial starts."""
    if slot_resource() != "GPU" or os.environ.get(GPU_CHECK_ENV, "1") == "0":
        return
    problems = build_problems(node_builds(), {workflow.backend_of(s.name)
                                              for s in workflow.stages})
    if problems:
        raise ClusterError(
            "the ranks are granted GPUs, but cannot use them: " + "; ".join(problems)
            + "; run `nestor doctor` on that node and rerun set-up there"
            f" (NESTOR_TORCH_FLAVOUR=cuda scripts/setup.sh), or set {GPU_CHECK_ENV}=0 where"
            " the cluster's GPUs are logical only")


class OwnedRayBackend(RayBackend):
    """A RayBackend that also shuts down the Ray it started for the run."""

    def shutdown(self) -> None:
        try:
            super().shutdown()
        finally:
            shutdown_own_ray()


def shutdown_own_ray() -> None:
    """``ray.shutdown()`` of the Ray this process started, a second sooner.

    Ray stops its processes one at a time, each sent SIGTERM and given a second to
    exit; its autoscaler monitor never exits on SIGTERM, so every run's exit waited
    that second out (1.0 of 1.35 s measured here). The monitor holds nothing (a
    local Ray does not autoscale), so it is killed first, and Ray finds it gone.
    Through Ray's private node handle: where that is missing (another Ray version)
    the plain shutdown still runs."""
    try:
        from ray._private import ray_constants
        from ray._private import worker as ray_worker

        node = ray_worker._global_node
        monitors: list[Any] = [] if node is None else \
            node.all_processes.get(ray_constants.PROCESS_TYPE_MONITOR, [])
        for info in monitors:
            info.process.kill()
            info.process.wait(timeout=5)
    except Exception as exc:  # pragma: no cover - depends on Ray's internals
        log.debug("Ray's monitor was left to ray.shutdown(): %s", exc)
    ray.shutdown()


def start_backend(workflow: Any, run_dir: Path, *, slots: int | None = None,
                  address: str | None = None) -> RayBackend:
    """Start (or join, with ``address``) a Ray cluster for ``workflow`` and return the
    backend that runs its attempts there; its ``shutdown`` ends a Ray it started.

    Refuses (:class:`ClusterError`) a cluster too small for the spec's slots, GPU
    nodes whose builds cannot use their GPUs, and (joining one) a run directory
    that not every node sees."""
    started_ray = not ray.is_initialized()
    try:
        total = cluster_slots(workflow, slots, address)
        check_gpu_builds(workflow)
        if address is not None:  # a cluster started elsewhere: do all its nodes see run_dir?
            from nestor.orchestrator.backends.ray.visibility import check_run_dir_shared

            check_run_dir_shared(run_dir)
        pool = GangPool(total, oversubscribe=workflow.resources.oversubscribe,
                        use_gpu=slot_resource() == "GPU", shared=address is not None,
                        gpu_share=workflow.resources.gpus_per_trial)
    except BaseException:
        if started_ray:
            shutdown_own_ray()
        raise
    backend = (OwnedRayBackend if started_ray else RayBackend)(pool)
    backend.slots_source = slots_source(workflow, slots, address)
    return backend


def slots_source(workflow: Any, slots: int | None, address: str | None) -> str:
    """Where :func:`cluster_slots`'s count came from, as a run says it."""
    if workflow.resources.slots is not None:
        return "resources.slots"
    if slots is not None:
        return "--slots"
    if address is not None:
        return f"the free {slot_resource()} slots of the Ray cluster at {address}"
    return f"this machine's {slot_resource()}s"
