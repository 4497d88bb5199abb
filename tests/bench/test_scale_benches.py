"""The scale benches run end to end on small inputs: the journal's durable events per
second, and resume/status/results on a kept simulated run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import journal_bench, million_events, simulate


@pytest.fixture
def results(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr("bench.machine.RESULTS", tmp_path / "results")
    monkeypatch.setattr("bench.machine.ROOT", tmp_path)
    return tmp_path / "results"


def test_the_journal_bench_makes_every_event_durable_in_fewer_fsyncs(
        results: Path, tmp_path: Path) -> None:
    assert journal_bench.main(["--events", "400", "--threads", "4", "--dir",
                               str(tmp_path)]) == 0
    modes = json.loads((results / "journal.json").read_text())["modes"]
    assert modes["per-event"]["events_per_fsync"] == 1.0
    assert modes["stream"]["events"] == 400 and modes["stream"]["fsyncs"] < 400


def test_resume_status_and_results_are_timed_on_a_kept_run(
        results: Path, tmp_path: Path) -> None:
    keep = tmp_path / "runs"
    keep.mkdir()
    assert simulate.main(["--nodes", "32", "--workloads", "seed", "--modes", "sweep",
                          "--keep", str(keep), "--out", "sim"]) == 0
    run = keep / "seed-generational-sweep"
    assert million_events.main([str(run), "--workload", "seed", "--nodes", "32"]) == 0
    found = json.loads((results / "million-events.json").read_text())
    assert found["events"] == sum(1 for _ in (run / "journal.jsonl").open())
    for name in ("status", "results", "resume"):
        assert found[name]["wall_s"] > 0 and found[name]["peak_mib"] > 0
    assert found["resume"]["out"][0].startswith(f"events {found['resume']['cut']} ")
