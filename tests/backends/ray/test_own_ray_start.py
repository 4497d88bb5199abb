"""The Ray a run starts for itself is Ray's core alone: no dashboard API server, no
autoscaler monitor (about 1 s of a 2-core machine's start), no log monitor and a
minimal dashboard agent (no port of its own), its raylet retries its sockets every
50 ms rather than every second, as long in all, and its start waits for the raylet to
register by looking every 20 ms, not every second.

Checked in a process of its own (the session's shared Ray is left alone), through
nestor's own start (``cluster_slots``), and from outside: no process of that Ray's
session runs Ray's ``dashboard/dashboard.py``, its autoscaler's ``monitor.py`` or its
``log_monitor.py``, while a task still runs on it; a Ray started afterwards in the
same process, not through nestor, has all three again."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

CHILD = textwrap.dedent("""\
    import contextlib, json, os, sys, time
    from types import SimpleNamespace

    import ray
    from ray._private import ray_constants, worker as ray_worker

    from nestor.orchestrator.backends.ray.cluster import cluster_slots, shutdown_own_ray

    def session_processes(session):
        found = []
        for pid in os.listdir("/proc"):
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as handle:
                    line = handle.read().replace(b"\\0", b" ").decode()
            except OSError:
                continue
            if session in line:
                found.append(line)
        return found

    def ray_scripts(session):
        lines = session_processes(session)
        return {name: any(name in line for line in lines)
                for name in ("dashboard/dashboard.py", "autoscaler/_private/monitor.py",
                             "_private/log_monitor.py", "raylet", "gcs_server")}

    def listening_ports(pid):
        listening = {}
        for table in ("/proc/net/tcp", "/proc/net/tcp6"):
            with open(table) as handle:
                for row in handle.read().splitlines()[1:]:
                    fields = row.split()
                    if fields[3] == "0A":  # LISTEN
                        listening[fields[9]] = int(fields[1].rsplit(":", 1)[1], 16)
        inodes = set()
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                if target.startswith("socket:["):
                    inodes.add(target[len("socket:["):-1])
        return sorted({listening[i] for i in inodes if i in listening})

    def agent_ports(node):  # the ports its raylet's dashboard agent listens on, settled
        raylet = node.all_processes["raylet"][0].process.pid
        last, deadline = None, time.monotonic() + 30
        while time.monotonic() < deadline:
            for pid in os.listdir("/proc"):
                try:
                    with open(f"/proc/{pid}/stat") as handle:
                        parent = int(handle.read().rsplit(")", 1)[1].split()[1])
                    with open(f"/proc/{pid}/cmdline", "rb") as handle:
                        line = handle.read().decode(errors="replace")
                    if parent == raylet and ("DashboardAgent" in line or "agent.py" in line):
                        ports = listening_ports(pid)
                        break
                except (OSError, ValueError):
                    continue
            else:
                ports = None
            if ports and ports == last:
                return ports
            last = ports
            time.sleep(1.0)
        return last

    # How long Ray's own lookup of the starting node took (it sleeps a whole second
    # between tries while the raylet has not registered).
    from ray._private.state import GlobalState
    lookups = []
    real_lookup = GlobalState.get_node
    def timed_lookup(self, node_id):
        began = time.monotonic()
        try:
            return real_lookup(self, node_id)
        finally:
            lookups.append(time.monotonic() - began)
    GlobalState.get_node = timed_lookup

    workflow = SimpleNamespace(resources=SimpleNamespace(slots=1, gpus_per_trial=1.0,
                                                         oversubscribe=False))
    slots = cluster_slots(workflow, None, None)
    node = ray_worker._global_node
    session = node.get_session_dir_path()

    @ray.remote
    def square(x):
        return x * x

    seen = {"slots": slots, "kinds": sorted(node.all_processes),
            "scripts": ray_scripts(session), "task": ray.get(square.remote(7)),
            "agent": agent_ports(node), "lookups": list(lookups),
            "config": node._ray_params._system_config}
    shutdown_own_ray()
    ray.init(address="local", num_cpus=1, include_dashboard=False, log_to_driver=False,
             configure_logging=False)
    plain = ray_worker._global_node
    seen["plain_kinds"] = sorted(plain.all_processes)
    seen["plain_scripts"] = ray_scripts(plain.get_session_dir_path())
    seen["plain_agent"] = agent_ports(plain)
    seen["agent_http"] = ray_constants.DEFAULT_DASHBOARD_AGENT_LISTEN_PORT
    ray.shutdown()
    print(json.dumps(seen))
    """)


def test_the_ray_a_run_starts_runs_without_dashboard_and_monitor() -> None:
    done = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True,
                          timeout=180, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["slots"] == 1 and seen["task"] == 49  # Ray's core works without them
    assert "dashboard" not in seen["kinds"] and "monitor" not in seen["kinds"], seen["kinds"]
    assert "log_monitor" not in seen["kinds"], seen["kinds"]
    assert seen["scripts"] == {"dashboard/dashboard.py": False,
                               "autoscaler/_private/monitor.py": False,
                               "_private/log_monitor.py": False, "raylet": True,
                               "gcs_server": True}, seen["scripts"]
    assert seen["config"]["raylet_client_connect_timeout_milliseconds"] == 50
    timeout_ms = seen["config"]["raylet_client_connect_timeout_milliseconds"]
    tries = seen["config"]["raylet_client_num_connect_attempts"]
    assert timeout_ms * tries == 10_000  # as long in all as Ray's default (1 s x 10)
    # Only nestor's own start leaves them out: Ray's methods are back afterwards.
    assert {"dashboard", "monitor", "log_monitor"} <= set(seen["plain_kinds"]), seen["plain_kinds"]
    assert all(seen["plain_scripts"].values()), seen["plain_scripts"]
    # Ray's lookup of its node came once the raylet had registered: at once, not after
    # a second's sleep (registered_node waited, reading the node table every 20 ms).
    assert len(seen["lookups"]) == 1 and seen["lookups"][0] < 0.5, seen["lookups"]
    # Its dashboard agent is minimal: no HTTP API (job submission among it) and no gRPC
    # server listening; Ray's own start has them (its HTTP API on 52365 unless another
    # Ray on this machine holds that port: the session's shared one may).
    assert seen["agent_http"] not in seen["agent"], seen
    assert len(seen["agent"]) <= 1 and len(seen["plain_agent"]) >= 2, seen
