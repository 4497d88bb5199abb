"""The trial runner's parts, each alone (issue 27, item 3): the attempt policy, the
search log, the checkpoint keeper, result adoption and an attempt's outcome. Each
is driven here without a runner, a scheduler or a backend behind it."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from nestor.orchestrator.backends import Ended
from nestor.orchestrator.backends.shape import Shape
from nestor.orchestrator.engine import search_log as search_log_module
from nestor.orchestrator.engine.adoption import ResultFiles, attempts_heard
from nestor.orchestrator.engine.attempts import BACKOFF_MAX_S, Attempt, AttemptPolicy
from nestor.orchestrator.engine.checkpoints import CheckpointKeeper
from nestor.orchestrator.engine.outcome import outcome, slot_time
from nestor.orchestrator.engine.plan import Plan, PlannedTrial
from nestor.orchestrator.engine.search_log import SearchLog
from nestor.orchestrator.journal.events import (
    CheckpointRemoved,
    PlanState,
    SearchLogged,
    TrialAttemptFailed,
    TrialStarted,
    parse,
)
from nestor.orchestrator.journal.journal import Journal, read_events
from nestor.search import Objective, make_searcher
from nestor.search.space import FloatParam, SearchSpace
from nestor.trainers import TrialResult

# -- the attempt policy ---------------------------------------------------------------------


@dataclass
class TrialSpec:
    timeout: float | None = None
    progress_timeout: float | None = None
    retries: int = 1
    retry_on: str = "transient"


@dataclass
class Clock:
    """What the policy asks of a backend: its clock, kills, and progress ages."""

    at: float = 0.0
    ages: dict[str, float | None] = field(default_factory=dict)
    cancelled: list[str] = field(default_factory=list)

    def now(self) -> float:
        return self.at

    def cancel(self, key: str) -> None:
        self.cancelled.append(key)

    def progress_ages(self, keys: list[str]) -> dict[str, float | None]:
        return {key: self.ages.get(key) for key in keys}


def attempt(key: str = "tune/t1#1", number: int = 1) -> Attempt:
    trial = SimpleNamespace(id=key.split("/")[1].split("#")[0])
    return Attempt(trial=trial, number=number, key=key, launched=0.0, shape=Shape(2, 1))


def test_a_failed_trial_runs_again_only_while_retries_last() -> None:
    policy = AttemptPolicy("tune", TrialSpec(retries=2), Clock())
    failed = {"status": "failed", "reason": "rank 1 died"}
    assert policy.retries_after(failed, 1) and policy.retries_after(failed, 2)
    assert not policy.retries_after(failed, 3)
    assert not policy.retries_after({"status": "completed"}, 1)
    assert not policy.retries_after({"status": "pruned"}, 1)


def test_a_failure_that_would_repeat_runs_again_only_where_the_spec_asks() -> None:
    """An argparse error, a missing file, no metric: a rerun costs its slots again and
    fails the same way. `retry_on: any` retries it all the same."""
    repeats = {"status": "failed", "reason": "command exited with status 2", "repeats": True}
    assert not AttemptPolicy("tune", TrialSpec(retries=2), Clock()).retries_after(repeats, 1)
    asked = AttemptPolicy("tune", TrialSpec(retries=2, retry_on="any"), Clock())
    assert asked.retries_after(repeats, 1) and not asked.retries_after(repeats, 3)


def test_gangs_that_fail_to_start_back_the_stage_off_doubling_to_a_minute() -> None:
    clock = Clock()
    policy = AttemptPolicy("tune", TrialSpec(), clock)
    holds = []
    for n in range(9):
        clock.at = 1000.0 * n
        policy.ended(Ended("k", clock.at, failure="placement timed out", started=False),
                     attempt())
        holds.append(policy.next_deadline() - clock.at)
        assert policy.holding
    assert holds == [1, 2, 4, 8, 16, 32, BACKOFF_MAX_S, BACKOFF_MAX_S, BACKOFF_MAX_S]
    clock.at += BACKOFF_MAX_S
    assert not policy.holding
    policy.ended(Ended("k", clock.at, started=True), attempt())  # a gang that ran clears it
    clock.at += 0.5
    policy.ended(Ended("k", clock.at, failure="lost", started=False), attempt())
    assert policy.next_deadline() == clock.at + 1


def test_an_attempt_past_its_timeout_is_killed_saying_why() -> None:
    clock = Clock()
    policy = AttemptPolicy("tune", TrialSpec(timeout=5.0), clock)
    running = attempt()
    policy.started(running, at=10.0)
    assert policy.next_deadline() == 15.0
    clock.at = 14.9
    policy.check({"t1": running})
    assert clock.cancelled == [] and running.cancelled is None
    clock.at = 15.0
    policy.check({"t1": running})
    assert clock.cancelled == ["tune/t1#1"] and running.cancelled == "timeout after 5 s"
    assert policy.next_deadline() is None  # nothing else due


def test_an_attempt_is_killed_for_silence_only_past_its_progress_timeout() -> None:
    clock = Clock()
    policy = AttemptPolicy("tune", TrialSpec(progress_timeout=12.0), clock)
    running = attempt()
    running.started = 1.0  # as the runner sets it from the Started event
    policy.started(running, at=1.0)
    assert policy.beat_every_s == 3.0  # a quarter of the progress timeout
    assert policy.next_deadline() == 13.0
    clock.at, clock.ages = 13.0, {"tune/t1#1": 2.0}  # it beat 2 s ago: alive
    policy.check({"t1": running})
    assert running.cancelled is None and policy.next_deadline() == 23.0
    clock.at, clock.ages = 23.0, {"tune/t1#1": 12.5}  # silent since 10.5
    policy.check({"t1": running})
    assert clock.cancelled == ["tune/t1#1"]
    assert running.cancelled is not None and running.cancelled.startswith("no progress for 12 s")


def test_an_attempt_started_at_time_zero_is_killed_for_silence_too() -> None:
    """A virtual clock starts at 0.0: an attempt started then is not 'not yet started'."""
    clock = Clock()
    policy = AttemptPolicy("tune", TrialSpec(progress_timeout=12.0), clock)
    running = attempt()
    running.started = 0.0
    policy.started(running, at=0.0)
    clock.at, clock.ages = 12.0, {"tune/t1#1": 12.0}  # beat at 0.0, silent since
    policy.check({"t1": running})
    assert clock.cancelled == ["tune/t1#1"], "an attempt started at 0.0 was never judged hung"


class ScanningPolicy:
    """The deadline look as it was before the heap: every live attempt, every look."""

    def __init__(self, timeout: float, limit: float) -> None:
        self.timeout, self.limit = timeout, limit
        self.due: dict[str, list[float]] = {}  # key: [deadline, progress due]

    def started(self, key: str, at: float) -> None:
        self.due[key] = [at + self.timeout, at + self.limit]

    def check(self, now: float, ages: dict[str, float | None],
              started: dict[str, float]) -> list[tuple[str, str]]:
        killed = [(k, "timeout") for k, (deadline, _) in self.due.items() if now >= deadline]
        for key, _ in killed:
            del self.due[key]
        for key, due in list(self.due.items()):
            if now < due[1]:
                continue
            age = ages.get(key)
            last = started[key] if age is None else max(started[key], now - age)
            if now - last >= self.limit:
                killed.append((key, "hung"))
                del self.due[key]
            else:
                due[1] = last + self.limit
        return killed

    def next_deadline(self) -> float | None:
        return min((d for due in self.due.values() for d in due), default=None)


def test_heap_ordered_deadlines_fire_exactly_when_a_scan_of_every_attempt_would() -> None:
    """Deadlines kept in a heap (issue 28 item 2) kill the same attempts, in the same
    order, at the same clock times as the old scan of every running attempt, and the
    stage's next look is the same time; this includes an attempt whose progress
    deadline moves on each beat, attempts that end on their own, and one killed twice
    over (its timeout and its silence due together)."""
    clock = Clock()
    policy = AttemptPolicy("tune", TrialSpec(timeout=60.0, progress_timeout=10.0), clock)
    oracle = ScanningPolicy(60.0, 10.0)
    running: dict[str, Attempt] = {}
    started: dict[str, float] = {}
    # beat every b s from its start (None: never); it ends on its own at `ends`
    beats = {f"t{i}": (None if i % 5 == 0 else [2.0, 4.5, 9.5, 12.0][i % 4]) for i in range(24)}
    ends = {f"t{i}": 7.5 * i + 45.0 for i in range(0, 24, 3)}
    killed: list[tuple[float, str, str]] = []
    expected: list[tuple[float, str, str]] = []
    moved = []  # the progress deadlines of t1 (beats every 4.5 s) as the policy moves them
    for step in range(800):
        clock.at = now = step * 0.5
        for i, trial in enumerate(beats):
            if now == 1.0 + 2.5 * (i // 2):  # two at a time, in the order of `running`
                a = attempt(f"tune/{trial}#1")
                a.started = now
                running[trial], started[a.key] = a, now
                policy.started(a, at=now)
                oracle.started(a.key, now)
            if ends.get(trial) == now and trial in running and running[trial].cancelled is None:
                del running[trial]
                oracle.due.pop(f"tune/{trial}#1", None)
        clock.ages = {a.key: (None if beats[t] is None else (now - a.started) % beats[t])
                      for t, a in running.items() if a.started is not None}
        cancelled = len(clock.cancelled)
        policy.check(running)
        killed += [(now, key, running[key[5:-2]].cancelled.split()[0])
                   for key in clock.cancelled[cancelled:]]
        expected += [(now, key, {"timeout": "timeout", "hung": "no"}[why])
                     for key, why in oracle.check(now, clock.ages, started)]
        for key in clock.cancelled[cancelled:]:
            del running[key[5:-2]]  # its Ended event follows at once
        if "t1" in running and (not moved or moved[-1] != running["t1"].progress_due):
            moved.append(running["t1"].progress_due)
        assert policy.next_deadline() == oracle.next_deadline(), now
    assert killed == expected
    assert len({why for *_, why in killed}) == 2  # both timeouts and silences fired
    assert ("tune/t1#1" in {key for _, key, _ in killed}) and len(moved) > 3
    assert moved == sorted(moved)  # t1's progress deadline moved on with its beats


def test_the_deadline_heap_keeps_a_few_entries_per_running_attempt() -> None:
    """Attempts that end hours before their deadlines (a long trial.timeout) do not
    pile up in the heap, and dropping them does not move the stage's next look."""
    clock = Clock()
    policy = AttemptPolicy("tune", TrialSpec(timeout=86400.0, progress_timeout=3600.0), clock)
    running: dict[str, Attempt] = {}
    sizes = []
    for i in range(2000):
        clock.at = float(i)
        a = attempt(f"tune/t{i}#1")
        running[f"t{i}"] = a
        policy.started(a, at=clock.at)
        if i >= 10:
            del running[f"t{i - 10}"]  # ended on its own, long before its deadlines
        due = policy.next_deadline()
        policy.check(running)
        assert policy.next_deadline() == due
        sizes.append(len(policy._heap))
    assert max(sizes) <= 4 * len(running) + 66  # not the 4,000 entries of every attempt


# -- the search log -------------------------------------------------------------------------


def searcher(budget: int = 6) -> Any:
    space = SearchSpace([FloatParam("x", -1.0, 1.0)])
    return make_searcher("random", space, [Objective("loss", "min")], seed=3, budget=budget)


def test_a_searchers_asks_and_tells_are_journalled_and_rebuild_it(tmp_path: Path) -> None:
    first = searcher()
    with Journal(tmp_path / "journal.jsonl") as journal:
        log = SearchLog("tune", first, journal, tmp_path / "tune.json")
        for trial in first.ask(3):
            log.record()
            first.tell(trial.id, trial.config["x"] ** 2)
            log.record()
        log.record()  # nothing new: nothing journalled
    events = [parse(e) for e in read_events(tmp_path / "journal.jsonl")]
    assert events and all(isinstance(e, SearchLogged) for e in events)
    assert [e.start for e in events] == sorted({e.start for e in events})  # no repeats
    again = searcher()
    SearchLog("tune", again, journal, tmp_path / "tune.json").restore(events)
    assert again.state() == first.state()
    assert [t.id for t in again.ask(1)] == [t.id for t in first.ask(1)]


def test_a_snapshot_covers_the_log_and_resume_replays_only_the_tail(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(search_log_module, "SNAPSHOT_EVERY", 2)
    first = searcher()
    with Journal(tmp_path / "journal.jsonl") as journal:
        log = SearchLog("tune", first, journal, tmp_path / "tune.json")
        for trial in first.ask(4):
            first.tell(trial.id, trial.config["x"])
            log.record()
    saved = json.loads((tmp_path / "tune.json").read_text())
    assert saved["covers"] == log.snapshot_at and 0 < saved["covers"] <= log.logged
    events = [parse(e) for e in read_events(tmp_path / "journal.jsonl")]
    again = searcher()
    SearchLog("tune", again, journal, tmp_path / "tune.json").restore(events)
    assert again.state() == first.state()


def journalled_genetic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, Any]:
    """A genetic search run through its SearchLog, snapshots of its internals taken
    every few entries: it and the SearchLog."""
    monkeypatch.setattr(search_log_module, "SNAPSHOT_EVERY", 5)
    monkeypatch.setattr(search_log_module, "SNAPSHOT_BYTES_PER_ENTRY", 10**9)

    space = SearchSpace([FloatParam("x", -1.0, 1.0), FloatParam("y", -1.0, 1.0)])
    first = make_searcher("genetic", space, [Objective("loss", "min")], seed=3,
                          population=6, generations=6)
    with Journal(tmp_path / "journal.jsonl") as journal:
        log = SearchLog("tune", first, journal, tmp_path / "tune.json")
        running: list[Any] = []
        for step in range(20):
            running += first.ask(2 + step % 3)
            log.record()
            for trial in running[: 1 + step % 2]:
                first.tell(trial.id, trial.config["x"] ** 2 + trial.config["y"])
            del running[: 1 + step % 2]
            log.record()
    return first, log


def next_asks(searcher: Any) -> list[Any]:
    asked = []
    for _ in range(12):
        trials = searcher.ask(3)
        asked += trials
        for trial in trials[:2]:
            searcher.tell(trial.id, trial.config["x"])
    return [(t.id, t.config) for t in asked]


def test_a_genetic_search_resumes_from_its_internals_as_from_its_whole_log(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first, log = journalled_genetic(tmp_path, monkeypatch)
    saved = json.loads((tmp_path / "tune.json").read_text())
    assert "state" not in saved and saved["snapshot"]["covers"] == log.snapshot_at
    assert 0 < log.snapshot_at < log.logged  # the journal goes on after it
    events = [parse(e) for e in read_events(tmp_path / "journal.jsonl")]
    space = first.space
    resumed = make_searcher("genetic", space, [Objective("loss", "min")], seed=3,
                            population=6, generations=6)
    again = SearchLog("tune", resumed, None, tmp_path / "tune.json")  # type: ignore[arg-type]
    again.restore(events)
    assert again.snapshot_at == log.snapshot_at and again.logged == log.logged
    (tmp_path / "tune.json").unlink()  # no snapshot: the whole log replayed
    replayed = make_searcher("genetic", space, [Objective("loss", "min")], seed=3,
                             population=6, generations=6)
    whole = SearchLog("tune", replayed, None, tmp_path / "tune.json")  # type: ignore[arg-type]
    whole.restore(events)
    assert whole.snapshot_at == 0
    assert resumed.state() == replayed.state() == first.state()
    assert next_asks(resumed) == next_asks(replayed) == next_asks(first)


@pytest.mark.parametrize("garbage", [b"{\"covers\": 12, \"snap", b"\x00\xff", b"[1, 2]",
                                     b'{"snapshot": {"covers": 3}}'])
def test_an_unreadable_or_stale_searcher_snapshot_is_ignored_and_the_log_replayed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, garbage: bytes) -> None:
    first, _ = journalled_genetic(tmp_path, monkeypatch)
    (tmp_path / "tune.json").write_bytes(garbage)
    events = [parse(e) for e in read_events(tmp_path / "journal.jsonl")]
    resumed = make_searcher("genetic", first.space, [Objective("loss", "min")], seed=3,
                            population=6, generations=6)
    again = SearchLog("tune", resumed, None, tmp_path / "tune.json")  # type: ignore[arg-type]
    again.restore(events)
    assert again.snapshot_at == 0
    assert resumed.state() == first.state()
    assert next_asks(resumed) == next_asks(first)


def plan() -> Plan:
    return Plan([[PlannedTrial("a", {"x": 1}), PlannedTrial("b", {"x": 2})],
                 [PlannedTrial("c", {"x": 3})]], Objective("val_accuracy", "max"))


def test_a_fixed_plans_state_is_journalled_when_it_changes(tmp_path: Path) -> None:
    first = plan()
    with Journal(tmp_path / "journal.jsonl") as journal:
        log = SearchLog("members", first, journal, tmp_path / "members.json")
        first.ask(2)
        log.record()
        log.record()  # unchanged: not journalled again
        first.tell("a", 0.9)
        log.record()
    events = [parse(e) for e in read_events(tmp_path / "journal.jsonl")]
    assert [type(e) for e in events] == [PlanState, PlanState]
    assert events[-1].state == first.state() and events[-1].stage == "members"
    assert not (tmp_path / "members.json").exists()  # the journal holds it, not a file
    again = plan()
    SearchLog("members", again, journal, tmp_path / "members.json").restore(events)
    assert again.state() == first.state() and [t.id for t in again.pending] == ["b"]


def test_a_plan_from_before_plan_state_is_restored_from_its_file(tmp_path: Path) -> None:
    old = plan()
    old.ask(2)
    old.tell("b", 0.5)
    (tmp_path / "members.json").write_text(json.dumps(old.state()))
    again = plan()
    SearchLog("members", again, None, tmp_path / "members.json").restore([])  # type: ignore[arg-type]
    assert again.state() == old.state()


# -- the checkpoint keeper ------------------------------------------------------------------


@dataclass
class Record:
    id: str
    status: str
    checkpoint: str | None


def test_only_the_best_and_the_pending_trials_keep_their_checkpoints(tmp_path: Path) -> None:
    search = searcher(budget=5)
    trials = search.ask(5)
    values = {trials[0].id: 0.1, trials[1].id: 0.5, trials[2].id: 0.9, trials[3].id: 0.3}
    for trial_id, value in values.items():
        search.tell(trial_id, value)  # trials[4] is still running
    records = {}
    for trial in trials:
        folder = tmp_path / "checkpoints" / "tune" / trial.id
        folder.mkdir(parents=True)
        (folder / "model.pt").write_text("weights")
        records[trial.id] = Record(trial.id, "completed" if trial.id in values else "running",
                                   str(folder / "model.pt"))
    with Journal(tmp_path / "journal.jsonl") as journal:
        CheckpointKeeper("tune", 2, tmp_path, journal).prune(search, records)
    removed = [parse(e) for e in read_events(tmp_path / "journal.jsonl")]
    assert all(isinstance(e, CheckpointRemoved) for e in removed)
    assert sorted(e.trial for e in removed) == sorted([trials[1].id, trials[2].id])
    kept = {t.id for t in trials if (tmp_path / "checkpoints" / "tune" / t.id).exists()}
    assert kept == {trials[0].id, trials[3].id, trials[4].id}  # the best two, the pending
    assert records[trials[2].id].checkpoint is None and records[trials[0].id].checkpoint


@dataclass
class Continuing:
    """A trial that will continue from another's checkpoint (PBT's exploit)."""

    id: str
    continue_from: str | None


@dataclass
class Searching:
    """What the keeper asks of a searcher, with nothing ranked or continuable."""

    pending: list[Continuing]

    def continuable(self) -> set[str]:
        return set()

    def ranked(self) -> list[Any]:
        return []

    def best(self) -> None:
        return None


def test_a_pending_trials_source_keeps_its_checkpoint(tmp_path: Path) -> None:
    records = {name: Record(name, "completed", f"/ckpt/{name}") for name in ("donor", "other")}
    with Journal(tmp_path / "journal.jsonl") as journal:
        CheckpointKeeper("tune", 1, tmp_path, journal).prune(
            Searching([Continuing("child", "donor")]), records)
    removed = [parse(e).trial for e in read_events(tmp_path / "journal.jsonl")]
    assert removed == ["other"] and records["donor"].checkpoint == "/ckpt/donor"


def test_without_keep_checkpoints_nothing_is_removed(tmp_path: Path) -> None:
    search = searcher(budget=2)
    trial, other = search.ask(2)
    search.tell(trial.id, 1.0)
    search.tell(other.id, 0.0)
    records = {trial.id: Record(trial.id, "completed", "somewhere")}
    with Journal(tmp_path / "journal.jsonl") as journal:
        CheckpointKeeper("tune", None, tmp_path, journal).prune(search, records)
    assert read_events(tmp_path / "journal.jsonl") == []
    assert records[trial.id].checkpoint == "somewhere"


# -- result adoption ------------------------------------------------------------------------


def test_the_latest_result_the_journal_never_heard_of_is_adopted(tmp_path: Path) -> None:
    files = ResultFiles(tmp_path, "tune")
    for number, value in ((1, 0.4), (2, 0.7)):
        path = files.path("t1", number)
        path.parent.mkdir(parents=True, exist_ok=True)
        result = TrialResult("tune-t1", "ok", metrics={"val_accuracy": value})
        path.write_text(json.dumps(result.to_dict()))
    trial = {"id": "t1", "config": {}}
    heard = [parse({"event": "trial_started", "stage": "tune", "trial": trial, "attempt": 1,
                    "gang": 1, "shape": "1x1"}),
             parse({"event": "trial_attempt_failed", "stage": "tune", "trial": trial,
                    "attempt": 1, "reason": "x", "slot_seconds": 1.0}),
             parse({"event": "trial_started", "stage": "tune", "trial": trial, "attempt": 2,
                    "gang": 1, "shape": "1x1"})]
    ended, begun = attempts_heard(heard)
    assert ended == {("t1", 1)} and begun == {("t1", 1), ("t1", 2)}
    number, result = files.unheard("t1", ended)
    assert number == 2 and result.metrics["val_accuracy"] == 0.7
    assert files.unheard("t1", set())[0] == 2  # two unheard: the latest is adopted
    assert files.unheard("t1", {("t1", 1), ("t1", 2)}) is None  # every result heard of
    assert files.unheard("t9", set()) is None  # no folder at all
    assert isinstance(heard[1], TrialAttemptFailed) and isinstance(heard[0], TrialStarted)


# -- an attempt's outcome -------------------------------------------------------------------


def ended_with(**metrics: Any) -> Ended:
    return Ended("k", 30.0, TrialResult("tune-t1", "ok", metrics=metrics))


def test_an_objective_the_trainer_logged_but_did_not_report_is_its_last_logged_value(
        ) -> None:
    """A command reports one figure on its FoM line; a second objective it prints as
    ``nestor.metric latency=...`` lines (a function may log one it does not return)."""
    objectives = [Objective("fom", "max"), Objective("latency", "min")]
    logged = {"metrics": {"latency": [[0, 0.9, 1.0], [1, 0.4, 2.0]], "loss": [[0, 3.0, 1.0]]}}
    ended = Ended("k", 30.0, TrialResult("tune-t1", "ok", metrics={"fom": 0.8}, logged=logged))
    judged = outcome(attempt(), ended, objectives)
    assert judged["status"] == "completed" and judged["value"] == [0.8, 0.4]
    assert "latency" not in judged["metrics"]  # shown once in MLflow: as the series logged
    reported = Ended("k", 30.0, TrialResult("tune-t1", "ok", metrics={"fom": 0.8, "latency": 0.1},
                                            logged=logged))
    assert outcome(attempt(), reported, objectives)["value"] == [0.8, 0.1]  # reported wins


def test_an_attempts_end_is_judged_on_every_objective() -> None:
    objectives = [Objective("val_accuracy", "max")]
    done = attempt()
    assert outcome(done, ended_with(val_accuracy=0.8), objectives)["status"] == "completed"
    missing = outcome(done, ended_with(loss=0.1), objectives)
    assert missing["status"] == "failed" and missing["repeats"]  # no retry reports it
    assert missing["reason"] == "the trainer reported no 'val_accuracy' (it reported: loss)"
    nan = outcome(done, ended_with(val_accuracy=math.nan), objectives)
    assert nan["status"] == "failed" and "not a finite number" in nan["reason"]
    assert not nan.get("repeats")  # a diverging run may not diverge again
    judged = Ended("k", 30.0, TrialResult("tune-t1", "failed", reason="command not found",
                                          repeats=True))
    assert outcome(done, judged, objectives)["repeats"]  # as the trainer judged it
    stopped = Ended("k", 30.0, TrialResult("tune-t1", "ok", metrics={"val_accuracy": 0.2},
                                           stopped_early=True))
    assert outcome(done, stopped, objectives)["status"] == "pruned"
    assert outcome(done, Ended("k", 30.0, failure="rank 1 died"), objectives) == {
        "status": "failed", "reason": "rank 1 died"}
    killed = attempt()
    killed.cancelled = "timeout after 5 s"
    assert outcome(killed, ended_with(val_accuracy=0.8), objectives)["reason"] == \
        "timeout after 5 s"
    pair = outcome(done, ended_with(val_accuracy=0.8, loss=0.3),
                   [Objective("val_accuracy", "max"), Objective("loss", "min")])
    assert pair["value"] == [0.8, 0.3]


def test_slot_time_splits_a_trials_own_time_from_its_gangs_start() -> None:
    ran = attempt()  # 2 ranks
    ran.started, ran.startup_s = 10.0, 4.0
    assert slot_time(ran, Ended("k", 30.0)) == (40.0, 8.0)
    never = attempt()
    never.launched = 25.0
    assert slot_time(never, Ended("k", 30.0, started=False)) == (0.0, 10.0)


# -- the ledger of trials -------------------------------------------------------------------


def test_the_ledger_replays_a_trials_attempts_into_its_record_and_totals() -> None:
    from nestor.orchestrator.engine.records import TrialRecords

    trial = {"id": "t1", "config": {"x": 0.5}, "generation": 2}
    journal = [
        {"event": "trial_started", "stage": "tune", "trial": trial, "attempt": 1, "gang": 1,
         "shape": "2x1"},
        {"event": "trial_attempt_failed", "stage": "tune", "trial": trial, "attempt": 1,
         "reason": "rank 1 died", "slot_seconds": 10.0, "startup_slot_seconds": 2.0},
        {"event": "trial_started", "stage": "tune", "trial": trial, "attempt": 2, "gang": 2,
         "shape": "4x1"},
        {"event": "trial_finished", "stage": "tune", "trial": trial, "attempt": 2,
         "status": "completed", "value": 0.9, "metrics": {"val_accuracy": 0.9}, "reason": None,
         "slot_seconds": 30.0, "startup_slot_seconds": 4.0, "checkpoint": "/c/t1",
         "time": 123.0},
        {"event": "trial_started", "stage": "tune", "trial": {"id": "t2", "config": {}},
         "attempt": 1, "gang": 3, "shape": "2x1"},
    ]
    records = TrialRecords()
    for record in journal:
        records.apply(parse(record))
    done = records["t1"]
    assert (done.attempts, done.status, done.value, done.shape, done.generation) == (
        2, "completed", 0.9, "4x1", 2)
    assert (done.slot_seconds, done.startup_slot_seconds, done.finished_at) == (40.0, 6.0, 123.0)
    assert records["t2"].status == "running"
    assert records.totals() == {"n_trials": 2, "n_runs": 3, "n_failed": 0, "n_pruned": 0,
                                "slot_seconds": 40.0, "startup_slot_seconds": 6.0}
    rows = records.rows(lambda r: {"lr": 0.1} if r.id == "t1" else {})
    assert [row["id"] for row in rows] == ["t1", "t2"] and rows[0]["lr"] == 0.1
