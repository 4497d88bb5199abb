"""What the reliability and soak tests share: a cheap trainer that logs every
invocation outside nestor, `nestor` as a subprocess, readers for the journal
and MLflow, and a census of the processes a test started.

Other people's Ray clusters and servers run on this machine at the same time,
so processes are counted only if they carry this test's tag in their
environment (``NESTOR_TEST_TAG``, inherited by the driver, Ray's daemons and
workers, Horovod ranks and command trainers alike), never by name.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

NESTOR = str(Path(sys.executable).parent / "nestor")
TAG_VAR = "NESTOR_TEST_TAG"

# Lines "trial pid start|done unix-time x y": start before any work (so a run
# killed half-way still shows up), done once the result is printed.
FIT = """
import os, sys, time
args = dict(a.lstrip("-").split("=", 1) for a in sys.argv[1:])
x, y = float(args["x"]), float(args["y"])
def note(phase):
    with open(os.environ["FIT_LOG"], "a") as log:
        log.write(f"{os.environ['NESTOR_TRIAL_ID']} {os.getpid()} {phase} {time.time()!r}"
                  f" {x!r} {y!r}\\n")
note("start")
time.sleep(float(os.environ.get("FIT_SLEEP", "0.2")))
print(f"FoM: {(x - 0.3) ** 2 + (y + 0.1) ** 2}", flush=True)
note("done")
"""


def command_spec(fit: Path, *, name: str, budget: int, slots: int = 2, extra: str = "",
                 retries: int = 2, timeout: int | None = None) -> str:
    trial = f"{{retries: {retries}" + (f", timeout: {timeout}}}" if timeout else "}")
    return f"""\
name: {name}
resources: {{slots: {slots}}}
{extra}
stages:
  - name: tune
    kind: hpo
    trainer: {{command: ["{sys.executable}", "{fit}"]}}
    search: {{algorithm: random, budget: {budget}, seed: 7}}
    space:
      x: {{type: float, low: -1, high: 1}}
      y: {{type: float, low: -1, high: 1}}
    objective: {{metric: result, mode: min}}
    trial: {trial}
"""


def tagged_env(tmp: Path, **extra: str) -> dict[str, str]:
    """The environment for a test's drivers: its own tag and invocation log."""
    env = dict(os.environ, FIT_LOG=str(tmp / "invocations.log"), RAY_DEDUP_LOGS="0")
    env[TAG_VAR] = f"{tmp.name}-{uuid.uuid4().hex[:8]}"
    if "PYTHONPATH" in extra and os.environ.get("PYTHONPATH"):  # keep the checkout's own
        extra = extra | {"PYTHONPATH": f"{extra['PYTHONPATH']}{os.pathsep}"
                                       f"{os.environ['PYTHONPATH']}"}
    env.update(extra)
    return env


def nestor(*args: str, env: dict[str, str], timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([NESTOR, *args], capture_output=True, text=True, env=env,
                          timeout=timeout, check=False)


def events(run_dir: Path) -> list[dict[str, Any]]:
    from nestor.orchestrator.journal.journal import read_events

    return read_events(run_dir / "journal.jsonl")


def finished(run_dir: Path) -> dict[str, dict[str, Any]]:
    return {e["trial"]["id"]: e for e in events(run_dir) if e["event"] == "trial_finished"}


def invocations(log: Path) -> list[tuple[str, ...]]:
    if not log.exists():
        return []
    return [tuple(line.split()) for line in log.read_text().splitlines() if line.strip()]


def tagged_pids(tag: str) -> dict[int, str]:
    """Live processes whose environment carries ``tag``: pid -> command line."""
    found = {}
    needle = f"{TAG_VAR}={tag}".encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as handle:
                if needle not in handle.read().split(b"\0"):
                    continue
            with open(f"/proc/{entry}/cmdline", "rb") as handle:
                cmd = handle.read().replace(b"\0", b" ").decode(errors="replace").strip()
            with open(f"/proc/{entry}/stat") as handle:
                if handle.read().rsplit(")", 1)[1].split()[0] == "Z":
                    continue  # a zombie holds no resources; its parent reaps it
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
        found[int(entry)] = cmd
    return found


def wait_for_no_tagged(tag: str, timeout: float = 60) -> dict[int, str]:
    """Ray's daemons outlive a killed driver by a few seconds; wait, then report."""
    deadline = time.monotonic() + timeout
    left = tagged_pids(tag)
    while left and time.monotonic() < deadline:
        time.sleep(1)
        left = tagged_pids(tag)
    return left


def kill_tagged(tag: str) -> None:
    """Test clean-up only: end what this test started and left (never anyone else's)."""
    for pid in tagged_pids(tag):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def rank_pids(tag: str) -> list[int]:
    """Pids of this test's Ray workers that host Horovod ranks (or run trainers)."""
    return [pid for pid, cmd in tagged_pids(tag).items()
            if "default_worker.py" in cmd or cmd.startswith("ray::")]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class RayHead:
    """A Ray head started with `ray start`; ended by killing its tagged processes
    (never `ray stop`, which would end every Ray on this host)."""

    def __init__(self, env: dict[str, str], cpus: int) -> None:
        self.cpus = cpus
        # Short: Ray's unix sockets live under it and must stay under ~107 characters.
        self.temp = Path(tempfile.mkdtemp(prefix="n2w-", dir="/tmp"))
        self.env, self.port = env, free_port()
        self.address = f"127.0.0.1:{self.port}"

    def start(self) -> None:
        ray = str(Path(sys.executable).parent / "ray")
        argv = [ray, "start", "--head", "--port", str(self.port),
                "--node-ip-address", "127.0.0.1", "--num-cpus", str(self.cpus),
                "--temp-dir", str(self.temp), "--include-dashboard", "false",
                "--disable-usage-stats", "--dashboard-agent-listen-port", str(free_port()),
                "--ray-client-server-port", str(free_port()),
                "--min-worker-port", "0", "--max-worker-port", "0"]
        started = subprocess.run(argv, env=self.env, capture_output=True, text=True,
                                 timeout=240, check=False)
        assert started.returncode == 0, started.stdout + started.stderr

    def join(self, cpus: int) -> None:
        """A second Ray node on this host joins the head (a Slurm job's node, say)."""
        ray = str(Path(sys.executable).parent / "ray")
        argv = [ray, "start", "--address", self.address, "--num-cpus", str(cpus),
                "--temp-dir", str(self.temp), "--disable-usage-stats",
                "--dashboard-agent-listen-port", str(free_port()),
                "--min-worker-port", "0", "--max-worker-port", "0"]
        joined = subprocess.run(argv, env=self.env, capture_output=True, text=True,
                                timeout=240, check=False)
        assert joined.returncode == 0, joined.stdout + joined.stderr

    def stop(self) -> dict[int, str]:
        """Kill the head's daemons; returns whatever of this test is still alive."""
        kill_tagged(self.env[TAG_VAR])
        left = wait_for_no_tagged(self.env[TAG_VAR], timeout=30)
        shutil.rmtree(self.temp, ignore_errors=True)
        return left


class MlflowServer:
    """`mlflow server` on a SQLite file, in its own session, started and stopped by a test."""

    def __init__(self, store: Path) -> None:
        self.store, self.port = store, free_port()
        self.uri = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        mlflow = str(Path(sys.executable).parent / "mlflow")
        self.proc = subprocess.Popen(
            [mlflow, "server", "--backend-store-uri", f"sqlite:///{self.store}",
             "--host", "127.0.0.1", "--port", str(self.port), "--workers", "1",
             # else ./mlartifacts in the caller's directory (the repository)
             "--artifacts-destination", str(self.store.parent / "mlartifacts")],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"{self.uri}/health", timeout=2):
                    return
            except OSError:
                time.sleep(0.5)
        raise AssertionError("mlflow server did not start in 240 s")

    def stop(self) -> None:
        if self.proc is not None:
            os.killpg(self.proc.pid, signal.SIGKILL)  # its own session: server and workers
            self.proc.wait(timeout=30)
            self.proc = None


def mlflow_runs(uri: str, experiment: str) -> list[Any]:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    found = client.get_experiment_by_name(experiment)
    if found is None:
        return []
    return client.search_runs([found.experiment_id], max_results=5000)


def mlflow_trial_runs(uri: str, experiment: str) -> list[Any]:
    return [r for r in mlflow_runs(uri, experiment) if "mlflow.parentRunId" in r.data.tags]


def agree(run_dir: Path, uri: str, experiment: str, env: dict[str, str],
          metric: str = "result") -> dict[str, Any]:
    """Journal, `nestor results --format json` and MLflow, trial by trial.

    Returns figures; raises AssertionError naming the first trial they disagree on.
    """
    journal = finished(run_dir)
    shown = nestor("results", str(run_dir), "--format", "json", env=env, timeout=120)
    assert shown.returncode == 0, shown.stderr
    table = {t["id"]: t for s in json.loads(shown.stdout)["stages"] for t in s["trials"]}
    runs = mlflow_trial_runs(uri, experiment)
    by_trial: dict[str, list[Any]] = {}
    for run in runs:
        by_trial.setdefault(run.data.tags["nestor.trial"], []).append(run)
    duplicated = sorted(t for t, rs in by_trial.items() if len(rs) > 1)
    assert not duplicated, f"MLflow holds more than one run for trials {duplicated}"
    assert set(table) == set(journal) == set(by_trial), (
        f"journal {len(journal)}, results {len(table)}, MLflow {len(by_trial)} trials"
    )
    running = [r.data.tags["nestor.trial"] for r in runs if r.info.status == "RUNNING"]
    assert not running, f"MLflow trial runs left RUNNING: {running}"
    for trial_id, event in journal.items():
        row, (run,) = table[trial_id], by_trial[trial_id]
        assert row["status"] == event["status"], trial_id
        assert row["value"] == event["value"], trial_id
        assert run.data.tags["nestor.status"] == event["status"], trial_id
        expected = {"completed": "FINISHED", "pruned": "KILLED"}.get(event["status"], "FAILED")
        assert run.info.status == expected, trial_id
        if event["status"] == "completed":
            assert run.data.metrics[metric] == event["value"], trial_id
        else:
            assert event["reason"] and run.data.tags.get("nestor.failure"), trial_id
    return {"trials": len(journal), "mlflow_runs": len(runs)}


def reruns(log: Path, run_dir: Path, stage: str = "tune") -> dict[str, int]:
    """From the trainer's own log, outside nestor: how often a program ran that
    should not have.

    ``after_finish``: programs started after their trial's result was journalled
    (must be 0: nothing runs that is already done). ``done_twice``: trials whose
    program printed a result more than once (a kill between the program's end and
    the journal's fsync makes a rerun honest; anything else is a bug).
    """
    done_at = {f"{stage}-{t}": e["time"] for t, e in finished(run_dir).items()}
    after, done = 0, {}
    for trial, _pid, phase, when, *_ in invocations(log):
        if phase == "start" and trial in done_at and float(when) > done_at[trial]:
            after += 1
        if phase == "done":
            done[trial] = done.get(trial, 0) + 1
    return {"after_finish": after, "done_twice": sum(1 for n in done.values() if n > 1)}
