"""The results of an unfinished run, read through the run's fold (``RunState``).

``data/unfinished/`` holds two real journals of the simulated backend (the real
scheduler and searcher on a virtual clock; the specs beside them): ``two``, a
genetic search of 4 x 2 trials with one injected rank failure (trial 3's first
attempt, retried) then a train stage on its best; ``cut``, a search stopped by the
allocation's time limit (trials interrupted, the workflow interrupted). Their
``expected.json`` is what ``unfinished_results`` returned, with the journal cut
after each of its lines, when it still folded the journal itself (commit 9e1d258):
reading it through RunState must give the same results, but for the wall times,
which now run to the journal's last event whatever its kind (the old fold stopped
at the last kind it read: a run killed after a search's log line lost that time).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from nestor.orchestrator.journal.state import RunState
from nestor.orchestrator.projections.results import load_results
from nestor.orchestrator.projections.unfinished import unfinished_results

DATA = Path(__file__).parent / "data" / "unfinished"
# The kinds the old fold read, and so took its last time from.
OLD_KINDS = {"workflow_started", "workflow_interrupted", "stage_started", "stage_finished",
             "stage_reopened", "trial_started", "trial_attempt_failed", "trial_finished"}


def cut_run(name: str, n: int, where: Path) -> tuple[Path, list[dict[str, Any]]]:
    """A run directory holding the first ``n`` lines of journal ``name``, and them."""
    lines = (DATA / name / "journal.jsonl").read_bytes().splitlines(keepends=True)[:n]
    run = where / f"{name}-{n}"
    run.mkdir()
    (run / "journal.jsonl").write_bytes(b"".join(lines))
    shutil.copy(DATA / name / "spec.yaml", run / "spec.yaml")
    return run, [json.loads(line) for line in lines]


@pytest.mark.parametrize("name, through", [
    ("two", {"trial_attempt_failed", "stage_finished", "workflow_finished"}),
    ("cut", {"trial_interrupted", "workflow_interrupted"}),
])
def test_every_cut_of_a_real_journal_reads_as_the_old_fold_read_it(
        name: str, through: set[str], tmp_path: Path) -> None:
    expected = json.loads((DATA / name / "expected.json").read_text())
    kinds = set()
    for n, old in enumerate(expected, 1):
        run, records = cut_run(name, n, tmp_path)
        new = unfinished_results(run)
        assert new is not None and new["run_dir"] == str(run)
        assert load_results(run) == new  # what `nestor results`/`best` and the API show
        stamps = [r["time"] for r in records]
        assert new["wall_time_s"] == round(max(stamps) - stamps[0], 3), n
        starts = {r["stage"]: r["time"] for r in records if r["event"] == "stage_started"}
        for stage in new["stages"]:
            if stage.get("unfinished"):
                assert stage["wall_time_s"] == round(max(stamps) - starts[stage["name"]], 3)
        if records[-1]["event"] in OLD_KINDS:  # the old fold's last time was the same
            assert new["wall_time_s"] == old["wall_time_s"], n
        for results in (new, old):
            results["run_dir"] = results["wall_time_s"] = None
            for stage in results["stages"]:
                if stage.get("unfinished"):
                    stage["wall_time_s"] = None
        assert json.dumps(new) == json.dumps(old), n  # the same values, keys in the same order
        kinds.add(records[-1]["event"])
        assert not list(run.glob("journal.fold*.json"))  # the detailed fold is never saved
    # The cuts went through what the results show: a retried attempt, a finished stage,
    # interrupted trials and driver.
    assert through <= kinds, kinds


def test_the_details_are_kept_only_when_asked_and_never_in_a_snapshot(tmp_path: Path) -> None:
    run, _ = cut_run("two", 30, tmp_path)
    plain = RunState.of(run)
    assert all(t.detail is None for s in plain.stages.values() for t in s.trials.values())
    detailed = RunState.of(run, details=True)
    trial = detailed.stages["tune"].trials["3"]
    assert trial.attempts == 2 and trial.detail is not None
    assert set(trial.detail.config) == {"x", "y"} and "val_accuracy" in trial.detail.metrics
    with pytest.raises(ValueError, match="not snapshotted"):
        detailed.save(tmp_path / "fold.json", run / "journal.jsonl")
    assert RunState.load(run / "journal.fold.json", run / "journal.jsonl") is not None
