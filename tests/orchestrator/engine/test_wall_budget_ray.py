"""A wall budget on real Ray, for a user's command and a user's function, end to end.

`nestor run` on two stages, two trials at a time: a command (a script that sleeps
2 s and prints ``FoM: x``) under ``budget: {wall: 8s}``, then a function under
``{wall: 20s}`` whose first trial (enqueued) would sleep a minute and the others
2 s (a function's first trial on a loaded machine took 7 s: its worker's start).
The command's stage stops asking once a next trial could not finish by 8 s (or,
where one ran longer than its median said, stops it at 8 s); the function's
stage stops its minute-long trial at 20 s. Each stage ends within its limit and a
margin (a fixed allowance for stopping a gang plus the spread of its trials'
own times); every trial that started is journalled finished exactly once, none
failed or retried; the run exits 0 and `nestor results` says why each stopped.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

NESTOR = str(Path(sys.executable).parent / "nestor")
WALL_S = {"cmd": 8.0, "fn": 20.0}
STOP_ALLOWANCE_S = 3.0  # killing a gang and hearing its end, on a loaded machine

SLEEPER = """
import argparse, time
parser = argparse.ArgumentParser()
parser.add_argument("--x", type=float, required=True)
args = parser.parse_args()
time.sleep(2.0)
print(f"FoM: {args.x:.4f}")
"""

FIT = """
import time


def train(config, ctx):
    time.sleep(60.0 if config["x"] == 0.999 else 2.0)
    return {"val_accuracy": config["x"]}
"""


def spec(home: Path) -> str:
    return textwrap.dedent(f"""
        name: wall
        resources: {{slots: 2}}
        stages:
          - name: cmd
            kind: hpo
            trainer: {{command: "{sys.executable} {home}/sleeper.py"}}
            search: {{algorithm: random, seed: 1, budget: {{trials: 40, wall: 8s}}}}
            space: {{x: {{type: float, low: 0, high: 1}}}}
            objective: {{metric: fom, mode: max}}
            trial: {{retries: 2}}
          - name: fn
            kind: hpo
            from: [cmd]
            trainer: {{function: "fit:train"}}
            search: {{algorithm: random, seed: 1, budget: {{trials: 40, wall: 20s}},
                      enqueue: [{{x: 0.999}}]}}
            space: {{x: {{type: float, low: 0, high: 1}}}}
            objective: {{metric: val_accuracy, mode: max}}
            trial: {{retries: 2}}
        """)


@pytest.fixture(scope="module")
def walled(tmp_path_factory: pytest.TempPathFactory) -> dict:
    home = tmp_path_factory.mktemp("wall")
    (home / "sleeper.py").write_text(textwrap.dedent(SLEEPER))
    (home / "fit.py").write_text(textwrap.dedent(FIT))
    (home / "spec.yaml").write_text(spec(home))
    env = dict(os.environ, PYTHONPATH=str(home))
    run_dir = home / "run"
    result = subprocess.run([NESTOR, "run", str(home / "spec.yaml"), "--run-dir", str(run_dir)],
                            capture_output=True, text=True, env=env, timeout=600, check=False)
    events = [json.loads(line) for line in (run_dir / "journal.jsonl").read_text().splitlines()]
    results = subprocess.run([NESTOR, "results", str(run_dir)], capture_output=True, text=True,
                             env=env, timeout=300, check=False)
    return {"result": result, "events": events, "results": results, "run": run_dir}


def of(events: list[dict], stage: str, kind: str) -> list[dict]:
    return [e for e in events if e["event"] == kind and e.get("stage") == stage]


def own_seconds(events: list[dict], stage: str) -> list[float]:
    """Each completed trial's seconds from its start to its end, on the stage's clock."""
    begun = {e["trial"]["id"]: e.get("elapsed_s", 0.0) for e in of(events, stage,
                                                                    "trial_started")}
    return [e["elapsed_s"] - begun[e["trial"]["id"]]
            for e in of(events, stage, "trial_finished") if e["status"] == "completed"]


@pytest.mark.slow
def test_the_run_ends_cleanly_and_says_why(walled: dict) -> None:
    result = walled["result"]
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    assert walled["results"].returncode == 0, walled["results"].stderr
    shown = walled["results"].stdout
    assert "cmd stopped: wall budget 8s" in shown and "fn stopped: wall budget 20s reached" in shown
    saved = json.loads((walled["run"] / "results.json").read_text())
    reasons = {s["name"]: s["stop_reason"] for s in saved["stages"]}
    assert reasons["cmd"].startswith("wall budget 8s")
    assert reasons["fn"] == "wall budget 20s reached"
    status = subprocess.run([NESTOR, "status", str(walled["run"])], capture_output=True,
                            text=True, timeout=300, check=False)
    rows = {line.split()[0]: line.split()[1:] for line in status.stdout.splitlines()[2:]
            if line.split() and line.split()[0] in ("cmd", "fn")}
    assert rows["fn"][0] == "finished" and rows["fn"][2] == "0", status.stdout  # not failed
    assert int(rows["fn"][3]) >= 1, status.stdout  # stopped
    import mlflow

    client = mlflow.MlflowClient(f"sqlite:///{walled['run'] / 'mlflow.db'}")
    runs = {r.info.run_name: r for e in client.search_experiments()
            for r in client.search_runs([e.experiment_id], max_results=200)}
    assert runs["fn"].data.tags["nestor.stop_reason"] == "wall budget 20s reached"
    assert runs["cmd"].data.tags["nestor.stop_reason"].startswith("wall budget 8s")
    assert runs["fn/0"].info.status == "KILLED"  # the minute-long trial: stopped, not failed


@pytest.mark.slow
@pytest.mark.parametrize("stage", ["cmd", "fn"])
def test_every_trial_that_started_is_journalled_once_and_none_failed(walled: dict,
                                                                     stage: str) -> None:
    events = walled["events"]
    started = [e["trial"]["id"] for e in of(events, stage, "trial_started")]
    finished = [e["trial"]["id"] for e in of(events, stage, "trial_finished")]
    assert len(started) >= 2 and sorted(started) == sorted(finished) == sorted(set(finished))
    assert not of(events, stage, "trial_attempt_failed")
    statuses = {e["trial"]["id"]: e["status"] for e in of(events, stage, "trial_finished")}
    assert set(statuses.values()) <= {"completed", "stopped"}
    for event in of(events, stage, "trial_finished"):
        if event["status"] == "stopped":
            assert event["reason"] == f"wall budget {WALL_S[stage]:g}s reached"
    if stage == "fn":  # the minute-long trial, stopped at the limit, not failed
        (long,) = [e for e in of(events, stage, "trial_finished")
                   if e["trial"]["config"]["x"] == 0.999]
        assert (long["status"], long["reason"]) == ("stopped", "wall budget 20s reached")
        assert long["elapsed_s"] < WALL_S[stage] + STOP_ALLOWANCE_S


@pytest.mark.slow
@pytest.mark.parametrize("stage", ["cmd", "fn"])
def test_the_stage_ends_within_its_limit(walled: dict, stage: str) -> None:
    """From its start to its end in the journal (the driver's own clock): at most the
    limit, a gang's stopping, and the spread of its trials' own times."""
    events = walled["events"]
    (began,) = of(events, stage, "stage_started")
    (ended,) = of(events, stage, "stage_finished")
    seconds = own_seconds(events, stage)
    assert seconds, "no trial completed: nothing measured the spread"
    spread = max(seconds) - min(seconds)
    took = ended["time"] - began["time"]
    assert took <= WALL_S[stage] + STOP_ALLOWANCE_S + spread, (took, seconds)
    last = max(e["elapsed_s"] for e in of(events, stage, "trial_finished"))
    assert last <= WALL_S[stage] + STOP_ALLOWANCE_S + spread, (last, seconds)
