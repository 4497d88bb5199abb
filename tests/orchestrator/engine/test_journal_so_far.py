"""What a resumed driver reads of the journal: typed, by stage, in one streamed pass."""

from __future__ import annotations

from pathlib import Path

from nestor.orchestrator.engine.history import JournalSoFar
from nestor.orchestrator.journal.events import (
    StageFinished,
    StageStarted,
    TrialFinished,
    TrialStarted,
    WorkflowResumed,
    WorkflowStarted,
)
from nestor.orchestrator.journal.journal import Journal

TRIAL = {"id": "0", "config": {"lr": 0.1}}


def write(path: Path) -> None:
    with Journal(path, fsync=False) as journal:
        journal.record(WorkflowStarted(workflow="w", slots=4, pid=1, run_key="k"))
        for stage in ("a", "b"):
            journal.record(StageStarted(stage=stage, stage_kind="hpo", sources=[]))
            journal.record(TrialStarted(stage=stage, trial=TRIAL, attempt=1, gang=None,
                                        shape="1x1"))
        journal.record(TrialFinished(stage="a", trial=TRIAL, status="completed",
                                     metrics={"acc": 1.0}, attempt=1, value=1.0, reason=None,
                                     slot_seconds=1.0))
        journal.record(StageFinished(stage="a", summary={"name": "a", "n_runs": 1}))
        journal.record(WorkflowResumed(slots=8, pid=2))
        journal.record(WorkflowStarted(workflow="w", slots=8, pid=2, run_key="later"))


def test_a_resumed_driver_reads_the_start_the_summaries_and_each_unfinished_stage(tmp_path):
    write(tmp_path / "journal.jsonl")
    so_far = JournalSoFar.read(tmp_path / "journal.jsonl")
    assert so_far.started is not None and so_far.started.run_key == "k"  # the first
    assert so_far.summaries == {"a": {"name": "a", "n_runs": 1}}
    assert so_far.stages_started == {"a", "b"}
    # the finished stage's runner is never built again: its events are let go
    assert so_far.of_stage("a") == []
    assert [type(e) for e in so_far.of_stage("b")] == [StageStarted, TrialStarted]
    assert [type(e) for e in so_far.of_stage("b", TrialStarted)] == [TrialStarted]


def test_records_handed_over_keep_the_finished_stages_events(tmp_path):
    from nestor.orchestrator.journal.journal import read_events

    write(tmp_path / "journal.jsonl")
    so_far = JournalSoFar.of(read_events(tmp_path / "journal.jsonl"))
    assert [type(e) for e in so_far.of_stage("a")] == [StageStarted, TrialStarted,
                                                      TrialFinished]
    assert JournalSoFar.of(so_far) is so_far
    assert JournalSoFar.of(None).started is None
    assert JournalSoFar.read(tmp_path / "none.jsonl").summaries == {}


def test_the_lines_of_a_finished_stage_are_not_even_parsed(tmp_path, monkeypatch):
    """Most of a long run's journal is its finished stages' trials: the pass that keeps
    each stage's events skips them unparsed, by the stage name at each line's start; a
    config key named "stage" further on in another stage's line does not fool it."""
    from nestor.orchestrator.engine import history

    write(tmp_path / "journal.jsonl")
    with Journal(tmp_path / "journal.jsonl", fsync=False) as journal:
        journal.record(TrialStarted(stage="b", trial={"id": "1", "config": {"stage": "a"}},
                                    attempt=1, gang=None, shape="1x1"))
    parsed, original = [], history.parse
    monkeypatch.setattr(history, "parse", lambda record: parsed.append(record) or
                        original(record))
    so_far = JournalSoFar.read(tmp_path / "journal.jsonl")
    assert not [r for r in parsed if r.get("stage") == "a" and r["event"] != "stage_finished"]
    assert [e.trial["id"] for e in so_far.of_stage("b", TrialStarted)] == ["0", "1"]


def test_the_stages_come_from_the_runs_fold_and_its_snapshot(tmp_path, monkeypatch):
    """Which stages started, finished (and where their summaries lie) and were reopened,
    resume reads from the journal's one fold (RunState, the stages' heads), the same
    that ``nestor status`` reads: from the snapshot the driver keeps, with nothing
    folded again when it covers the journal, so a finished stage's lines are parsed
    by neither pass. The driver's fold keeper then takes that fold as it is."""
    from nestor.orchestrator.journal.kept import FoldKeeper
    from nestor.orchestrator.journal.state import STAGES_SNAPSHOT, RunState

    path = tmp_path / "journal.jsonl"
    write(path)
    so_far = JournalSoFar.read(path)  # no snapshot yet: the journal folded, and saved
    assert (tmp_path / STAGES_SNAPSHOT).exists() and so_far.heads.offset == path.stat().st_size
    applied: list[object] = []
    original = RunState.apply
    monkeypatch.setattr(RunState, "apply", lambda self, e: (applied.append(e),
                                                           original(self, e))[1])
    again = JournalSoFar.read(path)
    assert applied == []  # the snapshot covered it all
    assert again.started is not None and again.started.run_key == "k"
    assert again.summaries == {"a": {"name": "a", "n_runs": 1}}
    assert again.stages_started == {"a", "b"} and again.reopened == set()
    assert [type(e) for e in again.of_stage("b")] == [StageStarted, TrialStarted]
    keeper = FoldKeeper(tmp_path)
    keeper.start(path.stat().st_size, again.heads)
    keeper.written({"seq": 9, "time": 2.0, "event": "workflow_finished"},
                   path.stat().st_size + 10)
    assert keeper.state is again.heads and keeper.state.workflow.finished


def test_resume_reads_and_restores_with_the_collector_paused(tmp_path, monkeypatch):
    """Resume's objects live on: the cyclic collector's passes over them are paused
    while the journal is read and each runner restored, and it runs again after."""
    import gc

    import pytest

    from nestor.orchestrator.backends import SimulatedBackend, lognormal_trials
    from nestor.orchestrator.backends.stopping import Interrupted
    from nestor.orchestrator.engine import history
    from nestor.orchestrator.engine.search_log import SearchLog
    from nestor.orchestrator.engine.workflow import run_workflow
    from tests.orchestrator.journal.test_run_state import two_stages

    run = tmp_path / "run"
    with pytest.raises(Interrupted):
        run_workflow(two_stages(), SimulatedBackend(4, 4, lognormal_trials(600.0, 0.8), seed=4,
                                                    time_limit_s=2500.0), run)
    seen: dict[str, list[bool]] = {"read": [], "restore": []}
    parse, restore = history.parse, SearchLog.restore
    monkeypatch.setattr(history, "parse", lambda record: seen["read"].append(gc.isenabled())
                        or parse(record))
    monkeypatch.setattr(SearchLog, "restore", lambda self, mine: seen["restore"].append(
        gc.isenabled()) or restore(self, mine))
    assert gc.isenabled()
    run_workflow(two_stages(), SimulatedBackend(4, 4, lognormal_trials(600.0, 0.8), seed=4),
                 run, resume=True)
    assert seen["read"] and seen["restore"] and not any(seen["read"] + seen["restore"])
    assert gc.isenabled()
    gc.disable()  # paused by someone else: left paused
    try:
        JournalSoFar.read(run / "journal.jsonl")
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_what_the_read_made_is_frozen_so_the_collectors_next_pass_skips_it(
        tmp_path: Path, monkeypatch) -> None:
    """Read with the collector paused, the events it made (millions in a long run) are
    frozen before it runs again: its first pass does not scan them. A short read
    (a fresh run's) freezes nothing."""
    import gc

    from nestor.orchestrator.engine import history

    gc.unfreeze()
    JournalSoFar.read(tmp_path / "none.jsonl")
    assert gc.get_freeze_count() == 0
    monkeypatch.setattr(history, "FREEZE_AFTER", 100)  # as millions would be

    run = tmp_path / "journal.jsonl"
    with Journal(run, fsync=False) as journal:
        journal.append("workflow_started", workflow="w", slots=1, pid=1, run_key="k")
        for number in range(300):
            journal.append("trial_started", stage="tune", trial={"id": str(number),
                                                                  "config": {"x": number}},
                           attempt=1, gang=None, shape="1x1")
    gc.unfreeze()
    assert gc.isenabled() and gc.get_freeze_count() == 0
    so_far = JournalSoFar.read(run)
    assert gc.isenabled()
    events = so_far.of_stage("tune")
    assert len(events) == 300
    assert gc.get_freeze_count() > 300  # the events and what they hold
    seen = {id(o) for o in gc.get_objects()}  # what the collector's passes scan
    assert not any(id(e) in seen or id(e.trial) in seen for e in events)


def test_a_finished_stages_summary_is_parsed_only_when_looked_up(tmp_path, monkeypatch):
    """A stage's summary lists every trial (tens of MiB at a million events): a resumed
    driver parses it from its line only when it needs it, and gets what a whole read
    of the journal gets, also after the journal has grown."""
    import json

    from nestor.orchestrator.engine import history
    from nestor.orchestrator.journal.journal import read_events

    path = tmp_path / "journal.jsonl"
    write(path)
    with path.open("a") as handle:  # a stage's end as an older writer spaced it
        handle.write(json.dumps({"seq": 9, "time": 1.0, "event": "stage_finished",
                                 "stage": "c", "summary": {"name": "c", "n_runs": 2}}) + "\n")
    parsed: list[tuple[str, str | None]] = []
    parse = history.parse
    monkeypatch.setattr(history, "parse", lambda record: parsed.append(
        (record["event"], record.get("stage"))) or parse(record))
    so_far = JournalSoFar.read(path)
    assert ("stage_finished", "c") in parsed  # spaced: parsed whole
    assert ("stage_finished", "a") not in parsed  # not yet
    assert list(so_far.summaries) == ["a", "c"] and "a" in so_far.summaries
    with Journal(path, fsync=False) as journal:  # the resumed driver goes on writing
        journal.record(StageFinished(stage="b", summary={"name": "b", "n_runs": 3}))
    copy = so_far.summaries.copy()
    whole = JournalSoFar.of(read_events(path))
    assert so_far.summaries == {"a": whole.summaries["a"], "c": whole.summaries["c"]}
    assert ("stage_finished", "a") in parsed  # once looked up
    copy["b"] = {"name": "b", "n_runs": 3}
    assert copy == whole.summaries and list(copy) == ["a", "c", "b"]
    assert len(so_far.summaries) == 2  # the copy's additions are its own


def test_the_scheduler_loop_runs_the_collector_sparsely(tmp_path):
    """The driver's loop makes almost no cycles: the collector's young generation is
    collected every SPARSE_GC_THRESHOLD allocations while it runs, not every 700, and
    the thresholds are as they were once the run is over."""
    import gc

    from nestor.orchestrator.backends import SimulatedBackend, lognormal_trials
    from nestor.orchestrator.engine.history import SPARSE_GC_THRESHOLD
    from nestor.orchestrator.engine.workflow import run_workflow
    from tests.orchestrator.journal.test_run_state import two_stages

    class Watched(SimulatedBackend):
        def wait(self, timeout):  # the loop's every turn blocks here
            thresholds.append(gc.get_threshold())
            return super().wait(timeout)

    thresholds: list[tuple[int, ...]] = []
    before = gc.get_threshold()
    run_workflow(two_stages(), Watched(4, 4, lognormal_trials(600.0, 0.8), seed=4),
                 tmp_path / "run")
    assert thresholds
    assert all(t == (SPARSE_GC_THRESHOLD, *before[1:]) for t in thresholds)
    assert gc.get_threshold() == before
