"""The driver keeps the stages' fold snapshot current (orchestrator.journal.kept).

So that ``nestor status``'s first look at a run, while its driver runs, after it
finished or after it was killed, folds only the last seconds of the journal, not
all of it: the snapshot the driver wrote must say what folding the whole journal
up to its offset says, and a resumed driver's snapshot must cover the journal its
predecessor wrote too.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from nestor.orchestrator.backends import SimulatedBackend, lognormal_trials
from nestor.orchestrator.backends.stopping import Interrupted
from nestor.orchestrator.engine.workflow import run_workflow
from nestor.orchestrator.journal import kept
from nestor.orchestrator.journal.state import STAGES_SNAPSHOT, RunState
from nestor.orchestrator.projections.status import workflow_status
from tests.orchestrator.journal.test_run_state import two_stages


def heads(state: RunState) -> Any:
    return ([(s.name, s.state, s.finished, sorted(s.running)) for s in state.stages.values()],
            state.workflow, state.events, state.last_time)


def folded_afresh(run: Path, until: int | None = None) -> RunState:
    state = RunState(trials=False)
    state.fold(run / "journal.jsonl", until)
    return state


def counting_applies(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    applied: list[Any] = []
    original = RunState.apply
    monkeypatch.setattr(RunState, "apply", lambda self, e: (applied.append(e),
                                                           original(self, e))[1])
    return applied


def test_a_finished_runs_first_status_folds_nothing(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    backend = SimulatedBackend(4, 4, lognormal_trials(600.0, 0.8), seed=3, rank_failure_p=0.2)
    run_workflow(two_stages(retries=1), backend, tmp_path / "run")
    run = tmp_path / "run"
    snapshot = json.loads((run / STAGES_SNAPSHOT).read_text())  # the driver's: no look yet
    assert snapshot["offset"] == (run / "journal.jsonl").stat().st_size
    applied = counting_applies(monkeypatch)
    status = workflow_status(run)
    assert applied == []  # the first look read the snapshot and nothing of the journal
    assert status["state"] == "finished"
    assert heads(RunState.of(run, trials=False)) == heads(folded_afresh(run))


def test_the_snapshot_the_driver_keeps_is_the_fold_up_to_its_offset(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every snapshot written while the run went on (a driver killed then leaves the
    last) says what folding the journal from its start to the snapshot's offset says."""
    monkeypatch.setattr(kept, "EVERY_S", 0.0)  # a snapshot after every event
    seen: list[tuple[int, Any]] = []
    original = RunState.save

    def save(self: RunState, snapshot: Path, journal: Path) -> None:
        original(self, snapshot, journal)
        loaded = RunState.load(snapshot, journal, trials=False)
        assert loaded is not None  # the journal holds what it says it folded
        seen.append((loaded.offset, heads(loaded)))

    monkeypatch.setattr(RunState, "save", save)
    backend = SimulatedBackend(4, 4, lognormal_trials(600.0, 0.8), seed=5, rank_failure_p=0.2)
    run_workflow(two_stages(retries=1), backend, tmp_path / "run")
    assert len(seen) > 50
    for offset, said in seen[:: max(1, len(seen) // 40)] + seen[-1:]:
        assert said == heads(folded_afresh(tmp_path / "run", until=offset))


@pytest.mark.parametrize("snapshot_left", [True, False])
def test_a_resumed_driver_keeps_the_fold_of_the_whole_journal(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, snapshot_left: bool) -> None:
    run = tmp_path / "run"
    limited = SimulatedBackend(4, 4, lognormal_trials(600.0, 0.8), seed=4,
                               rank_failure_p=0.1, time_limit_s=2500.0)
    with pytest.raises(Interrupted):
        run_workflow(two_stages(), limited, run)
    before = (run / "journal.jsonl").stat().st_size
    if not snapshot_left:  # an older driver's run: no snapshot to start from
        (run / STAGES_SNAPSHOT).unlink()
    backend = SimulatedBackend(4, 4, lognormal_trials(600.0, 0.8), seed=4, rank_failure_p=0.1)
    run_workflow(two_stages(), backend, run, resume=True)
    assert (run / "journal.jsonl").stat().st_size > before
    applied = counting_applies(monkeypatch)
    state = RunState.of(run, trials=False)
    assert applied == []
    assert heads(state) == heads(folded_afresh(run))
    assert state.workflow.resumes and state.workflow.finished
