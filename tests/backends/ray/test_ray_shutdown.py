"""The Ray a run started is stopped whole at its end, its autoscaler monitor first.

Ray stops its processes one at a time, each given a second to exit after SIGTERM;
the monitor never exits on SIGTERM, so every run waited that second out.
``shutdown_own_ray`` kills the monitor, then lets ``ray.shutdown()`` stop the rest.
Checked from outside, in a process of its own (the session's shared Ray is left
alone): every process Ray started is gone afterwards, and the monitor was dead
before Ray's own shutdown began. (How much sooner the command exits is a bench
figure: ``bench/orchestration_bench.py``.)"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

CHILD = textwrap.dedent("""\
    import json, sys

    import ray
    from ray._private import ray_constants
    from ray._private import worker as ray_worker

    from nestor.orchestrator.backends.ray.cluster import shutdown_own_ray

    ray.init(address="local", num_cpus=1, include_dashboard=False, log_to_driver=False,
             configure_logging=False)
    node = ray_worker._global_node
    started = {kind: [info.process for info in infos]
               for kind, infos in node.all_processes.items()}
    monitors = started[ray_constants.PROCESS_TYPE_MONITOR]
    alive_before = [p.poll() is None for p in monitors]
    real, at_shutdown = ray.shutdown, []

    def shutdown(*args, **kwargs):
        at_shutdown.extend(p.poll() for p in monitors)
        return real(*args, **kwargs)

    ray.shutdown = shutdown
    shutdown_own_ray()
    json.dump({"pids": {kind: [p.pid for p in ps] for kind, ps in started.items()},
               "alive_before": alive_before, "at_shutdown": at_shutdown,
               "initialized": ray.is_initialized()}, sys.stdout)
    """)


def test_the_ray_a_run_started_leaves_no_process_and_its_monitor_is_killed() -> None:
    done = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["alive_before"] and all(seen["alive_before"]) and not seen["initialized"]
    # Gone before Ray's own shutdown began: killed, not given its second.
    assert seen["at_shutdown"] == [-signal.SIGKILL] * len(seen["alive_before"])
    left = [(kind, pid) for kind, pids in seen["pids"].items() for pid in pids
            if Path(f"/proc/{pid}").exists()]
    assert not left, f"Ray processes left after the run's shutdown: {left}"
