"""The Ray a run started is stopped whole at its end, its autoscaler monitor first.

Ray stops its processes one at a time, each given a second to exit after SIGTERM;
the monitor never exits on SIGTERM, so every run waited that second out.
``shutdown_own_ray`` kills the monitor, then lets ``ray.shutdown()`` stop the rest.
Checked from outside: every process Ray started is gone (reaped) afterwards, and
the monitor was killed, not left to Ray's wait. (How much sooner the command exits
is a bench figure: ``bench/orchestration_bench.py``.)"""

from __future__ import annotations

import signal
from pathlib import Path

import ray

from nestor.orchestrator.backends.ray.cluster import shutdown_own_ray


def test_the_ray_a_run_started_leaves_no_process_and_its_monitor_is_killed(
        monkeypatch) -> None:
    from ray._private import ray_constants
    from ray._private import worker as ray_worker

    ray.init(address="local", num_cpus=1, include_dashboard=False, log_to_driver=False,
             configure_logging=False)
    try:
        node = ray_worker._global_node
        started = {kind: [info.process for info in infos]
                   for kind, infos in node.all_processes.items()}
        monitors = started[ray_constants.PROCESS_TYPE_MONITOR]
        assert monitors and all(p.poll() is None for p in monitors)
        real, seen_at_shutdown = ray.shutdown, []

        def shutdown(*args, **kwargs):
            seen_at_shutdown.extend(p.poll() for p in monitors)
            return real(*args, **kwargs)

        monkeypatch.setattr(ray, "shutdown", shutdown)
    finally:
        shutdown_own_ray()
    assert not ray.is_initialized()
    # Gone before Ray's own shutdown began: killed, not given its second.
    assert seen_at_shutdown == [-signal.SIGKILL] * len(monitors)
    left = [(kind, p.pid) for kind, processes in started.items() for p in processes
            if Path(f"/proc/{p.pid}").exists()]
    assert not left, f"Ray processes left after the run's shutdown: {left}"
