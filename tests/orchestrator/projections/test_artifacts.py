"""publish_stage against a real MLflow store (SQLite in tmp_path), for each stage
kind, from hand-built summaries and journals; and the summary tables."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nestor.orchestrator.projections.artifacts import publish_stage
from nestor.orchestrator.projections.kinds import stage_report
from nestor.orchestrator.projections.tables import to_html, to_markdown
from nestor.search import Objective
from tests.orchestrator.projections.test_plots import ENSEMBLE, TRANSFER, finished, started


class Stage:
    """The attributes of a spec stage that publish_stage reads."""

    def __init__(self, name: str, objectives: list[Objective], algorithm: str = "") -> None:
        self.name = name
        self.objectives = objectives
        self.search = type("Search", (), {"algorithm": algorithm})()


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One MLflow store for the module: creating one costs seconds."""
    from nestor.orchestrator.projections.tracking import Tracker

    tracker = Tracker(tmp_path_factory.mktemp("store"), "artifacts-test")
    yield tracker
    if hasattr(tracker, "close"):
        tracker.close()


@pytest.fixture
def tracked(store: Any, tmp_path: Path) -> tuple[Any, Path]:
    """The shared tracker and a fresh run directory, inside the tracker's: files from
    elsewhere are not logged (a journal's paths stay inside the run directory)."""
    run_dir = store.run_dir / "runs" / tmp_path.name
    run_dir.mkdir(parents=True)
    return store, run_dir


def write_journal(run_dir: Path, events: list[dict[str, Any]]) -> None:
    lines = [json.dumps({"seq": n, **e}) for n, e in enumerate(events)]
    (run_dir / "journal.jsonl").write_text("\n".join(lines) + "\n")


def listed(tracker: Any, run_id: str, folder: str | None = None) -> set[str]:
    return {a.path for a in tracker.list_artifacts(run_id, folder)}


def hpo_summary(values: list[Any], checkpoint: Path | None) -> dict[str, Any]:
    trials = [{"id": str(i), "status": "completed", "value": v, "config": {"lr": 0.1 * i},
               "generation": i // 2, "deme": 0, "parents": [], "attempts": 1,
               "slot_seconds": 2.0, "reason": None, "metrics": {}}
              for i, v in enumerate(values)]
    trials.append({"id": "9", "status": "failed", "value": None, "config": {"lr": 9},
                   "generation": 1, "deme": 0, "parents": [], "attempts": 2,
                   "slot_seconds": 1.0, "reason": "rank 1 died | twice", "metrics": {}})
    return {"name": "tune", "kind": "hpo", "n_trials": len(trials), "n_runs": len(trials) + 1,
            "n_failed": 1, "n_pruned": 0, "slot_seconds": 9.0, "wall_time_s": 5.0,
            "stop_reason": "budget", "trials": trials,
            "best": {"id": "0", "config": trials[0]["config"], "value": values[0],
                     "test_value": 0.5, "checkpoint": str(checkpoint) if checkpoint else None}}


def test_hpo_stage_publishes_plots_tables_checkpoint_and_metrics(tracked) -> None:
    tracker, run_dir = tracked
    checkpoint = run_dir / "checkpoints" / "tune" / "0" / "last.pt"
    checkpoint.parent.mkdir(parents=True)
    checkpoint.write_bytes(b"weights")
    write_journal(run_dir, [
        {"event": "workflow_started", "time": 0.0, "slots": 2},
        started(0, "0"), started(0, "1"), finished(2, "0", 0.1), finished(3, "1", 0.4),
    ])
    run_id = tracker.start_run("tune")
    summary = hpo_summary([0.1, 0.4], checkpoint)
    written = publish_stage(tracker, run_id, summary, Stage("tune", [Objective("loss", "min")],
                                                            "random"), run_dir)
    names = {p.name for p in written}
    assert names == {"tune.png", "tune-generations.png", "tune-slots.png", "tune-parallel.png",
                     "tune-slices.png", "summary.md", "summary.html"}
    assert all(p.is_file() and p.stat().st_size > 0 for p in written)
    assert listed(tracker, run_id) >= {"plots", "summary.md", "summary.html", "best_checkpoint"}
    assert listed(tracker, run_id, "plots") == {
        "plots/tune.png", "plots/tune-generations.png", "plots/tune-slots.png",
        "plots/tune-parallel.png", "plots/tune-slices.png"}
    assert listed(tracker, run_id, "best_checkpoint") == {"best_checkpoint/last.pt"}
    metrics = tracker.client.get_run(run_id).data.metrics
    assert metrics == {"best_value": 0.1, "best_test_value": 0.5}


def test_multi_objective_hpo_adds_the_pareto_front(tracked) -> None:
    tracker, run_dir = tracked
    run_id = tracker.start_run("tune")
    summary = hpo_summary([[0.1, 5.0], [0.4, 1.0], [0.5, 6.0]], None)
    objectives = [Objective("loss", "min"), Objective("params", "min")]
    written = publish_stage(tracker, run_id, summary, Stage("tune", objectives), run_dir)
    assert "tune-pareto.png" in {p.name for p in written}
    assert "plots/tune-pareto.png" in listed(tracker, run_id, "plots")
    # No journal here: the best-so-far curve came from the summary, slot use is skipped.
    assert "tune-slots.png" not in {p.name for p in written}


def test_ensemble_and_transfer_stages_publish_their_own_plots(tracked) -> None:
    tracker, run_dir = tracked
    for kind, section in (("ensemble", ENSEMBLE), ("transfer", TRANSFER)):
        run_id = tracker.start_run(kind)
        summary = {"name": kind, "kind": kind, kind: section, "trials": [], "best": None,
                   "objective": {"metric": "val_accuracy", "mode": "max"}}
        written = publish_stage(tracker, run_id, summary, Stage(kind, []), run_dir)
        assert {p.name for p in written} == {f"{kind}.png", "summary.md", "summary.html"}
        assert listed(tracker, run_id, "plots") == {f"plots/{kind}.png"}
    ensemble_md = (run_dir / "reports" / "ensemble" / "summary.md").read_text()
    assert "| member-2 | 1002 | 0.2 | 0.95 | 0.951 |" in ensemble_md
    assert "| product | ensemble of 3 |" in ensemble_md
    assert "| its test accuracy | 0.962 |" in ensemble_md
    transfer_md = (run_dir / "reports" / "transfer" / "summary.md").read_text()
    assert "| product | fine-tuned model |" in transfer_md
    assert "| from scratch, same budget: test accuracy | 0.91 |" in transfer_md
    assert transfer_md.count("| finetune |") == 3


def test_a_plot_that_fails_does_not_lose_the_stage(tracked, caplog) -> None:
    tracker, run_dir = tracked
    run_id = tracker.start_run("tl")
    summary = {"name": "tl", "kind": "transfer", "transfer": {"curves": "not a mapping"}}
    written = publish_stage(tracker, run_id, summary, Stage("tl", []), run_dir)
    assert written == []
    assert "could not draw its transfer plot" in caplog.text
    assert "could not write its summary table" in caplog.text
    # What could be published still was: the run is there and took the headline, which
    # is the fine-tuned model's, not the best (pretraining) trial's.
    summary["best"] = {"id": "pretrain", "value": 0.97, "test_value": 0.96}
    summary["transfer"].update(test_value=0.7, scratch_test_value=0.6)
    publish_stage(tracker, run_id, summary, Stage("tl", []), run_dir)
    assert tracker.client.get_run(run_id).data.metrics == {"product_test_value": 0.7,
                                                           "baseline_test_value": 0.6}


def test_tables_rank_trials_and_escape_text() -> None:
    summary = hpo_summary([0.3, 0.1, 0.2], None)
    report = stage_report(summary, [Objective("loss", "min")])
    assert [row[0] for row in report.rows] == ["1", "2", "0", "9"]  # best first, failed last
    markdown = to_markdown(report)
    assert "rank 1 died \\| twice" in markdown  # a pipe in a cell does not break the table
    assert markdown.count("\n| ") >= len(report.rows) + len(report.facts)
    page = to_html(stage_report({**summary, "name": "<b>x</b>"}, []))
    assert "&lt;b&gt;x&lt;/b&gt;" in page and "<b>x</b>" not in page
    assert page.count("<tr>") == len(report.rows) + 1 + len(report.facts)
