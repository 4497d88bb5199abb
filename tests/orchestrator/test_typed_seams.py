"""The typed seams between the engine and what reads its journal: a trial's status is
a :class:`TrialStatus` member wherever the engine decides one (and reads back as the
same plain string), and each kind's part of a stage summary is a dataclass that
round-trips through the journal unchanged."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from nestor.orchestrator.backends import SimulatedBackend, fixed_trials
from nestor.orchestrator.engine.workflow import run_workflow
from nestor.orchestrator.journal.events import Event, TrialFinished
from nestor.orchestrator.journal.journal import Journal, read_events
from nestor.orchestrator.journal.status import ENDED, SCORED, StageStatus, TrialStatus
from nestor.orchestrator.spec import load_spec_text

SWEEP = """
name: seams
stages:
  - name: tune
    kind: hpo
    trainer: {function: "nestor.orchestrator.simulate:simulated_trial", checkpoints: true}
    parallel: {data: 1, model: 1}
    search: {algorithm: genetic, population: 4, generations: 2, schedule: generational, seed: 1}
    space:
      x: {type: float, low: 0, high: 1}
    objective: {metric: val_accuracy, mode: max}
    trial: {retries: 0}
  - name: final
    kind: train
    from: [tune]
"""


@pytest.fixture
def recorded(monkeypatch: pytest.MonkeyPatch) -> list[Event]:
    """Every event the engine hands the journal, as it handed it (before JSON)."""
    seen: list[Event] = []
    record = Journal.record

    def spy(self: Journal, event: Event, *args: Any, **kwargs: Any) -> Any:
        seen.append(event)
        return record(self, event, *args, **kwargs)

    monkeypatch.setattr(Journal, "record", spy)
    return seen


def test_every_status_the_engine_journals_is_a_trial_status_member(
        tmp_path: Path, recorded: list[Event]) -> None:
    """A sweep with a trial that fails for good (no retries) and the others completed:
    each TrialFinished the engine writes carries a TrialStatus member (not a bare
    string) of those a trial may end with, and the journal line holds the plain word."""
    backend = SimulatedBackend(nodes=1, slots_per_node=2, seed=1,
                               trial_model=fixed_trials(60.0, lambda c: c["x"]),
                               fail_keys={"tune/2#1": 0.5})
    run_workflow(load_spec_text(SWEEP), backend, tmp_path / "run")
    finished = [e for e in recorded if isinstance(e, TrialFinished)]
    assert {e.status for e in finished} == {"completed", "failed"}
    for event in finished:
        assert type(event.status) is TrialStatus, (event.trial["id"], event.status)
        assert event.status in ENDED
    lines = [e for e in read_events(tmp_path / "run" / "journal.jsonl")
             if e["event"] == "trial_finished"]
    assert [line["status"] for line in lines] == [str(e.status) for e in finished]
    assert all(type(line["status"]) is str for line in lines)
    raw = (tmp_path / "run" / "journal.jsonl").read_text()
    assert '"status": "failed"' in raw or '"status":"failed"' in raw


def test_the_status_sets_are_what_the_readers_compare_with() -> None:
    """The members are the strings journals always held: an old journal's plain
    strings compare equal, hash alike (dict keys) and serialise as before."""
    words = {"running", "completed", "pruned", "failed", "stopped", "interrupted"}
    assert {str(s) for s in TrialStatus} == words
    assert {s.value for s in ENDED} == {"completed", "pruned", "failed", "stopped"}
    assert SCORED < ENDED and {"completed", "pruned"} == set(SCORED)
    assert {"completed": 1}[TrialStatus.COMPLETED] == 1
    assert json.dumps({"status": TrialStatus.PRUNED}) == '{"status": "pruned"}'
    assert {str(s) for s in StageStatus} == {"running", "finished", "interrupted", "failed"}


def test_a_trainer_result_status_is_a_member_and_reads_back_as_one() -> None:
    """A trainer's result says ok or failed as ResultStatus members; its file reads
    back as members, and a status it never writes is refused (a damaged file)."""
    from nestor.trainers import ResultStatus, TrialResult

    result = TrialResult(trial_id="t", status=ResultStatus.FAILED, reason="boom")
    text = json.dumps(result.to_dict())
    assert '"status": "failed"' in text
    back = TrialResult.from_dict(json.loads(text))
    assert type(back.status) is ResultStatus and not back.ok
    with pytest.raises(ValueError, match="'completed' is not a valid ResultStatus"):
        TrialResult.from_dict({"trial_id": "t", "status": "completed"})
