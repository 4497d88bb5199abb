"""Searches whose trials carry on from earlier trials' checkpoints, for real:
population-based training and asynchronous successive halving on warm gangs
of the built-in trainer. Checked from the journal and from the trials' own
per-epoch history: a continued trial's first epochs are the ones its source
trained (their measured times included, which a re-run could not reproduce),
not a fresh start."""

from __future__ import annotations

import itertools
import json
import os
import textwrap
from pathlib import Path
from typing import Any

import pytest

from tests.orchestrator.workflow_helpers import events, nestor

pytestmark = pytest.mark.slow


def run(tmp_path: Path, search: str, more: str = "", keep: int | None = None) -> Path:
    spec = tmp_path / "spec.yaml"
    spec.write_text(textwrap.dedent(f"""
        name: continuing
        resources: {{slots: 2}}
        stages:
          - name: tune
            kind: hpo
            trainer: {{name: mlp, settings: {{dataset: digits, max_train_samples: 400}}}}
            search: {search}
            space:
              lr: {{type: float, low: 0.005, high: 0.2, log: true}}
              momentum: {{type: float, low: 0.5, high: 0.95}}
        """) + (f"    keep_checkpoints: {keep}\n" if keep else "")
        + textwrap.indent(textwrap.dedent(more), "  "))
    run_dir = tmp_path / "run"
    result = nestor("run", str(spec), "--run-dir", str(run_dir), env=dict(os.environ),
                    timeout=900)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    return run_dir


def finished(run_dir: Path) -> dict[str, dict[str, Any]]:
    return {e["trial"]["id"]: e for e in events(run_dir) if e["event"] == "trial_finished"}


def assert_carried_on(child: dict[str, Any], parent: dict[str, Any]) -> None:
    """The child's history begins with the parent's epochs, as measured then."""
    before = parent["history"]
    assert child["history"][: len(before)] == before, "it trained again from scratch"
    assert len(child["history"]) == child["trial"]["budget"] > len(before)


def test_asha_promotes_the_best_trials_and_they_carry_on_from_their_checkpoints(
        tmp_path: Path) -> None:
    run_dir = run(tmp_path, "{algorithm: asha, min_budget: 1, max_budget: 3,"
                            " reduction_factor: 3, budget: 8, seed: 2}")
    done = finished(run_dir)
    assert len(done) == 8 and all(e["status"] == "completed" for e in done.values())
    promoted = [e for e in done.values() if e["trial"].get("continue_from")]
    assert promoted, "no trial was promoted"
    for child in promoted:
        parent = done[child["trial"]["continue_from"]]
        assert child["trial"]["config"] == parent["trial"]["config"]
        assert_carried_on(child, parent)
        # the parent was in the top third of its rung when promoted
        rung = [e for e in done.values() if e["trial"].get("budget") == parent["trial"]["budget"]
                and e["seq"] < child["seq"]]
        better = [e for e in rung if e["value"] > parent["value"]]
        assert len(better) < max(1, len(rung) // 3) + 1
    results = json.loads((run_dir / "results.json").read_text())
    best = results["stages"][0]["best"]
    assert done[best["id"]]["trial"]["budget"] == 3, "the best must be trained the longest"


def test_pbt_members_exploit_the_best_and_explore_around_them(tmp_path: Path) -> None:
    run_dir = run(tmp_path, "{algorithm: pbt, population: 4, interval: 1, intervals: 3,"
                            " quantile: 0.5, seed: 1}", """
        - name: final
          kind: train
          from: [tune]
        """, keep=1)
    done = {k: e for k, e in finished(run_dir).items() if e["stage"] == "tune"}
    assert len(done) == 12 and all(e["status"] == "completed" for e in done.values())
    continued = [e for e in done.values() if e["trial"].get("continue_from")]
    assert len(continued) == 8  # every member after its first interval
    exploits = [e for e in continued if e["trial"]["origin"] == "exploit"]
    assert exploits, "no member ever copied a better one"
    for child in continued:
        assert_carried_on(child, done[child["trial"]["continue_from"]])
    for child in exploits:
        donor = done[child["trial"]["continue_from"]]
        assert donor["trial"]["member"] != child["trial"]["member"]
        assert child["trial"]["config"] != donor["trial"]["config"]  # explored
        assert 0.005 <= child["trial"]["config"]["lr"] <= 0.2
    stage = json.loads((run_dir / "results.json").read_text())["stages"][0]
    schedule = stage["pbt"]["schedule"]
    assert schedule and schedule[-1]["trial_id"] == stage["best"]["id"]
    assert [s["until"] for s in schedule] == [1, 2, 3]
    assert (run_dir / "plots" / "tune-population.png").is_file()
    # The train stage replays the winner's schedule: one trial per step, each carrying
    # on from the last with that step's hyperparameters.
    replay = [e for e in events(run_dir) if e["event"] == "trial_finished"
              and e["stage"] == "final"]
    assert [e["trial"]["id"] for e in replay] == ["step-0", "step-1", "final"]
    assert [e["trial"]["config"] for e in replay] == [s["config"] for s in schedule]
    for before, after in itertools.pairwise(replay):
        assert after["history"][: len(before["history"])] == before["history"]
    assert len(replay[-1]["history"]) == 3 and replay[-1]["status"] == "completed"
    assert_only_needed_checkpoints_kept(run_dir, done, stage["best"]["id"])


def assert_only_needed_checkpoints_kept(run_dir: Path, done: dict[str, dict[str, Any]],
                                        best: str) -> None:
    """Under keep_checkpoints: 1, the folders of the checkpoints the driver let go are
    gone from disk, none before a trial continued from it, and what is left once the
    search is done is the best model."""
    removed = {e["trial"]: e for e in events(run_dir) if e["event"] == "checkpoint_removed"}
    assert removed, "keep_checkpoints removed nothing"
    folder = run_dir / "checkpoints" / "tune"
    for trial_id, event in removed.items():
        assert not (folder / trial_id).exists(), f"{trial_id}'s checkpoint is still on disk"
        later = [e for e in done.values() if e["trial"].get("continue_from") == trial_id]
        assert all(e["seq"] < event["seq"] for e in later), "removed before it was continued"
    kept = set(done) - set(removed)
    assert kept == {best}
    assert all(any((folder / t).rglob("*.pt")) for t in kept), "a kept checkpoint is gone"
