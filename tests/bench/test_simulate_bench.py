"""The arithmetic of bench/simulate.py (utilization, idle, time to fill) and its specs,
and one small run of it end to end."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import simulate
from nestor.orchestrator.spec import load_spec_text

# (launched, started, ended, ranks, outcome)
ROWS = [
    (0.0, 10.0, 50.0, 4, "ok"),          # 10 s start-up, 40 s busy
    (0.0, None, 5.0, 4, "node_lost"),    # died while its gang started: start-up only
    (50.0, 50.0, 70.0, 4, "rank_failed"),  # a warm gang; 20 s of lost work
]


def test_usage_splits_available_slot_seconds_into_busy_startup_and_idle() -> None:
    # 8 slots for 100 s; a 4-slot node out from 5 s to 105 s (so 95 s in the window).
    u = simulate.usage(ROWS, [(5.0, 105.0, 4)], slots=8, end=100.0, last_launch=50.0)
    assert u["available"] == 800 - 95 * 4
    assert u["busy"] == 40 * 4 + 20 * 4
    assert u["startup"] == 10 * 4 + 5 * 4
    assert u["lost_work"] == 20 * 4
    assert u["idle"] == pytest.approx(u["available"] - u["busy"] - u["startup"])
    # Before 50 s: 8 slots, less 4 held until 50 s, less 4 held 0-5 s, less 4 out 5-50 s.
    assert u["idle_before_last_launch"] == pytest.approx(8 * 50 - 4 * 50 - 4 * 5 - 4 * 45)
    assert u["idle_after_last_launch"] == pytest.approx(u["idle"] - u["idle_before_last_launch"])


def test_time_to_fill_is_when_the_share_of_slots_is_first_held_and_busy() -> None:
    rows = [(0.0, 30.0, 100.0, 4, "ok"), (20.0, 20.0, 100.0, 4, "ok")]
    assert simulate.time_to_fill(rows, slots=8, share=1.0) == {"held": 20.0, "busy": 30.0}
    assert simulate.time_to_fill(rows, slots=16, share=1.0) == {"held": None, "busy": None}


def test_the_workloads_are_valid_specs_of_the_planned_size() -> None:
    seed, mixed = simulate.workloads(quick=False)
    workflow = load_spec_text(simulate.spec_text(seed, "generational", seed.generations))
    (stage,) = workflow.stages
    assert (stage.parallel.data, stage.parallel.model) == (16, 8)
    assert stage.planned_trials() == 16 * 20
    workflow = load_spec_text(simulate.spec_text(mixed, "async", mixed.generations))
    assert [s.parallel.data * s.parallel.model for s in workflow.stages] == [128, 64, 32, 16]
    assert {s.search.schedule for s in workflow.stages} == {"async"}


def test_a_small_benchmark_run_loses_nothing_and_writes_its_results(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(simulate, "workloads", lambda quick: [
        simulate.Workload("tiny", (simulate.Stage("tune", 4, 8, 8),), generations=3,
                          median_s=600.0, sigma=1.0, note="tiny")])
    monkeypatch.setattr("bench.machine.RESULTS", tmp_path)
    monkeypatch.setattr("bench.machine.ROOT", tmp_path)
    assert simulate.main(["--out", "sim", "--workloads", "tiny", "--allocation-h", "2",
                          "--node-mtbf-h", "20"]) == 0
    result = json.loads((tmp_path / "sim.json").read_text())
    runs = result["workloads"]["tiny"]["runs"]
    assert [(r["mode"], r["schedule"]) for r in runs] == [
        ("sweep", "generational"), ("sweep", "async"),
        ("allocation", "generational"), ("allocation", "async")]
    for r in runs:
        assert r["lost"] == 0, r
        assert 0 < r["utilization"] <= 1
        # The scheduler's own count of busy slot-seconds agrees with the slots' ledger
        # (less, in an allocation, the attempts its time limit cut, journalled unfinished).
        if r["mode"] == "sweep":
            assert r["scheduler_counted_busy_share"] == pytest.approx(r["utilization"])
        else:
            assert r["scheduler_counted_busy_share"] <= r["utilization"] + 1e-9
    sweep = {r["schedule"]: r for r in runs if r["mode"] == "sweep"}
    assert sweep["generational"]["completed"] == sweep["async"]["completed"] == 24
    assert sum(r["node_failures"] for r in runs) > 0  # 20 h MTBF on 256 nodes: some failed
