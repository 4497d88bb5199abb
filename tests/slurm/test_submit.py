"""`nestor submit` against a real slurmctld and slurmd (slurm/local-slurm.sh).

The trainer is a small command that appends to an invocation log outside
nestor: the Slurm node it ran on and the arguments it got. That log is how
the tests know, from outside, where trials ran and what ran twice.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from _slurm_helpers import job_state, nestor, node_count, submitted_id, wait_job

pytestmark = pytest.mark.slow

FIT = """
import json, os, sys, time
args = dict(a[2:].split("=", 1) for a in sys.argv[1:])
with open(os.environ["FIT_LOG"], "a") as log:
    log.write(json.dumps({"node": os.environ.get("SLURMD_NODENAME"), **args}) + "\\n")
time.sleep(float(os.environ.get("FIT_SLEEP", "0.1")))
print(f"FoM: {(float(args['x']) - 0.3) ** 2}")
"""
AWKWARD = "it's a \"b\"; $(touch {canary}) `touch {canary}`"


def write_spec(tmp_path: Path, budget: int, slots: int, tag: str) -> Path:
    fit = tmp_path / "fit.py"
    fit.write_text(FIT)
    spec = tmp_path / "sp ec's.yaml"
    spec.write_text(textwrap.dedent(f"""
        name: slurmsweep
        resources: {{slots: {slots}}}
        stages:
          - name: tune
            kind: hpo
            trainer: {{command: [{json.dumps(sys.executable)}, {json.dumps(str(fit))}]}}
            search: {{algorithm: random, budget: {budget}, seed: 5}}
            space:
              x: {{type: float, low: -1, high: 1}}
              tag: {{type: categorical, values: [{json.dumps(tag)}]}}
            objective: {{metric: result, mode: min}}
        """))
    return spec


def invocations(log: Path) -> list[dict]:
    return [json.loads(line) for line in log.read_text().splitlines()]


def events(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "journal.jsonl").read_text().splitlines()]


def completed(run_dir: Path) -> dict[str, dict]:
    return {e["trial"]["id"]: e for e in events(run_dir)
            if e["event"] == "trial_finished" and e["status"] == "completed"}


def test_a_submitted_workflow_runs_on_two_nodes_and_lands_in_the_run_dir(
        tmp_path: Path, local_slurm: dict[str, str]) -> None:
    # Two Slurm nodes, each its own slurmd (the fixture starts them); a local Slurm of
    # one node that was already running cannot show what this test stands for.
    nodes = node_count(local_slurm)
    if nodes < 2:
        pytest.fail(f"the local Slurm already running has {nodes} node; this test needs"
                    " two: stop it (slurm/local-slurm.sh stop) and the tests start theirs")
    nodes = 2
    canary = tmp_path / "canary"
    tag = AWKWARD.format(canary=canary)
    spec = write_spec(tmp_path, budget=8, slots=2 * nodes, tag=tag)
    run_dir = tmp_path / f"run a'b; $(touch {canary})"
    log = tmp_path / "invocations.log"
    env = dict(local_slurm, FIT_LOG=str(log), FIT_SLEEP="1.5")
    job = submitted_id(nestor("submit", str(spec), "--nodes", str(nodes), "--time", "10:00",
                              "--run-dir", str(run_dir), env=env))
    assert wait_job(job, env) == "COMPLETED", (run_dir / f"slurm-{job}.out").read_text()
    output = (run_dir / f"slurm-{job}.out").read_text()
    assert f"{nodes} Ray node(s) joined" in output
    log_events = events(run_dir)
    assert log_events[-1]["event"] == "workflow_finished"
    done = completed(run_dir)
    assert len(done) == 8
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{run_dir / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("slurmsweep")
    runs = client.search_runs([experiment.experiment_id], max_results=100)
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    assert len(children) == 8 and all(r.data.params["tag"] == tag for r in children)
    ran = invocations(log)
    assert len(ran) == 8 and {r["tag"] for r in ran} == {tag}  # literally, no shell
    # Trials really ran on both Slurm nodes' Ray workers.
    assert {r["node"] for r in ran} == {"nestor1", "nestor2"}, ran
    assert not canary.exists()
    status = nestor("status", job, env=env)
    assert "COMPLETED" in status.stdout and "finished" in status.stdout, status.stderr
    assert not list(Path("/tmp").glob(f"nestor-ray-{job}"))  # node-local temp removed


def test_scancel_stops_cleanly_and_submit_resume_runs_only_what_was_left(
        tmp_path: Path, local_slurm: dict[str, str]) -> None:
    spec = write_spec(tmp_path, budget=12, slots=2, tag="t")
    run_dir = tmp_path / "run"
    log = tmp_path / "invocations.log"
    env = dict(local_slurm, FIT_LOG=str(log), FIT_SLEEP="1.0")
    job = submitted_id(nestor("submit", str(spec), "--run-dir", str(run_dir), "--time", "10:00",
                              env=env))
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        if (run_dir / "journal.jsonl").exists() and len(completed(run_dir)) >= 3:
            break
        assert job_state(job, env) in ("PENDING", "RUNNING", "CONFIGURING"), job_state(job, env)
        time.sleep(0.5)
    subprocess.run(["scancel", job], env=env, check=True)
    assert wait_job(job, env, timeout=120) == "CANCELLED"
    last = events(run_dir)[-1]
    assert last["event"] == "workflow_interrupted" and last["reason"] == "SIGTERM"
    before = completed(run_dir)
    assert 3 <= len(before) < 12
    status = nestor("status", job, env=env)
    assert "CANCELLED" in status.stdout and f"nestor submit --resume {run_dir}" in status.stdout
    again = submitted_id(nestor("submit", "--resume", str(run_dir), "--time", "10:00", env=env))
    assert wait_job(again, env) == "COMPLETED", (run_dir / f"slurm-{again}.out").read_text()
    after = completed(run_dir)
    assert len(after) == 12 and events(run_dir)[-1]["event"] == "workflow_finished"
    for trial_id, event in before.items():
        assert after[trial_id]["value"] == event["value"]
    ran = [r["x"] for r in invocations(log)]
    for event in before.values():  # nothing finished before the cancel ran again
        assert ran.count(repr(event["trial"]["config"]["x"])) == 1


def test_a_bad_spec_is_refused_before_anything_is_queued(
        tmp_path: Path, local_slurm: dict[str, str]) -> None:
    spec = write_spec(tmp_path, budget=2, slots=1, tag="t")
    spec.write_text(spec.read_text().replace("mode: min", "mode: lowest"))
    queued = subprocess.run(["squeue", "-h", "--states=all", "-o", "%i"], capture_output=True,
                            text=True, env=local_slurm, check=True).stdout.split()
    result = nestor("submit", str(spec), "--run-dir", str(tmp_path / "r"), env=local_slurm)
    assert result.returncode == 2 and "mode" in result.stderr and "Traceback" not in result.stderr
    after = subprocess.run(["squeue", "-h", "--states=all", "-o", "%i"], capture_output=True,
                           text=True, env=local_slurm, check=True).stdout.split()
    assert sorted(after) == sorted(queued) and not (tmp_path / "r").exists()
