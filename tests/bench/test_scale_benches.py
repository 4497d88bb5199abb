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
    runs = []
    for nodes in (32, 64):  # two sizes: each figure's growth with the journal
        keep = tmp_path / f"runs-{nodes}"
        keep.mkdir()
        assert simulate.main(["--nodes", str(nodes), "--workloads", "seed", "--modes", "sweep",
                              "--keep", str(keep), "--out", "sim"]) == 0
        runs.append(keep / "seed-generational-sweep")
    assert million_events.main([*map(str, runs), "--workload", "seed", "--nodes", "32",
                                "64"]) == 0
    found = json.loads((results / "million-events.json").read_text())
    assert [s["events"] for s in found["sizes"]] == [
        sum(1 for _ in (run / "journal.jsonl").open()) for run in runs]
    assert found["events"] == found["sizes"][-1]["events"]
    for name in ("status_first", "status", "status_tail", "results", "resume", "plots"):
        assert found[name]["wall_s"] > 0 and found[name]["peak_mib"] > 0
    assert found["resume"]["out"][0].startswith(f"events {found['resume']['cut']} ")
    assert found["status_tail"]["tail"] == found["events"] - found["resume"]["cut"]
    assert found["growth"]["events"] == round(found["events"] / found["sizes"][0]["events"], 2)
    # the status the snapshot answered is the status the whole fold answered
    assert found["status"]["out"] == found["status_first"]["out"]
    assert (runs[-1] / "journal.fold-stages.json").exists()


def test_a_million_events_are_made_by_the_bench_itself(results: Path, tmp_path: Path) -> None:
    run = tmp_path / "made" / "mixed-generational-sweep"
    assert million_events.main([str(run), "--nodes", "32", "--make", "2"]) == 0
    found = json.loads((results / "million-events.json").read_text())
    assert found["events"] == sum(1 for _ in (run / "journal.jsonl").open()) > 100
