"""What runs inside a Slurm job on each node: ``python -m orchestrator.slurm.node``.

    plan    --job-id J                    print "HEAD_IP PORT": a free GCS port for this job
    start   --role head|worker ...        start this node's Ray, stop it when told
    wait    --address A --nodes N         until N Ray nodes are alive (or a clear error)
    cleanup --job-id J                    stop whatever Ray this job left on this node

Why a runner instead of ``srun ray start --block``: on ``scancel`` Slurm sends
SIGTERM to every step at once, so Ray would die under the driver while the
driver is still journalling its clean stop. Here ``ray start`` daemonizes
(its processes leave the step), and the runner stops them only once the
driver is gone (head) or the head is gone (workers), at most ``--grace``
seconds later (keep it below Slurm's KillWait). Processes are found by a
per-job marker in their environment, never by name: other Ray clusters on
the same node (other jobs, other users' work) are left alone, which is why
this never calls ``ray stop``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

MARKER = "NESTOR_SLURM_RAY"
PORT_LOW, PORT_SPAN, PORT_STEP = 20000, 40000, 7


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("", port))
        except OSError:
            return False
    return True


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("", 0))
        return sock.getsockname()[1]


def job_port(job_id: int) -> int:
    """A GCS port derived from the job id (two jobs on a node differ), moved on
    while taken: the first free one of a sequence that starts at the job's."""
    for k in range(200):
        port = PORT_LOW + (job_id * PORT_STEP + k * 97) % PORT_SPAN
        if _port_free(port) and _port_free(port + 1):
            return port
    raise SystemExit(f"error: no free port for job {job_id}'s Ray head near {PORT_LOW}")


def node_ip() -> str:
    """The address other nodes reach this one at (the interface of the default route)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        try:
            sock.connect(("10.255.255.255", 1))
            return sock.getsockname()[0]
        except OSError:
            return "127.0.0.1"


def _marked(marker: str, prefix: bool = False) -> list:
    import psutil

    me = os.getpid()
    found = []
    for proc in psutil.process_iter():
        if proc.pid == me:
            continue
        with contextlib.suppress(psutil.Error):
            value = proc.environ().get(MARKER)
            if value is not None and (value.startswith(marker) if prefix else value == marker):
                found.append(proc)
    return found


def kill_marked(marker: str, prefix: bool = False, wait_s: float = 5) -> int:
    """SIGTERM, then SIGKILL after ``wait_s``, every process carrying the marker."""
    import psutil

    procs = _marked(marker, prefix)
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            proc.terminate()
    _, alive = psutil.wait_procs(procs, timeout=wait_s)
    for proc in alive:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    return len(procs)


def _reachable(address: str) -> bool:
    host, port = address.rsplit(":", 1)
    try:
        with socket.create_connection((host, int(port)), timeout=1):
            return True
    except OSError:
        return False


def _pid_alive(pid_file: Path) -> bool:
    try:
        pid = int(pid_file.read_text().strip())
        os.kill(pid, 0)
    except (OSError, ValueError):
        return False
    return True


def start(role: str, job_id: str, address: str, job_tmp: Path, grace_s: float) -> int:
    # The node's name, not SLURM_NODEID (which counts within a step): unique
    # even when several Slurm nodes share a host, as in slurm/local-slurm.sh.
    node_id = os.environ.get("SLURMD_NODENAME") or socket.gethostname()
    marker = f"{job_id}-{node_id}"
    temp_dir = job_tmp / node_id
    temp_dir.mkdir(parents=True, exist_ok=True)
    cpus = os.environ.get("SLURM_CPUS_ON_NODE") or str(os.cpu_count() or 1)
    argv = [str(Path(sys.executable).parent / "ray"), "start", "--temp-dir", str(temp_dir),
            "--num-cpus", cpus, "--disable-usage-stats",
            "--dashboard-agent-listen-port", str(free_port()),
            "--min-worker-port", "0", "--max-worker-port", "0"]
    gpus = os.environ.get("SLURM_GPUS_ON_NODE")
    if gpus:
        argv += ["--num-gpus", gpus]
    host, port = address.rsplit(":", 1)
    if role == "head":
        argv += ["--head", "--port", port, "--node-ip-address", host,
                 "--include-dashboard", "false", "--ray-client-server-port", str(free_port())]
    else:
        argv += ["--address", address]
    stop = {"asked": False}

    def on_signal(signum: int, frame: object) -> None:
        stop["asked"] = True

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1):
        signal.signal(signum, on_signal)
    env = dict(os.environ, **{MARKER: marker})
    started = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, check=False)
    if started.returncode != 0:
        print(f"error: ray start ({role}) failed on {socket.gethostname()} with exit status"
              f" {started.returncode}; logs under {temp_dir}", file=sys.stderr)
        kill_marked(marker)
        return 1
    print(f"nestor.node: Ray {role} up on {socket.gethostname()} (node {node_id})",
          file=sys.stderr, flush=True)
    # The batch script touches job_tmp/stop once the driver is done (head); a
    # worker stops when the head is gone. Either may instead get a signal
    # (scancel): then stop in order, since the driver journals its clean
    # stop on a live Ray.
    stop_file, driver_pid = job_tmp / "stop", job_tmp / "driver.pid"
    misses = 0
    while not stop["asked"]:
        time.sleep(0.5)
        if role == "head" and stop_file.exists():
            break
        misses = 0 if role == "head" or _reachable(address) else misses + 1
        if misses >= 3:
            break
    deadline = time.monotonic() + grace_s
    while stop["asked"] and time.monotonic() < deadline:
        if role == "head" and not _pid_alive(driver_pid):
            break
        if role == "worker" and not _reachable(address):
            break
        time.sleep(0.2)
    killed = kill_marked(marker)
    print(f"nestor.node: Ray {role} on node {node_id} stopped ({killed} processes)",
          file=sys.stderr, flush=True)
    return 0


def wait(address: str, nodes: int, timeout_s: float) -> int:
    """Wait from Python: `ray status` without the job's token would hang."""
    from nestor.orchestrator.backends.ray.probe import wait_for_nodes

    deadline = time.monotonic() + timeout_s
    while not _reachable(address):
        if time.monotonic() > deadline:
            print(f"error: the Ray head at {address} did not come up within {timeout_s:g} s;"
                  " see the job's output and /tmp/nestor-ray-JOBID/NODE/session_latest/logs",
                  file=sys.stderr)
            return 1
        time.sleep(0.5)
    alive, cpus = wait_for_nodes(address, nodes, deadline)
    if alive >= nodes:
        print(f"nestor.node: {alive} Ray node(s) joined; CPUs {cpus:g}", file=sys.stderr)
        return 0
    print(f"error: only {alive} of {nodes} Ray nodes joined {address} within"
          f" {timeout_s:g} s; a node's Ray failed to start (see the job's output)",
          file=sys.stderr)
    return 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m nestor.orchestrator.slurm.node")
    sub = parser.add_subparsers(dest="command", required=True)
    plan = sub.add_parser("plan")
    plan.add_argument("--job-id", type=int, required=True)
    begin = sub.add_parser("start")
    begin.add_argument("--role", choices=["head", "worker"], required=True)
    begin.add_argument("--job-id", required=True)
    begin.add_argument("--address", required=True)
    begin.add_argument("--job-tmp", type=Path, required=True)
    begin.add_argument("--grace", type=float, default=20)
    until = sub.add_parser("wait")
    until.add_argument("--address", required=True)
    until.add_argument("--nodes", type=int, required=True)
    until.add_argument("--timeout", type=float, default=180)
    clean = sub.add_parser("cleanup")
    clean.add_argument("--job-id", required=True)
    args = parser.parse_args(argv)
    if args.command == "plan":
        print(node_ip(), job_port(args.job_id))
        return 0
    if args.command == "start":
        return start(args.role, args.job_id, args.address, args.job_tmp, args.grace)
    if args.command == "wait":
        return wait(args.address, args.nodes, args.timeout)
    kill_marked(f"{args.job_id}-", prefix=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
