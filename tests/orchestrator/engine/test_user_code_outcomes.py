"""What a user's own training code meets, end to end, as a function and as a command.

One run holds stages whose trainers fail as user code does: a command whose flags
argparse refuses (exit 2), one that never prints its result, a function that
reads a file that is not there or imports a package that is not installed, one
that reports no metric the stage optimizes, and a command whose process is
killed once. The failures that would repeat run once; the kill runs again, as
does a usage error where the spec asks for every failure to be retried. The run
exits non-zero, `nestor status` calls the stages that made nothing failed, and
`nestor results` lists every trial with why it failed (the CSV too). A command
sweep says which way it optimizes, in its progress, its results and MLflow.
"""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

NESTOR = str(Path(sys.executable).parent / "nestor")

# A user's script: argparse flags, one "FoM:" line. Its flag is --learning-rate, so
# a space that names the parameter lr hands it --lr=..., which argparse refuses.
TRAIN_CMD = """
import argparse, math
parser = argparse.ArgumentParser()
parser.add_argument("--learning-rate", type=float, required=True)
args = parser.parse_args()
print(f"FoM: {1 - abs(math.log10(args.learning_rate) + 1.5) / 3:.4f}")
"""

# Prints its accuracy, but not in the form the result pattern reads.
SILENT_CMD = """
import sys
print("accuracy", 0.9, sys.argv[1:])
"""

# Killed by a signal the first time (an OOM killer, a node's reaper), fine after.
FRAGILE_CMD = """
import os, signal, sys
marker = os.path.join(os.environ["USER_DIR"], "killed-once")
if not os.path.exists(marker):
    open(marker, "w").close()
    os.kill(os.getpid(), signal.SIGKILL)
print("FoM: 0.8")
"""

FIT = """
import os


def train(config, ctx):
    with open(os.path.join(os.environ["USER_DIR"], "digits.npz"), "rb") as data:
        data.read()
    return {"val_accuracy": 0.9}


def unnamed(config, ctx):
    return {"accuracy": config["lr"]}
"""

BROKEN_IMPORTS = """
import not_a_package_anyone_installed  # noqa: F401


def train(config, ctx):
    return {"val_accuracy": 0.9}
"""


def stage(name: str, trainer: str, *, objective: str = "", trial: str = "") -> str:
    return f"""
  - name: {name}
    kind: hpo
    trainer: {trainer}
    search: {{algorithm: random, budget: 1}}
    space: {{lr: {{type: float, low: 0.001, high: 0.1, log: true}}}}
    {objective or "objective: {metric: val_accuracy, mode: max}"}
    trial: {{retries: 1{trial}}}"""


def nestor(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([NESTOR, *args], capture_output=True, text=True, env=env,
                          timeout=600, check=False)


@pytest.fixture(scope="module")
def failures(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The run of every stage above, once: its directory, environment and exit."""
    home = tmp_path_factory.mktemp("user")
    for name, text in (("train_cmd.py", TRAIN_CMD), ("silent_cmd.py", SILENT_CMD),
                       ("fragile_cmd.py", FRAGILE_CMD), ("fit.py", FIT),
                       ("broken_imports.py", BROKEN_IMPORTS)):
        (home / name).write_text(textwrap.dedent(text))
    py = sys.executable
    fom = "objective: {metric: fom, mode: max}"
    spec = home / "spec.yaml"
    spec.write_text("name: failures\nresources: {slots: 2}\nstages:" + "".join([
        stage("usage", f'{{command: "{py} {home}/train_cmd.py"}}', objective=fom),
        stage("silent", f'{{command: "{py} {home}/silent_cmd.py"}}', objective=fom),
        stage("missing", '{function: "fit:train"}'),
        stage("imports", '{function: "broken_imports:train"}'),
        stage("unnamed", '{function: "fit:unnamed"}'),
        stage("crash", f'{{command: "{py} {home}/fragile_cmd.py"}}', objective=fom),
        stage("asked", f'{{command: "{py} {home}/train_cmd.py"}}', objective=fom,
              trial=", retry_on: any"),
    ]) + "\n")
    env = dict(os.environ, PYTHONPATH=str(home), USER_DIR=str(home))
    run_dir = home / "run"
    result = nestor("run", str(spec), "--run-dir", str(run_dir), env=env)
    events = [json.loads(line) for line in (run_dir / "journal.jsonl").read_text().splitlines()]
    return {"run": run_dir, "env": env, "result": result, "events": events}


def attempts(events: list[dict], stage: str) -> int:
    return sum(1 for e in events if e["event"] == "trial_started" and e["stage"] == stage)


def final(events: list[dict], stage: str) -> dict:
    (done,) = [e for e in events if e["event"] == "trial_finished" and e["stage"] == stage]
    return done


@pytest.mark.slow
@pytest.mark.parametrize(("name", "why"), [
    ("usage", "command exited with status 2"),
    ("silent", "command printed no line matching"),
    ("missing", "FileNotFoundError"),
    ("imports", "cannot import module 'broken_imports'"),
    ("unnamed", "the trainer reported no 'val_accuracy'"),
])
def test_a_failure_that_would_repeat_runs_once_and_says_why(failures: dict, name: str,
                                                            why: str) -> None:
    done = final(failures["events"], name)
    assert attempts(failures["events"], name) == 1, done["reason"]
    assert done["status"] == "failed" and why in done["reason"]
    assert "not retried: a rerun would fail the same way" in done["reason"]


@pytest.mark.slow
def test_a_killed_command_runs_again_and_so_does_any_failure_the_spec_asks_for(
        failures: dict) -> None:
    events = failures["events"]
    crash = final(events, "crash")
    assert attempts(events, "crash") == 2 and crash["status"] == "completed"
    (failed,) = [e for e in events if e["event"] == "trial_attempt_failed"
                 and e["stage"] == "crash"]
    assert "killed by SIGKILL" in failed["reason"]
    asked = final(events, "asked")
    assert attempts(events, "asked") == 2 and asked["status"] == "failed"
    assert "status 2" in asked["reason"] and "not retried" not in asked["reason"]


@pytest.mark.slow
def test_a_run_whose_stage_made_nothing_exits_non_zero_and_status_says_failed(
        failures: dict) -> None:
    result = failures["result"]
    assert result.returncode == 1, result.stderr
    assert "stage usage: all 1 trials failed" in result.stderr
    status = nestor("status", str(failures["run"]), env=failures["env"])
    assert status.returncode == 0, status.stderr
    rows = {line.split()[0]: line.split()[1] for line in status.stdout.splitlines()[2:]
            if line.split() and line.split()[0] in ("usage", "crash", "asked", "missing")}
    assert rows == {"usage": "failed", "missing": "failed", "asked": "failed",
                    "crash": "finished"}
    assert status.stdout.startswith(f"{failures['run']}: failed")


@pytest.mark.slow
def test_results_list_every_trial_with_its_status_and_reason(failures: dict) -> None:
    run, env = str(failures["run"]), failures["env"]
    table = nestor("results", run, env=env)
    assert table.returncode == 0, table.stderr
    text = " ".join(table.stdout.split())
    assert "stage usage: 1 trials (1 failed), best first" in text
    assert "stage crash: 1 trials (1 completed), best first" in text
    assert "command exited with status 2" in text and "FileNotFoundError" in text
    rows = list(csv.DictReader(io.StringIO(nestor("results", run, "--format", "csv",
                                                  env=env).stdout)))
    by_stage = {row["stage"]: row for row in rows}
    assert by_stage["silent"]["status"] == "failed"
    assert by_stage["silent"]["reason"].startswith("command printed no line matching")
    assert by_stage["crash"]["reason"] == ""


ACCURACY_CMD = """
import argparse, math
parser = argparse.ArgumentParser()
parser.add_argument("--lr", type=float, required=True)
args = parser.parse_args()
print(f"FoM: {1 - abs(math.log10(args.lr) + 1.5) / 3:.4f}")  # an accuracy: best at 0.03
"""


@pytest.mark.slow
def test_a_command_sweep_goes_the_way_mode_says_and_shows_it(tmp_path: Path) -> None:
    script = tmp_path / "train_acc.py"
    script.write_text(textwrap.dedent(ACCURACY_CMD))
    run_dir = tmp_path / "run"
    result = nestor("sweep", "--command", f"{sys.executable} {script}", "--mode", "max",
                    "--param", "lr=float:1e-4:1:log", "--algorithm", "random", "--budget", "4",
                    "--parallel", "2", "--run-dir", str(run_dir), env=dict(os.environ))
    assert result.returncode == 0, result.stderr
    (stage,) = json.loads((run_dir / "results.json").read_text())["stages"]
    values = [t["value"] for t in stage["trials"]]
    assert stage["best"]["value"] == max(values) and len(set(values)) == 4
    assert "best fom (max)" in " ".join(result.stderr.split())
    shown = nestor("results", str(run_dir), env=dict(os.environ))
    lines = shown.stdout.splitlines()
    assert any("fom (max)" in line and stage["best"]["id"] in line for line in lines)
    header = next(i for i, line in enumerate(lines) if line.lstrip().startswith("trial "))
    assert lines[header + 1].split()[0] == stage["best"]["id"]  # best first
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{run_dir / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("sweep")
    runs = client.search_runs([experiment.experiment_id], "tags.`nestor.stage` = 'sweep'"
                              " and attributes.run_name = 'sweep'")
    assert [r.data.tags.get("nestor.objective") for r in runs] == ["fom (max)"]
