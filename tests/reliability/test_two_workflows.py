"""Two workflows at once on one machine, sharing one MLflow server and one Ray cluster.

One Ray head (4 CPUs, token auth on, as a Slurm job runs it) and one `mlflow
server` are started here; two `nestor run --address` drivers join them at the
same time, each capped at ``resources.slots: 2``. Both must finish, neither
may see the other's trials (journal, MLflow, trainer runs), the trainers'
own log (written outside nestor) must show the two sweeps running at once and
never more than 2 trials of one workflow at a time, and the cluster must get
every slot back.
"""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from nestor_harness import (
    NESTOR,
    TAG_VAR,
    MlflowServer,
    RayHead,
    agree,
    events,
    mlflow_runs,
    mlflow_trial_runs,
    tagged_env,
    tagged_pids,
)

pytestmark = pytest.mark.slow

WORKFLOWS = {"alpha": 11, "beta": 12}  # name -> search seed, so their configs differ
BUDGET = 8
SLOTS = 2
CLUSTER_CPUS = 2 * SLOTS
SLEEP_S = 1.0

# The workflow and the log come as leading arguments (fixed in each spec), not
# through the environment: trainers run in the Ray head's workers, whose
# environment is the head's, not the driver's.
FIT = """
import os, sys, time
workflow, log, sleep = sys.argv[1], sys.argv[2], float(sys.argv[3])
args = dict(a.lstrip("-").split("=", 1) for a in sys.argv[4:])
x, y = float(args["x"]), float(args["y"])
def note(phase):
    with open(log, "a") as out:  # one short O_APPEND write per line: never interleaved
        out.write(f"{workflow} {os.environ['NESTOR_TRIAL_ID']} {os.getpid()} {phase}"
                  f" {time.time()!r} {x!r} {y!r}\\n")
note("start")
time.sleep(sleep)
print(f"FoM: {(x - 0.3) ** 2 + (y + 0.1) ** 2}", flush=True)
note("done")
"""

# Asked of the shared cluster from a third, short-lived driver once both are gone.
CLUSTER_STATE = """
import json, ray
ray.init(address=__import__("sys").argv[1], log_to_driver=False, configure_logging=False)
groups = ray.util.placement_group_table().values()
print(json.dumps({"cpu": ray.available_resources().get("CPU", 0),
                  "total": ray.cluster_resources().get("CPU", 0),
                  "groups": sorted(g["state"] for g in groups)}))
"""


def spec(fit: Path, log: Path, name: str, seed: int, uri: str) -> str:
    command = [sys.executable, str(fit), name, str(log), str(SLEEP_S)]
    return textwrap.dedent(f"""\
        name: {name}
        resources: {{slots: {SLOTS}}}
        tracking: {{uri: "{uri}", experiment: exp-{name}}}
        stages:
          - name: tune
            kind: hpo
            trainer: {{command: {command!r}}}
            search: {{algorithm: random, budget: {BUDGET}, seed: {seed}}}
            space:
              x: {{type: float, low: -1, high: 1}}
              y: {{type: float, low: -1, high: 1}}
            objective: {{metric: result, mode: min}}
            trial: {{retries: 0}}
        """)


def intervals(log: Path) -> dict[str, list[tuple[float, float, str]]]:
    """workflow -> [(start, end, trial)] from the trainers' own lines."""
    began: dict[tuple[str, str], float] = {}
    spans: dict[str, list[tuple[float, float, str]]] = {}
    for line in log.read_text().splitlines():
        workflow, trial, _pid, phase, when, *_ = line.split()
        if phase == "start":
            began[workflow, trial] = float(when)
        else:
            spans.setdefault(workflow, []).append((began.pop((workflow, trial)), float(when),
                                                   trial))
    assert not began, f"trainers that started and never finished: {sorted(began)}"
    return spans


def most_at_once(spans: list[tuple[float, float, str]]) -> int:
    edges = sorted([(s, 1) for s, _, _ in spans] + [(e, -1) for _, e, _ in spans])
    running = peak = 0
    for _, step in edges:  # at a tie an end sorts first: back-to-back is not overlap
        running += step
        peak = max(peak, running)
    return peak


def overlap_s(a: list[tuple[float, float, str]], b: list[tuple[float, float, str]]) -> float:
    """Seconds during which at least one trial of each was running."""
    def cover(spans: list[tuple[float, float, str]]) -> list[tuple[float, float]]:
        merged: list[list[float]] = []
        for start, end, _ in sorted(spans):
            if merged and start <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], end)
            else:
                merged.append([start, end])
        return [(s, e) for s, e in merged]

    return sum(max(0.0, min(e1, e2) - max(s1, s2))
               for s1, e1 in cover(a) for s2, e2 in cover(b))


def test_two_workflows_share_one_cluster_and_one_tracking_server(tmp_path: Path) -> None:
    began = time.monotonic()
    env = tagged_env(tmp_path, RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=secrets.token_hex(32),
                     RAY_USAGE_STATS_ENABLED="0")
    tag = env[TAG_VAR]
    fit, log = tmp_path / "fit.py", tmp_path / "trainers.log"
    fit.write_text(FIT)
    server = MlflowServer(tmp_path / "mlflow.db")
    head = RayHead(env, CLUSTER_CPUS)
    drivers: dict[str, subprocess.Popen] = {}
    try:
        server.start()
        head.start()
        daemons = set(tagged_pids(tag))  # the head's own: they stay until the teardown
        for name, seed in WORKFLOWS.items():
            (tmp_path / f"{name}.yaml").write_text(spec(fit, log, name, seed, server.uri))
            drivers[name] = subprocess.Popen(
                [NESTOR, "run", str(tmp_path / f"{name}.yaml"), "--run-dir",
                 str(tmp_path / name), "--address", head.address],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        outputs = {name: proc.communicate(timeout=300) for name, proc in drivers.items()}
        swept = time.monotonic() - began
        for name, proc in drivers.items():
            assert proc.returncode == 0, f"{name}: {outputs[name][1][-3000:]}"

        spans = intervals(log)
        assert sorted(spans) == sorted(WORKFLOWS)
        planned = {str(n) for n in range(BUDGET)}
        for name in WORKFLOWS:
            run_dir = tmp_path / name
            journal = events(run_dir)
            started = next(e for e in journal if e["event"] == "workflow_started")
            assert (started["workflow"], started["slots"]) == (name, SLOTS)
            done = {e["trial"]["id"]: e for e in journal if e["event"] == "trial_finished"}
            assert set(done) == planned, f"{name} journalled trials {sorted(done)}"
            assert all(e["status"] == "completed" for e in done.values())
            configs = {t: (e["trial"]["config"]["x"], e["trial"]["config"]["y"])
                       for t, e in done.items()}
            # The trainers that ran for this workflow are exactly its journalled trials.
            ran = {f"tune-{t}": (x, y) for t, (x, y) in configs.items()}
            seen = {}
            for line in log.read_text().splitlines():
                workflow, trial, _pid, phase, _when, x, y = line.split()
                if workflow == name and phase == "done":
                    assert trial not in seen, f"{name} ran {trial} twice"
                    seen[trial] = (float(x), float(y))
            assert seen == ran, f"{name}: trainers ran {seen}, journal has {ran}"

            # MLflow: its experiment holds its own trial runs, under its own stage run.
            figures = agree(run_dir, server.uri, f"exp-{name}", env)
            assert figures["trials"] == BUDGET
            (stage_run,) = [r.info.run_id for r in mlflow_runs(server.uri, f"exp-{name}")
                            if r.info.run_name == "tune"]
            for run in mlflow_trial_runs(server.uri, f"exp-{name}"):
                trial = run.data.tags["nestor.trial"]
                assert run.data.tags["mlflow.parentRunId"] == stage_run, trial
                assert (float(run.data.params["x"]), float(run.data.params["y"])) == \
                    configs[trial], f"{name} run of trial {trial} has another's params"

        alpha, beta = (spans[name] for name in WORKFLOWS)
        peaks = {name: most_at_once(spans[name]) for name in WORKFLOWS}
        together = overlap_s(alpha, beta)
        assert peaks == {name: SLOTS for name in WORKFLOWS}, peaks  # used, never exceeded
        assert most_at_once(alpha + beta) <= CLUSTER_CPUS
        assert together > SLEEP_S, f"the workflows overlapped for only {together:.2f} s"

        # Nothing left behind: no trainer or worker of theirs, every slot back.
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            leftovers = {pid: cmd for pid, cmd in tagged_pids(tag).items()
                         if pid not in daemons and ours(cmd)}
            if not leftovers:
                break
            time.sleep(1)
        assert not leftovers, leftovers
        state = subprocess.run([sys.executable, "-c", CLUSTER_STATE, head.address], env=env,
                               capture_output=True, text=True, timeout=120, check=False)
        assert state.returncode == 0, state.stderr[-3000:]
        cluster = json.loads(state.stdout.strip().splitlines()[-1])
        assert cluster["cpu"] == cluster["total"] == CLUSTER_CPUS, cluster
        assert set(cluster["groups"]) <= {"REMOVED"}, cluster
        print(f"\ntwo workflows: {BUDGET} trials each on {SLOTS} of {CLUSTER_CPUS} shared"
              f" slots, both done {swept:.1f} s after start (servers included); at once for"
              f" {together:.1f} s; peak trials at once {peaks}; trainer spans"
              f" {_span(alpha)} / {_span(beta)}")
    finally:
        for proc in drivers.values():
            if proc.poll() is None:
                proc.kill()
        server.stop()
        left = head.stop()
    assert not left, f"processes of this test still alive after teardown: {left}"


def ours(cmd: str) -> bool:
    """A driver's, a worker's or a trainer's process (not the head's own daemons,
    whose arguments may name the worker script)."""
    program = cmd.split()[:2]
    if cmd.startswith("ray::"):  # a worker's title; the head's agents retitle themselves too
        return not program[0].endswith("Agent")
    return any(
        word.endswith(("/fit.py", "/default_worker.py", "/nestor")) for word in program)


def _span(spans: list[tuple[float, float, Any]]) -> str:
    return f"{max(e for _, e, _ in spans) - min(s for s, _, _ in spans):.1f} s"


# Holds every CPU of the cluster, as another user's job would, until killed.
HOLDER = """
import sys, time, ray
ray.init(address=sys.argv[1], log_to_driver=False, configure_logging=False)
@ray.remote(num_cpus=int(sys.argv[2]))
class Holder:
    def ping(self):
        return True
holder = Holder.remote()
ray.get(holder.ping.remote())
print("holding", flush=True)
time.sleep(600)
"""


def test_a_workflow_asking_for_slots_another_holds_is_refused_clearly(tmp_path: Path) -> None:
    env = tagged_env(tmp_path, RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=secrets.token_hex(32),
                     RAY_USAGE_STATS_ENABLED="0")
    fit, log = tmp_path / "fit.py", tmp_path / "trainers.log"
    fit.write_text(FIT)
    head = RayHead(env, cpus=SLOTS)
    holder = None
    try:
        head.start()
        holder = subprocess.Popen([sys.executable, "-c", HOLDER, head.address, str(SLOTS)],
                                  stdout=subprocess.PIPE, text=True, env=env)
        assert holder.stdout is not None and holder.stdout.readline().strip() == "holding"
        uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
        (tmp_path / "busy.yaml").write_text(spec(fit, log, "busy", 1, uri))
        refused = subprocess.run(
            [NESTOR, "run", str(tmp_path / "busy.yaml"), "--run-dir", str(tmp_path / "busy"),
             "--address", head.address], capture_output=True, text=True, env=env, timeout=300,
            check=False)
        assert refused.returncode == 2, refused.stderr[-3000:]
        assert f"only 0 of the Ray cluster's {SLOTS} are free" in refused.stderr
        assert "Traceback" not in refused.stderr and not log.exists()  # nothing ran
        holder.kill()
        holder.wait(timeout=30)
        time.sleep(2)  # the cluster frees the holder's CPUs
        text = spec(fit, log, "free", 2, uri).replace(f"resources: {{slots: {SLOTS}}}\n", "")
        (tmp_path / "free.yaml").write_text(text)
        ran = subprocess.run(
            [NESTOR, "run", str(tmp_path / "free.yaml"), "--run-dir", str(tmp_path / "free"),
             "--address", head.address], capture_output=True, text=True, env=env, timeout=300,
            check=False)
        assert ran.returncode == 0, ran.stderr[-3000:]
        started = next(e for e in events(tmp_path / "free") if e["event"] == "workflow_started")
        assert started["slots"] == SLOTS  # no slots asked: what the cluster had free
    finally:
        if holder is not None and holder.poll() is None:
            holder.kill()
        left = head.stop()
    assert not left, f"processes of this test still alive after teardown: {left}"


TRAINER_MODULE = """
import os
def train(config, ctx):
    return {"result": (config["x"] - 0.3) ** 2, "pid": os.getpid()}
"""


def test_a_function_trainer_on_the_drivers_pythonpath_runs_on_a_shared_cluster(
        tmp_path: Path) -> None:
    """The head was started without the folder that holds the trainer's module;
    the spec's import check passes on the driver, so the ranks must import it too."""
    env = tagged_env(tmp_path, RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=secrets.token_hex(32),
                     RAY_USAGE_STATS_ENABLED="0")
    env.pop("PYTHONPATH", None)
    head = RayHead(env, cpus=1)
    code = tmp_path / "code"
    code.mkdir()
    (code / "my_site_trainer.py").write_text(TRAINER_MODULE)
    (tmp_path / "fn.yaml").write_text(textwrap.dedent("""\
        name: fn
        resources: {slots: 1}
        stages:
          - name: tune
            kind: hpo
            trainer: {function: "my_site_trainer:train"}
            search: {algorithm: random, budget: 2, seed: 3}
            space: {x: {type: float, low: -1, high: 1}}
            objective: {metric: result, mode: min}
            trial: {retries: 0}
        """))
    try:
        head.start()
        driver_env = dict(env, PYTHONPATH="code")  # relative, as people write it
        ran = subprocess.run(
            [NESTOR, "run", "fn.yaml", "--run-dir", str(tmp_path / "fn"), "--address",
             head.address], capture_output=True, text=True, env=driver_env, timeout=300,
            cwd=tmp_path, check=False)
        assert ran.returncode == 0, ran.stderr[-3000:]
        done = [e for e in events(tmp_path / "fn") if e["event"] == "trial_finished"]
        assert len(done) == 2 and all(e["status"] == "completed" for e in done), done
    finally:
        left = head.stop()
    assert not left, f"processes of this test still alive after teardown: {left}"


def test_a_driver_without_address_starts_its_own_ray_beside_anothers(tmp_path: Path) -> None:
    """Another cluster runs on this host and RAY_ADDRESS names it (a login node, a
    shared workstation): `nestor run` without --address must not join it, and did,
    failing with Ray's "num_cpus must not be provided"."""
    env = tagged_env(tmp_path, RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=secrets.token_hex(32),
                     RAY_USAGE_STATS_ENABLED="0")
    head = RayHead(env, cpus=1)
    (tmp_path / "fn.yaml").write_text(textwrap.dedent(f"""\
        name: own
        resources: {{slots: 1}}
        stages:
          - name: tune
            kind: hpo
            trainer: {{command: ["{sys.executable}", "-c", "print('FoM: 1.0')"]}}
            search: {{algorithm: random, budget: 2, seed: 3}}
            space: {{x: {{type: float, low: -1, high: 1}}}}
            objective: {{metric: result, mode: min}}
        """))
    try:
        head.start()
        ran = subprocess.run([NESTOR, "run", "fn.yaml", "--run-dir", str(tmp_path / "own")],
                             capture_output=True, text=True, timeout=300, cwd=tmp_path,
                             env=dict(env, RAY_ADDRESS=head.address), check=False)
        assert ran.returncode == 0, ran.stderr[-3000:]
        done = [e for e in events(tmp_path / "own") if e["event"] == "trial_finished"]
        assert len(done) == 2 and all(e["status"] == "completed" for e in done), done
    finally:
        left = head.stop()
    assert not left, f"processes of this test still alive after teardown: {left}"


# `nestor run`, with one moment added: right after the driver's free-slot check has
# passed, another driver takes every slot for HOLD_S seconds. This is the window two
# drivers starting together can both pass the check in, made certain.
TAKEN_AFTER_THE_CHECK = """
import subprocess, sys
from nestor.orchestrator.backends.ray import cluster
check, holder = cluster.cluster_slots, []
def check_then_lose_the_slots(*args, **kwargs):
    slots = check(*args, **kwargs)
    holder.append(subprocess.Popen(
        [sys.executable, "-c", HOLDER.replace("600", HOLD_S), ADDRESS, str(slots)],
        stdout=subprocess.PIPE, text=True))
    assert holder[0].stdout.readline().strip() == "holding"
    return slots
cluster.cluster_slots = check_then_lose_the_slots
"""


def test_a_driver_whose_slots_another_takes_waits_for_them_instead_of_failing_trials(
        tmp_path: Path, nestor_with_fault) -> None:
    env = tagged_env(tmp_path, RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=secrets.token_hex(32),
                     RAY_USAGE_STATS_ENABLED="0", NESTOR_PLACEMENT_TIMEOUT_S="3")
    fit, log = tmp_path / "fit.py", tmp_path / "trainers.log"
    fit.write_text(FIT)
    head = RayHead(env, cpus=SLOTS)
    hold_s = 12  # four times the placement timeout: without waiting, every start fails
    try:
        head.start()
        uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
        (tmp_path / "late.yaml").write_text(spec(fit, log, "late", 3, uri))
        wrapper = (f"HOLDER = {HOLDER!r}\nHOLD_S = {str(hold_s)!r}\n"
                   f"ADDRESS = {head.address!r}\n{TAKEN_AFTER_THE_CHECK}")
        began = time.time()
        ran = nestor_with_fault(wrapper, "run", str(tmp_path / "late.yaml"), "--run-dir",
                                str(tmp_path / "late"), "--address", head.address, env=env,
                                timeout=300)
        assert ran.returncode == 0, ran.stderr[-3000:]
        assert "so far for slots on the shared Ray cluster" in ran.stderr
        journal = events(tmp_path / "late")
        assert not [e for e in journal if e["event"] == "trial_attempt_failed"]
        done = [e for e in journal if e["event"] == "trial_finished"]
        assert len(done) == BUDGET and all(e["status"] == "completed" for e in done)
        first = min(float(line.split()[4]) for line in log.read_text().splitlines())
        assert first >= began + hold_s  # no trainer ran while the other driver held the slots
    finally:
        left = head.stop()
    assert not left, f"processes of this test still alive after teardown: {left}"
