"""The scale benches run end to end on small inputs: the journal's durable events per
second, and resume/status/results on a kept simulated run."""

from __future__ import annotations

import json
import shutil
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
    for name in ("status_first", "status_no_snapshot", "status", "results", "resume", "plots"):
        assert found[name]["wall_s"] > 0 and found[name]["peak_mib"] > 0
    assert found["resume"]["out"][0].startswith(f"events {found['resume']['cut']} ")
    assert found["growth"]["events"] == round(found["events"] / found["sizes"][0]["events"], 2)
    # the driver left a snapshot of its whole journal; the status it answered is the
    # status the whole fold answered
    kept = found["driver_snapshot"]
    assert kept["offset"] == kept["journal_bytes"] == (runs[-1] / "journal.jsonl").stat().st_size
    assert found["status_first"]["out"] == found["status_no_snapshot"]["out"] == \
        found["status"]["out"]
    assert (runs[-1] / "journal.fold-stages.json").exists()


def test_resume_and_status_are_timed_on_a_copy_taken_while_the_driver_ran(
        results: Path, tmp_path: Path) -> None:
    keep = tmp_path / "runs"
    keep.mkdir()
    assert simulate.main(["--nodes", "32", "--workloads", "seed", "--modes", "sweep",
                          "--keep", str(keep), "--out", "sim"]) == 0
    run = keep / "seed-generational-sweep"
    live = tmp_path / "live"  # a driver killed two thirds of the way: its snapshots kept
    shutil.copytree(run, live)
    lines = (run / "journal.jsonl").read_bytes().splitlines(keepends=True)
    (live / "journal.jsonl").write_bytes(b"".join(lines[:len(lines) * 2 // 3]))
    (live / "journal.fold-stages.json").unlink()
    assert million_events.main([str(run), "--workload", "seed", "--nodes", "32",
                                "--live", str(live)]) == 0
    found = json.loads((results / "million-events.json").read_text())
    assert found["resume"]["live"] and found["resume"]["cut"] == len(lines) * 2 // 3
    assert found["status_killed"]["events"] == found["resume"]["cut"]
    assert found["resume"]["out"][0].startswith(f"events {found['resume']['cut']} ")


def test_a_million_events_are_made_by_the_bench_itself(results: Path, tmp_path: Path) -> None:
    run = tmp_path / "made" / "mixed-generational-sweep"
    assert million_events.main([str(run), "--nodes", "32", "--make", "2"]) == 0
    found = json.loads((results / "million-events.json").read_text())
    assert found["events"] == sum(1 for _ in (run / "journal.jsonl").open()) > 100
