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


# -- each kind's part of the summary ------------------------------------------------------

PBT = """
name: seams
stages:
  - name: tune
    kind: hpo
    trainer: {function: "nestor.orchestrator.simulate:simulated_trial", checkpoints: true}
    search: {algorithm: pbt, population: 4, interval: 1, intervals: 3, quantile: 0.5, seed: 3}
    space:
      x: {type: float, low: 0, high: 1}
  - name: final
    kind: train
    from: [tune]
    replay: true
"""


def finished_summaries(run_dir: Path) -> dict[str, dict[str, Any]]:
    return {e["stage"]: e["summary"] for e in read_events(run_dir / "journal.jsonl")
            if e["event"] == "stage_finished"}


def test_a_pbt_and_a_train_summary_round_trip_through_the_journal(tmp_path: Path) -> None:
    """A population-based search and the train stage that replays its winner, on the
    simulated cluster: each kind's entry in the journalled summary reads back as its
    dataclass and writes out again to the same JSON (keys, order, values), the train
    stage replayed the schedule the dataclass reads, and the entries' keys are the ones
    every earlier journal has (the journalled form did not change)."""
    from nestor.orchestrator.engine.kinds.summaries import PbtSummary, TrainSummary
    from nestor.search import ScheduleStep

    backend = SimulatedBackend(nodes=1, slots_per_node=4, seed=0,
                               trial_model=fixed_trials(60.0, lambda c: c["x"]))
    run_workflow(load_spec_text(PBT), backend, tmp_path / "run")
    summaries = finished_summaries(tmp_path / "run")
    pbt = PbtSummary.from_json(summaries["tune"]["pbt"])
    assert pbt.schedule and all(isinstance(s, ScheduleStep) for s in pbt.schedule)
    assert sorted(pbt.members) == ["0", "1", "2", "3"]
    assert json.dumps(pbt.to_json()) == json.dumps(summaries["tune"]["pbt"])
    assert list(summaries["tune"]["pbt"]) == ["schedule", "members"]
    assert list(summaries["tune"]["pbt"]["schedule"][0]) == [
        "trial_id", "member", "interval", "start", "until", "config", "continue_from",
        "copied_from", "value"]
    train = TrainSummary.from_json(summaries["final"]["train"])
    assert json.dumps(train.to_json()) == json.dumps(summaries["final"]["train"])
    assert list(summaries["final"]["train"]) == ["data", "config", "test_value", "val_value",
                                                 "checkpoint"]
    # The train stage replayed the winner's schedule as the dataclass reads it: one
    # trial per step, the last one its config.
    replayed = [e for e in read_events(tmp_path / "run" / "journal.jsonl")
                if e["event"] == "trial_finished" and e["stage"] == "final"]
    assert len(replayed) == len(pbt.schedule)
    assert train.config == pbt.schedule[-1].config


def test_every_kind_summary_round_trips_through_a_journal_line(tmp_path: Path) -> None:
    """Each kind's dataclass written into a StageFinished, journalled, and read back
    (the journal's own reader and parser) is the dataclass it was; an entry from an
    older journal that lacks a field reads as None there, not as an error."""
    from nestor.orchestrator.engine.kinds.summaries import (
        AutoPick,
        EnsembleMember,
        EnsembleSummary,
        PbtSummary,
        TrainSummary,
        TransferSummary,
    )
    from nestor.orchestrator.journal.events import StageFinished, parse
    from nestor.search import ScheduleStep

    step = ScheduleStep("3", 1, 0, 0.0, 1.0, {"lr": 0.1}, None, None, 0.5)
    kept = {
        "auto": AutoPick("asha", "many at once", 16, "search.parallel"),
        "pbt": PbtSummary([step], {"1": [step]}),
        "train": TrainSummary("train+val", {"lr": 0.1}, 0.9, None, "checkpoints/a/final"),
        "transfer": TransferSummary("finetune", 0.8, 0.7, 0.6, 0.5, 12.5,
                                    {"pretrain": [{"epoch": 1, "val_accuracy": 0.4}],
                                     "finetune": [], "scratch": []}),
        "ensemble": EnsembleSummary("greedy", 0.9, 0.8, 0.85, 0.75, 0.7, [
            EnsembleMember("t1", {"seed": 1}, 1, 0.5, 0.85, 0.75, "checkpoints/e/t1")]),
    }
    with Journal(tmp_path / "journal.jsonl", fsync=False) as journal:
        journal.record(StageFinished(stage="s", summary={
            "name": "s", **{name: entry.to_json() for name, entry in kept.items()}}))
    line, = read_events(tmp_path / "journal.jsonl")
    event = parse(line)
    assert isinstance(event, StageFinished)
    for name, entry in kept.items():
        assert type(entry).from_json(event.summary[name]) == entry, name
    assert list(line["summary"]["ensemble"]["members"][0]) == [
        "id", "config", "seed", "weight", "val_value", "test_value", "checkpoint"]
    old = TransferSummary.from_json({"mode": "finetune", "test_value": 0.8})
    assert old.curves is None and old.scratch_test_value is None


# -- where a stage's trials come from ------------------------------------------------------


def _members(protocol: type) -> set[str]:
    return {name for klass in protocol.__mro__ if klass not in (object,)
            and klass.__name__ not in ("Protocol", "Generic")
            for name in vars(klass) if not name.startswith("_")}


def test_a_search_and_a_plan_both_offer_what_the_engine_asks_of_a_trial_source() -> None:
    """The runner asks its source through TrialSource: a search and a fixed plan both
    have every member of it; only the search is a LoggedSearch, which is how the search
    log tells them apart (a plan is journalled whole)."""
    from nestor.orchestrator.engine.plan import Plan, PlannedTrial
    from nestor.orchestrator.engine.source import LoggedSearch, TrialSource
    from nestor.search import Objective, make_searcher
    from nestor.search.space import FloatParam, SearchSpace

    objective = Objective("val_accuracy", "max")
    search = make_searcher("random", SearchSpace([FloatParam("x", 0.0, 1.0)]), [objective],
                           budget=2, seed=1)
    plan = Plan([[PlannedTrial("a", {"x": 1})]], objective)
    wanted = _members(TrialSource)
    assert {"ask", "tell", "done", "best", "pending", "planned", "n_asked", "stop_reason",
            "state", "restore"} <= wanted
    for source in (search, plan):
        assert not wanted - set(dir(source)), (type(source).__name__, wanted - set(dir(source)))
    assert isinstance(search, LoggedSearch) and not isinstance(plan, LoggedSearch)
    # Both take a cost (the runner passes one only under a cost budget, which a plan
    # never has) and count what they handed out.
    trial, = plan.ask(1)
    plan.tell(trial.id, 0.5, cost=3.0)
    assert plan.n_asked == 1 and plan.done() and plan.best() is not None


def test_telling_a_search_from_a_plan_evaluates_none_of_its_properties() -> None:
    """isinstance against a runtime Protocol reads every member with hasattr on Python
    3.11, which would run a property (a search's stop_reason runs its done()): the
    Protocol the search log checks has methods only."""
    from nestor.orchestrator.engine.source import LoggedSearch

    class Touchy:
        @property
        def stop_reason(self) -> str:
            raise AssertionError("a property was evaluated")

        def log_since(self, start: int) -> list[dict[str, Any]]:
            return []

        def snapshot(self) -> None:
            return None

        def state(self) -> dict[str, Any]:
            return {}

        def restore(self, state: Any, snapshot: Any = None) -> int:
            return 0

    assert isinstance(Touchy(), LoggedSearch)


def test_a_runner_whose_source_is_not_built_says_so(tmp_path: Path) -> None:
    """An hpo runner builds its search once its trials' shape is known; asking for the
    source before then is a clear error, not an AttributeError on None."""
    from nestor.orchestrator.engine.trials import TrialRunner

    workflow = load_spec_text(SWEEP)
    stage = workflow.stages[0]
    backend = SimulatedBackend(nodes=1, slots_per_node=2, seed=1,
                               trial_model=fixed_trials(60.0, 0.5))
    with Journal(tmp_path / "journal.jsonl", fsync=False) as journal:
        from nestor.search import Objective

        runner = TrialRunner(workflow, stage, run_dir=tmp_path, backend=backend,
                             journal=journal, searcher=None,
                             objectives=[Objective("val_accuracy", "max")],
                             trainer_spec=workflow.trainer_of(stage.name))
        assert not runner.has_searcher and runner.search_log.is_plan
        with pytest.raises(RuntimeError, match="'tune': its trials' source is not built"):
            runner.searcher  # noqa: B018
