"""A greedy ensemble's members, planned once its candidates' predictions are in,
resume like any fixed plan: the plan built after the preparing task is the one
journalled, and a resumed driver marks its finished members done instead of
running them again ("a killed driver resumes without re-running finished trials")."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from nestor.orchestrator.backends import SimulatedBackend, fixed_trials
from nestor.orchestrator.engine.history import JournalSoFar
from nestor.orchestrator.engine.kinds.ensemble import KIND
from nestor.orchestrator.journal.events import PlanState, TrialStarted, parse
from nestor.orchestrator.journal.journal import Journal, read_events
from nestor.orchestrator.spec import load_spec_text
from tests.orchestrator.engine.test_stage_tasks import greedy_ensemble_spec
from tests.orchestrator.engine.test_stages import stage
from tests.orchestrator.workflow_helpers import events, nestor

SPEC = greedy_ensemble_spec(slots=1, epochs=1)
MEMBERS = ["member-0", "member-1"]


def sources(tmp_path: Path) -> list[dict[str, Any]]:
    """The tune stage's summary: three completed trials, each with a checkpoint file."""
    trials = []
    for i, (lr, value) in enumerate([(0.01, 0.9), (0.02, 0.8), (0.05, 0.7)]):
        checkpoint = tmp_path / "run" / "checkpoints" / f"t{i}.pt"  # inside the run
        checkpoint.parent.mkdir(parents=True, exist_ok=True)
        checkpoint.write_bytes(b"model")
        trials.append({"id": f"t{i}", "status": "completed", "value": value,
                       "config": {"lr": lr}, "checkpoint": str(checkpoint)})
    return [{"name": "tune", "objective": {"metric": "val_accuracy", "mode": "max"},
             "trials": trials}]


def predictions() -> SimpleNamespace:
    """The preparing task's TaskDone: the candidates' validation probabilities, the
    second candidate right on every example, the others on half."""
    labels = np.array([0, 1, 0, 1])
    right = np.eye(2)[labels]
    half = np.eye(2)[[0, 0, 0, 0]]
    return SimpleNamespace(error=None, value=([half, right, half], labels))


def driver(tmp_path: Path, journal: Journal, events: list[Any]) -> Any:
    """What the workflow does to start a greedy ensemble stage: build its runner,
    run its preparing task (here: its result given), then restore it."""
    workflow = load_spec_text(SPEC)
    backend = SimulatedBackend(1, 1, fixed_trials(10.0, 0.85))
    runner = KIND.runner(workflow, workflow.stage("members"), sources(tmp_path),
                         run_dir=tmp_path / "run", backend=backend, journal=journal,
                         events=events)
    assert runner.preparing_task() is not None  # greedy: waits for the predictions
    runner.prepared(predictions())
    runner.restore(events)
    return runner


def run_one_member(runner: Any) -> None:
    """Start what fits (one member on one slot) and hear it to its end."""
    assert runner.start_what_fits() == 1
    while runner.running:
        for event in runner.backend.wait(None):
            runner.on_event(event)


def test_a_resumed_greedy_ensemble_keeps_its_plan_and_its_finished_members(
        tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    with Journal(path) as journal:
        first = driver(tmp_path, journal, JournalSoFar.of([]))
        assert [t.id for t in first.searcher.trials] == MEMBERS
        run_one_member(first)  # then the driver is killed
    records = list(read_events(path))
    plans = [e.state for e in map(parse, records) if isinstance(e, PlanState)]
    assert plans and plans[-1]["trials"] == MEMBERS, plans
    assert plans[-1]["told"].keys() == {"member-0"}

    with Journal(path) as journal:
        again = driver(tmp_path, journal, JournalSoFar.of(records))
        assert again.searcher.state() == plans[-1]
        assert [t.id for t in again.searcher.trials] == MEMBERS
        assert [t.config for t in again.searcher.trials] == \
            [t.config for t in first.searcher.trials]
        run_one_member(again)
        assert again.searcher.done()
    started = [e.trial["id"] for e in (parse(r) for r in read_events(path))
               if isinstance(e, TrialStarted)]
    assert started == MEMBERS  # each member ran once, across both drivers


def test_a_greedy_ensemble_stopped_while_preparing_resumes_into_its_plan(
        tmp_path: Path) -> None:
    """Stopped before its predictions came, the stage journalled a plan of no trials
    (the one it waited with): the resumed stage runs its members, all of them once."""
    path = tmp_path / "journal.jsonl"
    workflow = load_spec_text(SPEC)
    with Journal(path) as journal:
        first = KIND.runner(workflow, workflow.stage("members"), sources(tmp_path),
                            run_dir=tmp_path / "run", journal=journal,
                            backend=SimulatedBackend(1, 1, fixed_trials(10.0, 0.85)))
        assert first.preparing_task() is not None
        first.abandon("stopped")
    records = list(read_events(path))
    assert [e.state["trials"] for e in map(parse, records) if isinstance(e, PlanState)] == [[]]
    with Journal(path) as journal:
        again = driver(tmp_path, journal, JournalSoFar.of(records))
        for _ in MEMBERS:
            run_one_member(again)
        assert again.searcher.done() and again.start_what_fits() == 0
    started = [e.trial["id"] for e in (parse(r) for r in read_events(path))
               if isinstance(e, TrialStarted)]
    assert started == MEMBERS


# The first driver dies (its whole process group, Ray's processes too) the moment its
# first member's end is durable in the journal: the kill lands there, not by timing.
KILL_AFTER_A_MEMBER = """
import os, signal
from nestor.orchestrator.journal import journal as _journal
from nestor.orchestrator.journal.events import TrialFinished
_record = _journal.Journal.record
def record(self, event):
    out = _record(self, event)
    if isinstance(event, TrialFinished) and event.stage == "members":
        self.sync()
        os.killpg(0, signal.SIGKILL)
    return out
_journal.Journal.record = record
"""

@pytest.mark.slow
def test_a_driver_killed_mid_ensemble_resumes_without_rerunning_its_members(
        tmp_path: Path) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC)
    run_dir = tmp_path / "run"
    script = (f"{KILL_AFTER_A_MEMBER}\nimport sys\nfrom nestor.orchestrator.commands import cli\n"
              "sys.argv = ['nestor', *sys.argv[1:]]\ncli.main()\n")
    driver = subprocess.Popen([sys.executable, "-c", script, "run", str(spec), "--run-dir",
                               str(run_dir)], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, start_new_session=True)
    assert driver.wait(timeout=600) == -signal.SIGKILL
    before = events(run_dir)
    done = [e["trial"]["id"] for e in before
            if e["event"] == "trial_finished" and e["stage"] == "members"]
    assert done == ["member-0"]
    result = nestor("resume", str(run_dir), env=dict(os.environ), timeout=600)
    assert result.returncode == 0, result.stderr
    log = events(run_dir)
    assert [e["stage"] for e in log if e["event"] == "stage_finished"] == ["tune", "members"]
    started = [e["trial"]["id"] for e in log
               if e["event"] == "trial_started" and e["stage"] == "members"]
    assert started == ["member-0", "member-1"]  # member-0 ran once, before the kill
    assert stage(run_dir, "members")["ensemble"] is not None
