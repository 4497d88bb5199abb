"""`-q` and `-v` on real runs (Ray, MLflow, a command trainer): quiet prints no progress
bar and no notices, only the final summary (and errors); verbose adds a line as each
trial starts and ends, for `nestor sweep` and `nestor resume` alike."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from tests.orchestrator.workflow_helpers import nestor

pytestmark = pytest.mark.slow

FIT = """
import sys
args = dict(a.lstrip("-").split("=", 1) for a in sys.argv[1:])
x = float(args["x"])
if x > 2:
    sys.exit("x out of range")
print(f"FoM: {(x - 0.3) ** 2}")
"""


def sweep_args(tmp_path: Path, run_dir: Path, high: float = 1.0) -> list[str]:
    (tmp_path / "fit.py").write_text(FIT)
    return ["sweep", "--command", f"{sys.executable} {tmp_path / 'fit.py'}", "--param",
            f"x=float:{high - 1}:{high}", "--mode", "min", "--algorithm", "random",
            "--budget", "2", "--seed", "1", "--run-dir", str(run_dir)]


def test_verbose_says_each_trial_and_quiet_only_the_summary(tmp_path: Path) -> None:
    env = dict(os.environ)
    run_dir = tmp_path / "run"
    loud = nestor(*sweep_args(tmp_path, run_dir), "-v", env=env)
    assert loud.returncode == 0, loud.stderr
    for trial in ("0", "1"):
        assert f"sweep: trial {trial} started: x=" in loud.stderr
        assert f"sweep: trial {trial} completed, value " in loud.stderr
    assert "stage sweep (hpo) started" in loud.stderr
    assert "run directory:" in loud.stdout

    quiet = nestor("resume", str(run_dir), "--budget", "3", "-q", env=env)
    assert quiet.returncode == 0, quiet.stderr
    assert quiet.stderr == ""  # no progress bar, no notices
    assert "run directory:" in quiet.stdout and "best of sweep" in quiet.stdout
    default = nestor("resume", str(run_dir), "--budget", "4", env=env)
    assert default.returncode == 0 and "sweep ━" in default.stderr  # the bar, as before
    assert "trial 3 started" not in default.stderr


def test_quiet_still_prints_the_errors(tmp_path: Path) -> None:
    failing = nestor(*sweep_args(tmp_path, tmp_path / "bad", high=4.0), "-q",
                     env=dict(os.environ))
    assert failing.returncode == 1
    assert "all 2 trials failed" in failing.stderr and "━" not in failing.stderr
