"""A driver killed between a trial's ``trial_finished`` and the searcher's log entry
for it: the resumed driver tells the searcher that result exactly once, from the
journal, and never runs the trial again.

The window is short (the ``tell`` and its ``search`` line follow the finish
within microseconds), so a timed signal almost never lands in it: the driver runs in
a process of its own, on the simulated cluster, with a SIGKILL put exactly there
(``_tell``'s entry, or after the searcher heard but before its log entry was
journalled). The resume then runs the same scheduler code in this process.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from nestor.orchestrator.backends import SimulatedBackend, lognormal_trials
from nestor.orchestrator.engine.workflow import run_workflow
from nestor.orchestrator.journal.journal import read_events
from nestor.orchestrator.spec import load_spec_text

SPEC = textwrap.dedent("""
    name: killed
    stages:
      - name: tune
        kind: hpo
        trainer: {function: "nestor.orchestrator.simulate:simulated_trial"}
        search: {algorithm: genetic, population: 4, generations: 3, seed: 1}
        space:
          x: {type: float, low: 0, high: 1}
          y: {type: float, low: 0, high: 1}
        objective: {metric: val_accuracy, mode: max}
    """)

# The N-th result the driver tells its searcher is where it dies: mid-way through
# the second generation, with results before it logged and trials after it to run.
KILLED_AT_TELL = 6

DRIVER = """
import os, signal, sys
from pathlib import Path
from nestor.orchestrator.backends import SimulatedBackend, lognormal_trials
from nestor.orchestrator.engine import trials
from nestor.orchestrator.engine.workflow import run_workflow
from nestor.orchestrator.spec import load_spec_text

where, number, run_dir, spec = sys.argv[1], int(sys.argv[2]), Path(sys.argv[3]), sys.argv[4]
real, calls = trials.TrialRunner._tell, []

def die():
    os.kill(os.getpid(), signal.SIGKILL)

def faulty(self, trial, record):
    calls.append(trial.id)
    if len(calls) == number:
        if where == "before the tell":
            die()
        self.search_log.record = die  # the searcher hears, its log entry is never written
    return real(self, trial, record)

trials.TrialRunner._tell = faulty
backend = SimulatedBackend(2, 4, lognormal_trials(60.0, 0.3), seed=1)
run_workflow(load_spec_text(spec), backend, run_dir)
"""


def events(run_dir: Path, kind: str) -> list[dict[str, Any]]:
    return [e for e in read_events(run_dir / "journal.jsonl") if e["event"] == kind]


def tells(run_dir: Path) -> Counter[str]:
    """How many times the journalled search log says each trial was told."""
    told: Counter[str] = Counter()
    for logged in events(run_dir, "search"):
        told.update(entry["id"] for entry in logged["entries"] if entry["event"] == "tell")
    return told


@pytest.mark.parametrize("where", ["before the tell", "after the tell, before its log entry"])
def test_a_result_journalled_just_before_the_kill_is_told_once_on_resume(
        tmp_path: Path, where: str) -> None:
    run_dir = tmp_path / "run"
    driver = subprocess.run([sys.executable, "-c", DRIVER, where, str(KILLED_AT_TELL),
                             str(run_dir), SPEC], capture_output=True, text=True,
                            timeout=120, check=False)
    assert driver.returncode == -signal.SIGKILL, driver.stderr
    # The kill landed in the window: the last result is journalled, its tell is not.
    finished = events(run_dir, "trial_finished")
    assert len(finished) == KILLED_AT_TELL, [e["trial"]["id"] for e in finished]
    last = finished[-1]["trial"]["id"]
    before = tells(run_dir)
    assert last not in before and len(before) == KILLED_AT_TELL - 1, before

    backend = SimulatedBackend(2, 4, lognormal_trials(60.0, 0.3), seed=2)
    results = run_workflow(load_spec_text(SPEC), backend, run_dir, resume=True)

    told = tells(run_dir)
    assert told[last] == 1, f"trial {last} was told {told[last]} times after the resume"
    done = events(run_dir, "trial_finished")
    assert [e["trial"]["id"] for e in done].count(last) == 1, f"trial {last} ran again"
    ids = [e["trial"]["id"] for e in done]
    assert len(ids) == len(set(ids)) == 12 and set(told) == set(ids)
    assert set(told.values()) == {1}, told
    (stage,) = results["stages"]
    assert stage["n_trials"] == 12


def test_a_result_that_landed_while_the_driver_was_down_is_adopted_on_resume(
        tmp_path: Path) -> None:
    # The driver dies with trials in flight; one of them finished meanwhile and its
    # rank 0 wrote its result where the attempt was told to (attempts/STAGE/TRIAL/N.json).
    # The resumed driver takes that result over: journalled as adopted, told once,
    # never launched again. (On real Ray: test_workflow's adoption test, slow.)
    from nestor.trainers import TrialResult

    run_dir = tmp_path / "run"
    driver = subprocess.run([sys.executable, "-c", DRIVER, "before the tell",
                             str(KILLED_AT_TELL), str(run_dir), SPEC], capture_output=True,
                            text=True, timeout=120, check=False)
    assert driver.returncode == -signal.SIGKILL, driver.stderr
    ended = {e["trial"]["id"] for e in events(run_dir, "trial_finished")}
    in_flight = [e for e in events(run_dir, "trial_started") if e["trial"]["id"] not in ended]
    assert in_flight, "no trial was running at the kill"
    landed = in_flight[0]
    trial_id, attempt = landed["trial"]["id"], landed["attempt"]
    result = run_dir / "attempts" / "tune" / trial_id / f"{attempt}.json"
    result.parent.mkdir(parents=True, exist_ok=True)
    result.write_text(json.dumps(TrialResult(f"tune-{trial_id}", "ok", metrics={
        "val_accuracy": 0.123456, "wall_time": 60.0}).to_dict()))

    backend = SimulatedBackend(2, 4, lognormal_trials(60.0, 0.3), seed=2)
    run_workflow(load_spec_text(SPEC), backend, run_dir, resume=True)

    (finish,) = [e for e in events(run_dir, "trial_finished") if e["trial"]["id"] == trial_id]
    assert finish.get("adopted") and finish["status"] == "completed", finish
    assert finish["metrics"]["val_accuracy"] == 0.123456 and finish["attempt"] == attempt
    launches = [e for e in events(run_dir, "trial_started") if e["trial"]["id"] == trial_id]
    assert launches == [landed], "the trial whose result landed was launched again"
    assert tells(run_dir)[trial_id] == 1
