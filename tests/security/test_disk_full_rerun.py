"""A disk that fills under running trials stops the driver in one line, and the
trials that were running are run again on resume.

On a 3 MB tmpfs the run stopped with exit 75, but the trials running when the
disk filled were journalled as failed for good ("could not write the result
file ... No space left on device"): `nestor resume` never ran them again, and
the output held thousands of lines of SQLAlchemy tracebacks from the MLflow
projector (whose store, the run directory's own, was on the full disk too).
Here a trial itself fills a real, size-limited tmpfs holding the run directory
(its MLflow store included), after other trials have finished.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.tmpfs import tmpfs

pytestmark = pytest.mark.slow

NESTOR = str(Path(sys.executable).parent / "nestor")
# The trial that claims the "fill" mark (once the test has put it there) fills the
# disk, then prints its result, which its rank cannot write to the run directory.
FIT = """
import os, sys, time
args = dict(a.lstrip("-").split("=", 1) for a in sys.argv[1:])
x = float(args["x"])
mark = os.environ["FILL_MARK"]
try:
    os.rename(mark, mark + ".claimed")
    claimed = True
except FileNotFoundError:
    claimed = False
if claimed:
    with open(os.environ["FILLER"], "wb") as out:
        try:
            while True:
                out.write(b"\\0" * 65536)
                out.flush()
        except OSError:
            pass
    with open(os.environ["FILLER"] + "-tail", "wb", buffering=0) as out:
        try:
            while True:
                out.write(b"\\0")
        except OSError:
            pass
time.sleep(float(os.environ.get("FIT_SLEEP", "0.5")))
print(f"FoM: {(x - 0.3) ** 2}", flush=True)
"""
SPEC = """
name: diskfull
resources: {{slots: 2}}
stages:
  - name: tune
    kind: hpo
    trainer: {{command: ["{python}", "{fit}"]}}
    search: {{algorithm: random, budget: {budget}, seed: 3}}
    space:
      x: {{type: float, low: -1, high: 1}}
    objective: {{metric: result, mode: min}}
    trial: {{retries: 1}}
"""
BUDGET = 10


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """An 8 MiB tmpfs: ENOSPC as a real full disk gives it."""
    with tmpfs(tmp_path / "disk", "8m") as mount:
        yield mount


def journal(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "journal.jsonl").read_text().splitlines()
            if line.strip()]


def finished(run_dir: Path) -> dict[str, dict]:
    return {e["trial"]["id"]: e for e in journal(run_dir) if e["event"] == "trial_finished"}


def test_trials_running_when_the_disk_fills_run_again_on_resume(small_disk: Path,
                                                                tmp_path: Path) -> None:
    fit = tmp_path / "fit.py"
    fit.write_text(FIT)
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC.format(python=sys.executable, fit=fit, budget=BUDGET))
    run_dir = small_disk / "run"
    mark = tmp_path / "fill"
    env = dict(os.environ, FILL_MARK=str(mark), FILLER=str(small_disk / "filler"),
               FIT_SLEEP="0.5")
    driver = subprocess.Popen([NESTOR, "run", str(spec), "--run-dir", str(run_dir)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    while driver.poll() is None and time.monotonic() < deadline:
        if (run_dir / "journal.jsonl").exists() and len(finished(run_dir)) >= 3:
            break
        time.sleep(0.1)
    mark.touch()  # the next trial to start fills the disk
    try:
        out, err = driver.communicate(timeout=300)
    finally:
        if driver.poll() is None:
            driver.kill()
    print(f"\nthe driver's stderr on the full disk:\n{err}")
    assert driver.returncode == 75, out + err
    assert "Traceback" not in out + err, err[-5000:]
    assert len(err.splitlines()) <= 10, err[-5000:]  # one clear line, not thousands
    # MLflow's store did hit the full disk (its SQLite file, or a log copied into its
    # artifacts), was said so once, and was not waited for (a full disk is not freed
    # by waiting: the driver's wait for MLflow ends at once)
    refusals = [line for line in err.splitlines() if line.startswith("MLflow at ")
                and ("database or disk is full" in line or "No space left on device" in line)]
    assert len(refusals) == 1, err
    assert f"nestor resume {run_dir}" in err and "disk" in err, err
    assert (tmp_path / "fill.claimed").exists()
    before = finished(run_dir)
    assert 3 <= len(before) < BUDGET
    lost = {t: e["reason"] for t, e in before.items() if e["status"] != "completed"}
    assert lost == {}, f"trials journalled as failed for want of space: {lost}"

    for name in ("filler", "filler-tail"):
        (small_disk / name).unlink()
    resumed = subprocess.run([NESTOR, "resume", str(run_dir)], env=env, capture_output=True,
                             text=True, timeout=600, check=False)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    after = finished(run_dir)
    assert len(after) == BUDGET
    assert {t: e["status"] for t, e in after.items()} == dict.fromkeys(after, "completed")
    for trial, event in before.items():  # what had finished is kept, not run again
        assert after[trial]["value"] == event["value"]
