"""A search under a slot-seconds budget is told what each trial cost, starting its
gang included: on the real scheduler and a simulated cluster whose new gangs take
30 s to start, every told cost is the trial's slot-seconds and start-up, and the
budget ends the search when they add up to it."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from nestor.orchestrator.backends import SimulatedBackend, fixed_trials
from nestor.orchestrator.engine.workflow import run_workflow
from nestor.orchestrator.journal.journal import read_events
from nestor.orchestrator.spec import load_spec_text

BUDGET = 1500.0
SPEC = textwrap.dedent(f"""
    name: paid
    stages:
      - name: tune
        kind: hpo
        trainer: {{function: "nestor.orchestrator.simulate:simulated_trial"}}
        search: {{algorithm: random, budget: {{slot_seconds: {BUDGET:g}}}, seed: 1}}
        space:
          x: {{type: float, low: 0, high: 1}}
        objective: {{metric: val_accuracy, mode: max}}
    """)


def test_every_told_cost_pays_for_the_trial_and_its_gangs_start_up(tmp_path: Path) -> None:
    backend = SimulatedBackend(1, 2, fixed_trials(100.0, 0.5), seed=1, startup_s=30.0)
    run_workflow(load_spec_text(SPEC), backend, tmp_path / "run")
    events = read_events(tmp_path / "run" / "journal.jsonl")
    finished = {e["trial"]["id"]: e for e in events if e["event"] == "trial_finished"}
    told = {entry["id"]: entry for e in events if e["event"] == "search"
            for entry in e["entries"] if entry["event"] == "tell"}
    assert set(told) == set(finished) and len(finished) >= 5
    started = [e for e in finished.values() if e["startup_slot_seconds"] > 0]
    assert started, "no trial started a gang: nothing tells start-up apart"
    for trial_id, event in finished.items():
        paid = event["slot_seconds"] + event["startup_slot_seconds"]
        assert told[trial_id]["cost"] == pytest.approx(paid), (trial_id, told[trial_id], event)
    spent = sum(entry["cost"] for entry in told.values())
    assert spent <= BUDGET * (1 + 1e-9)
