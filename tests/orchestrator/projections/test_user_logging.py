"""What a user's code logs reaches its trial's MLflow run through the journal, once,
however the driver is killed: `nestor run` on real Ray with a real MLflow store, a
function trainer (``ctx.log_metrics``, ``ctx.set_tags``, ``ctx.log_artifact``) and
a command trainer (``nestor.metric``/``nestor.tag`` lines, ``NESTOR_ARTIFACT_DIR``)
written as a user would. The driver is SIGKILLed where a trial has logged an
artifact (while MLflow takes it; before its result is journalled), resumed, and
MLflow is read back through its client: each trial's metrics at their steps,
each point once, its tags, its artifact once with the content the trial wrote;
no trial ran twice."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from tests.orchestrator.workflow_helpers import (
    DIES_BEFORE_JOURNALLING_A_RESULT,
    NESTOR,
    events,
    finished,
    mlflow_runs,
    nestor,
)

pytestmark = pytest.mark.slow

FUNCTION = '''
"""A user's training function that logs more than its result."""
import os
import tempfile


def train(config, ctx):
    x = config["x"]
    with open(os.environ["CALLS_LOG"], "a") as calls:  # what ran, seen from outside
        calls.write(f"{x!r}\\n")
    for epoch in range(3):
        ctx.log_metrics({"train_loss": x / (epoch + 1), "lr_now": x * 2}, step=epoch * 10)
    ctx.set_tags({"model": "quadratic fit"})
    scratch = tempfile.mkdtemp()
    path = os.path.join(scratch, "report.txt")
    with open(path, "w") as report:
        report.write(f"x={x!r}\\n")
    ctx.log_artifact(path, name="reports/report.txt")
    return {"cmdsweep_loss": (x - 0.3) ** 2}
'''

COMMAND = '''
"""A user's training script that logs more than its result."""
import argparse
import os

parser = argparse.ArgumentParser()
parser.add_argument("--x", type=float)
parser.add_argument("--y", type=float)
args = parser.parse_args()
with open(os.environ["CALLS_LOG"], "a") as calls:
    calls.write(f"{args.x!r}\\n")
for epoch in range(3):
    print(f"nestor.metric train_loss={args.x / (epoch + 1)} lr_now={args.x * 2}"
          f" step={epoch * 10}", flush=True)
print("nestor.tag model=quadratic fit")
os.makedirs(os.path.join(os.environ["NESTOR_ARTIFACT_DIR"], "reports"), exist_ok=True)
with open(os.path.join(os.environ["NESTOR_ARTIFACT_DIR"], "reports", "report.txt"), "w") as f:
    f.write(f"x={args.x!r}\\n")
print(f"FoM: {(args.x - 0.3) ** 2}")
'''

SPEC = """
name: cmdsweep
resources: {{slots: 2}}
stages:
  - name: tune
    kind: hpo
    trainer: {trainer}
    search: {{algorithm: random, budget: 4, seed: 5}}
    space:
      x: {{type: float, low: -1, high: 1}}
      y: {{type: float, low: -1, high: 1}}
    objective: {{metric: {metric}, mode: min}}
"""

# The projector has copied a trial's artifact into MLflow (and written its metric
# points) but not yet moved its cursor past the event: the resumed driver projects
# that event again.
# Run in the projector's own process (projections.projector_process), where MLflow is
# written, as its sitecustomize: the kill takes the driver's whole process group.
DIES_AFTER_MLFLOW_TOOK_AN_ARTIFACT = textwrap.dedent("""\
    import os, signal, sys
    if "projector_process" in " ".join(getattr(sys, "orig_argv", sys.argv)):
        from nestor.orchestrator.projections import tracking
        real = tracking.Tracker.log_artifact
        def faulty(self, run_id, path, folder=None):
            real(self, run_id, path, folder)
            if os.path.basename(str(path)) == "report.txt":
                os.killpg(0, signal.SIGKILL)
        tracking.Tracker.log_artifact = faulty
    """)


def setup(tmp_path: Path, kind: str) -> tuple[Path, Path, dict[str, str]]:
    code = tmp_path / "code"
    code.mkdir()
    if kind == "function":
        (code / "logging_fit.py").write_text(FUNCTION)
        trainer, metric = '{function: "logging_fit:train"}', "cmdsweep_loss"
    else:
        (code / "logging_fit.py").write_text(COMMAND)
        trainer, metric = f'{{command: ["{sys.executable}", "{code / "logging_fit.py"}"]}}', \
            "fom"
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC.format(trainer=trainer, metric=metric))
    env = dict(os.environ, CALLS_LOG=str(tmp_path / "calls.log"), PYTHONPATH=os.pathsep.join(
        [str(code), *filter(None, [os.environ.get("PYTHONPATH")])]))
    return spec, tmp_path / "run", env


def read_artifact(run_dir: Path, run: Any, name: str, into: Path) -> str:
    """An artifact's content, fetched through MLflow's artifact repository."""
    from mlflow.store.artifact.artifact_repository_registry import get_artifact_repository

    from nestor.orchestrator.projections.store_paths import artifact_location

    repository = get_artifact_repository(artifact_location(run_dir, run.info.artifact_uri))
    into.mkdir(parents=True, exist_ok=True)
    return Path(repository.download_artifacts(name, str(into))).read_text()


def assert_mlflow_holds_what_each_trial_logged(run_dir: Path, tmp_path: Path) -> None:
    from mlflow.tracking import MlflowClient

    from nestor.orchestrator.projections.store_paths import list_artifacts

    done = finished(run_dir)
    assert len(done) == 4 and all(e["status"] == "completed" for e in done.values()), done
    trial_runs = [r for r in mlflow_runs(run_dir) if "mlflow.parentRunId" in r.data.tags]
    by_trial = {r.data.tags["nestor.trial"]: r for r in trial_runs}
    assert len(trial_runs) == len(by_trial) == 4 and set(by_trial) == set(done)  # no twin
    client = MlflowClient(tracking_uri=f"sqlite:///{run_dir / 'mlflow.db'}")
    for trial_id, event in done.items():
        run, x = by_trial[trial_id], event["trial"]["config"]["x"]
        for name, expected in (("train_loss", [(0, x), (10, x / 2), (20, x / 3)]),
                               ("lr_now", [(0, x * 2), (10, x * 2), (20, x * 2)])):
            history = client.get_metric_history(run.info.run_id, name)
            got = sorted((m.step, m.value) for m in history)
            assert [step for step, _ in got] == [step for step, _ in expected], got  # once each
            assert [v for _, v in got] == pytest.approx([v for _, v in expected]), got
        assert run.data.tags["model"] == "quadratic fit"
        listed = [a.path for a in list_artifacts(client, run_dir, run.info.run_id, "reports")]
        assert listed == ["reports/report.txt"], listed
        content = read_artifact(run_dir, run, "reports/report.txt", tmp_path / "got" / trial_id)
        assert content == f"x={x!r}\n"
        # the journal says where the file is in the run directory, and its digest
        (artifact,) = event["logged"]["artifacts"]
        assert artifact["path"] == f"artifacts/tune/{trial_id}/reports/report.txt"
        assert (run_dir / artifact["path"]).read_text() == content


def calls(tmp_path: Path) -> list[str]:
    return (tmp_path / "calls.log").read_text().split()


def test_a_function_trials_logs_are_in_mlflow_once_after_a_kill_while_mlflow_took_them(
        tmp_path: Path, nestor_with_fault) -> None:
    spec, run_dir, env = setup(tmp_path, "function")
    faults = tmp_path / "faults"
    faults.mkdir()
    (faults / "sitecustomize.py").write_text(DIES_AFTER_MLFLOW_TOOK_AN_ARTIFACT)
    env["PYTHONPATH"] = os.pathsep.join([str(faults), env["PYTHONPATH"]])
    driver = subprocess.run([NESTOR, "run", str(spec), "--run-dir", str(run_dir)], env=env,
                            start_new_session=True, timeout=300, capture_output=True,
                            text=True, check=False)  # the fault is in its projector's process
    env["PYTHONPATH"] = env["PYTHONPATH"].split(os.pathsep, 1)[1]  # the resume runs clean
    assert driver.returncode == -signal.SIGKILL, driver.stderr
    # The kill came while MLflow took a finished trial's artifact, before the projector
    # said that event was done: the resumed driver projects it again.
    logged = [e for e in events(run_dir) if e["event"] == "trial_finished" and e.get("logged")]
    assert logged, "no trial had finished and logged when the driver died"
    cursor = int((run_dir / "mlflow-projected").read_text() or 0) \
        if (run_dir / "mlflow-projected").exists() else 0
    assert cursor <= min(e["seq"] for e in logged)
    assert list((run_dir / "mlartifacts").rglob("report.txt")), "MLflow had not taken it"
    before = {e["trial"]["id"] for e in logged}

    result = nestor("resume", str(run_dir), env=env, timeout=300)
    assert result.returncode == 0, result.stderr
    assert_mlflow_holds_what_each_trial_logged(run_dir, tmp_path)
    done = finished(run_dir)
    for trial_id in before:  # finished before the kill: never ran again
        assert calls(tmp_path).count(repr(done[trial_id]["trial"]["config"]["x"])) == 1


def test_a_command_trials_logs_are_in_mlflow_once_after_a_kill_before_its_result_was_journalled(
        tmp_path: Path, nestor_with_fault) -> None:
    spec, run_dir, env = setup(tmp_path, "command")
    driver = nestor_with_fault(DIES_BEFORE_JOURNALLING_A_RESULT, "run", str(spec),
                               "--run-dir", str(run_dir), env=env,
                               start_new_session=True, timeout=300)
    assert driver.returncode == -signal.SIGKILL, driver.stderr
    assert len(finished(run_dir)) == 2  # the third trial's result and artifact: on disk only

    result = nestor("resume", str(run_dir), env=env, timeout=300)
    assert result.returncode == 0, result.stderr
    adopted = [e for e in finished(run_dir).values() if e.get("adopted")]
    assert adopted and all(e["logged"]["artifacts"] for e in adopted), adopted
    assert_mlflow_holds_what_each_trial_logged(run_dir, tmp_path)
    for event in adopted:  # its program ran once, before the kill
        assert calls(tmp_path).count(repr(event["trial"]["config"]["x"])) == 1
