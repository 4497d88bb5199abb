"""A trial that shows progress outlives its progress timeout; a silent one does not.

Real Ray: the driver makes its progress board only once an attempt has run half a
beat's interval, and a rank finds it by name (orchestrator.backends.ray.heartbeat).
A user's command that prints a line now and then, and a user's function that
reports now and then, each run several progress timeouts long and complete; the
same command, silent, is killed as hung. A sweep of short trials never makes the
board at all (it would cost a Ray worker process).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

NESTOR = str(Path(sys.executable).parent / "nestor")
PROGRESS_S = 2  # trial.progress_timeout; rank 0 may beat every PROGRESS_S / 4
RUN_S = 3 * PROGRESS_S  # each trial runs this long

TALKS = f"""
import sys, time
for step in range(int({RUN_S} / 0.25)):
    if sys.argv[-1] != "--quiet=1":
        print("step", step, flush=True)
    time.sleep(0.25)
print("FoM: 1.0")
"""

REPORTS = f"""
import time


def train(config, ctx):
    for step in range(int({RUN_S} / 0.25)):
        ctx.report({{"score": step}}, step=step)
        time.sleep(0.25)
    return {{"score": 1.0}}
"""


def run(tmp_path: Path, name: str, trainer: str, metric: str, space: str) -> list[dict]:
    spec = tmp_path / f"{name}.yaml"
    spec.write_text(textwrap.dedent(f"""
        name: {name}
        resources: {{slots: 2}}
        stages:
          - name: tune
            kind: hpo
            trainer: {trainer}
            search: {{algorithm: grid}}
            space: {space}
            objective: {{metric: {metric}, mode: max}}
            trial: {{progress_timeout: {PROGRESS_S}, retries: 0}}
        """))
    run_dir = tmp_path / f"run-{name}"
    subprocess.run([NESTOR, "run", str(spec), "--run-dir", str(run_dir)],
                   env=dict(os.environ, PYTHONPATH=str(tmp_path)), capture_output=True,
                   text=True, timeout=300, check=False)
    return [json.loads(line) for line in (run_dir / "journal.jsonl").read_text().splitlines()]


def test_a_command_that_prints_and_a_function_that_reports_outlive_the_timeout(
        tmp_path: Path) -> None:
    (tmp_path / "talks.py").write_text(TALKS)
    (tmp_path / "reports.py").write_text(REPORTS)
    command = run(tmp_path, "command", f'{{command: "{sys.executable} {tmp_path}/talks.py"}}',
                  "fom", "{quiet: {type: categorical, values: [0, 1]}}")
    ended = {e["trial"]["config"]["quiet"]: e for e in command
             if e["event"] in ("trial_finished", "trial_attempt_failed")}
    assert ended[0]["event"] == "trial_finished" and ended[0]["status"] == "completed", ended[0]
    assert ended[1]["status"] == "failed" and "hung" in ended[1]["reason"], ended[1]
    function = run(tmp_path, "function", '{function: "reports:train"}', "score",
                   "{x: {type: categorical, values: [1, 2]}}")
    done = [e for e in function if e["event"] == "trial_finished"]
    assert len(done) == 2 and all(e["status"] == "completed" for e in done), done


def test_a_sweep_of_short_trials_never_makes_the_board(tmp_path: Path) -> None:
    """Checked in the driver's process: Ray's named actors after 40 short trials."""
    script = tmp_path / "sweep.py"
    script.write_text(textwrap.dedent(f"""
        import sys
        from click.testing import CliRunner
        import ray
        from nestor.orchestrator.commands.cli import cli

        seen = []
        real_shutdown = ray.shutdown

        def shutdown(*args, **kwargs):  # the named actors, just before Ray goes
            seen.extend(a["name"] for a in ray.util.list_named_actors(all_namespaces=True))
            seen.append("listed")
            return real_shutdown(*args, **kwargs)

        ray.shutdown = shutdown
        result = CliRunner().invoke(cli, ["sweep", "--command", "/bin/echo FoM: 1",
                                           "--param", "x=float:0:1", "--budget", "40",
                                           "--parallel", "2", "--mode", "max",
                                           "--run-dir", "{tmp_path}/run"])
        print("exit", result.exit_code, sorted(set(seen)), repr(result.exception))
        """))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=300, check=False)
    assert "exit 0" in done.stdout, done.stdout + done.stderr[-3000:]
    assert "listed" in done.stdout  # Ray's named actors were listed before its shutdown
    assert "nestor-progress-" not in done.stdout
