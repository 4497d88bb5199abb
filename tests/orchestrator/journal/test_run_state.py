"""The journal's one fold (orchestrator.journal.state.RunState) on real journals.

The readers it replaced (status's, the plots' best-so-far and slot intervals)
are kept below as oracles, as they were written against raw records: on a
simulated sweep's journal, cut where a killed driver would have left it, the
fold must say what they said. Then the fold's own claims: folding from an
offset equals folding at once, and a snapshot is used only while the journal
still holds what it was folded from.
"""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from nestor.orchestrator.backends import SimulatedBackend, lognormal_trials
from nestor.orchestrator.backends.stopping import Interrupted
from nestor.orchestrator.engine.workflow import run_workflow
from nestor.orchestrator.journal import state as fold_module
from nestor.orchestrator.journal.journal import read_events
from nestor.orchestrator.journal.state import SNAPSHOT, STAGES_SNAPSHOT, RunState, fold
from nestor.orchestrator.projections import plots
from nestor.orchestrator.projections.status import workflow_status
from nestor.orchestrator.spec import load_spec_text

# -- the old readers, as they read raw records (the oracles) --------------------------------

ENDS = ("trial_finished", "trial_attempt_failed", "trial_interrupted")


def old_status(events: list[dict[str, Any]], alive: bool) -> dict[str, Any]:
    kinds = {"workflow_started", "workflow_resumed", "workflow_finished", "stage_started",
             "stage_finished", "trial_started", "trial_finished"}
    stages: dict[str, dict[str, Any]] = {}
    finished = False
    for event in (e for e in events if e["event"] in kinds):
        kind = event["event"]
        if kind == "workflow_finished":
            finished = True
        name = event.get("stage")
        if name is None:
            continue
        stage = stages.setdefault(name, {"name": name, "state": "running", "running": set(),
                                         "completed": 0, "failed": 0})
        if kind == "trial_started":
            stage["running"].add(event["trial"]["id"])
        elif kind == "trial_finished":
            stage["running"].discard(event["trial"]["id"])
            stage["completed" if event["status"] == "completed" else "failed"] += 1
        elif kind == "stage_finished":
            stage["state"] = "finished"
            stage["running"] = set()
    alive = alive and not finished
    for stage in stages.values():
        stage["running"] = len(stage["running"]) if alive or stage["state"] == "running" else 0
        if stage["state"] == "running" and not alive:
            stage["state"] = "interrupted"
    return {"state": "finished" if finished else ("running" if alive else "interrupted"),
            "stages": list(stages.values())}


def old_best_so_far(events: list[dict[str, Any]], stage: str, mode: str) -> list[Any]:
    runs, best, curve = 0, None, []
    for event in events:
        if event.get("stage") != stage or event["event"] not in ENDS[:2]:
            continue
        runs += 1
        if event["event"] != "trial_finished" or event.get("status") != "completed":
            continue
        value = event.get("value")
        value = value[0] if isinstance(value, list) else value
        if value is not None and (best is None or (value > best if mode == "max"
                                                   else value < best)):
            best = float(value)
            curve.append((runs, best))
    return curve


def old_slot_intervals(events: list[dict[str, Any]]) -> tuple[list[tuple[Any, ...]], int]:
    slots = max((int(e.get("slots") or 0) for e in events
                 if e["event"] in ("workflow_started", "workflow_resumed")), default=0)
    last = max(e["time"] for e in events)
    busy: dict[int, Any] = {}
    open_: dict[Any, Any] = {}
    done = []

    def close(key: Any, when: float, status: str) -> None:
        held, start = open_.pop(key)
        for slot in held:
            busy.pop(slot, None)
        done.append((held, start, when, key[1], key[2], status, key[0]))

    for event in events:
        kind = event["event"]
        if kind == "workflow_resumed":
            for key in list(open_):
                close(key, event["time"], "interrupted")
        elif kind == "trial_started":
            ranks = plots._ranks(event.get("shape"))
            free = [s for s in range(slots + len(busy) + ranks) if s not in busy][:ranks]
            key = (event["stage"], event["trial"]["id"], event["attempt"])
            for slot in free:
                busy[slot] = key
            open_[key] = (tuple(free), event["time"])
        elif kind in ENDS:
            key = (event["stage"], event["trial"]["id"], event["attempt"])
            if key in open_:
                status = {"trial_attempt_failed": "failed",
                          "trial_interrupted": "interrupted"}.get(kind, event.get("status"))
                close(key, event["time"], status or "completed")
    for key in list(open_):
        close(key, last, "running")
    return sorted(done, key=lambda i: (i[1], i[0])), slots


# -- real journals --------------------------------------------------------------------------


def two_stages(retries: int = 2) -> Any:
    stages = ""
    for name, data, population in (("wide", 4, 4), ("narrow", 2, 6)):
        stages += textwrap.dedent(f"""
          - name: {name}
            kind: hpo
            trainer: {{function: "nestor.orchestrator.simulate:simulated_trial"}}
            parallel: {{data: {data}, model: 1}}
            search: {{algorithm: genetic, population: {population}, generations: 3,
                      schedule: async, seed: {data}}}
            space:
              x: {{type: float, low: 0, high: 1}}
            objective: {{metric: val_accuracy, mode: max}}
            trial: {{retries: {retries}}}
        """)
    return load_spec_text("name: fold\nstages:\n" + textwrap.indent(stages, "  "))


@pytest.fixture(scope="module")
def journals(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A finished sweep with rank failures (retried and failed for good), and one an
    allocation's time limit stopped (trials interrupted)."""
    root = tmp_path_factory.mktemp("journals")
    backend = SimulatedBackend(4, 4, lognormal_trials(600.0, 0.8), seed=3,
                               rank_failure_p=0.3)
    run_workflow(two_stages(retries=1), backend, root / "sweep")
    limited = SimulatedBackend(4, 4, lognormal_trials(600.0, 0.8), seed=4,
                               rank_failure_p=0.1, time_limit_s=2500.0)
    with pytest.raises(Interrupted):
        run_workflow(two_stages(), limited, root / "limited")
    return {"sweep": root / "sweep", "limited": root / "limited"}


def folded_afresh(journal: Path, trials: bool = True) -> RunState:
    state = RunState(trials)
    state.fold(journal)
    return state


def no_offsets(encoded: dict[str, Any]) -> dict[str, Any]:
    """A fold's layout without where its lines lay in the file (which a fold of records
    read beforehand cannot know)."""
    return {**encoded, "workflow": {**encoded["workflow"], "start_offset": None},
            "stages": [{**stage, "summary_at": None} for stage in encoded["stages"]]}


def cut(run_dir: Path, share: float, into: Path) -> Path:
    """A copy of the run whose journal ends after ``share`` of its lines (a killed driver)."""
    lines = (run_dir / "journal.jsonl").read_bytes().splitlines(keepends=True)
    into.mkdir(parents=True)
    (into / "journal.jsonl").write_bytes(b"".join(lines[:max(1, int(len(lines) * share))]))
    return into


@pytest.mark.parametrize("which", ["sweep", "limited"])
@pytest.mark.parametrize("share", [1.0, 0.77, 0.4])
def test_the_fold_says_what_the_old_readers_said(journals: dict[str, Path], which: str,
                                                 share: float, tmp_path: Path) -> None:
    run = cut(journals[which], share, tmp_path / "run")
    events = read_events(run / "journal.jsonl")
    assert any(e["event"] == "trial_attempt_failed" for e in events) or share < 1
    new = workflow_status(run)  # its driver's pid is this process's: alive
    old = old_status(events, alive=True)
    assert {k: new[k] for k in ("state", "stages")} == old
    state = RunState.of(run)
    for stage in ("wide", "narrow"):
        for mode in ("max", "min"):
            assert plots.best_so_far(state, stage, mode) == old_best_so_far(events, stage, mode)
    intervals, slots = plots.slot_intervals(state)
    old_intervals, old_slots = old_slot_intervals(events)
    assert slots == max(old_slots, max((s for i in old_intervals for s in i[0]), default=-1) + 1)
    assert [(i.slots, i.start, i.end, i.trial, i.attempt, i.status, i.stage)
            for i in intervals] == old_intervals
    assert state.events == len(events) and state.last_time == max(e["time"] for e in events)


def test_a_driver_restart_cuts_what_ran_and_its_pid_is_the_one_that_counts(
        journals: dict[str, Path], tmp_path: Path) -> None:
    run = cut(journals["sweep"], 0.5, tmp_path / "run")
    lines = (run / "journal.jsonl").read_text().splitlines(keepends=True)
    first = json.loads(lines[0])
    gone = subprocess.Popen(["true"])
    gone.wait()  # a pid that ran and was reaped: the first driver, killed
    first["pid"] = gone.pid
    (run / "journal.jsonl").write_text(json.dumps(first) + "\n" + "".join(lines[1:]))
    assert workflow_status(run)["state"] == "interrupted"
    with (run / "journal.jsonl").open("a") as handle:
        handle.write(json.dumps({"seq": 0, "time": time.time(), "event": "workflow_resumed",
                                 "slots": 16, "pid": os.getpid()}) + "\n")
    events = read_events(run / "journal.jsonl")
    state = RunState.of(run)
    assert state.workflow.pid == os.getpid() and state.workflow.resumes
    assert workflow_status(run)["state"] == "running"
    old_intervals, _ = old_slot_intervals(events)
    intervals, _ = plots.slot_intervals(state)
    assert [(i.trial, i.attempt, i.status, i.end) for i in intervals] == [
        (i[3], i[4], i[5], i[2]) for i in old_intervals]
    assert any(i.status == "interrupted" for i in intervals)


def test_folding_from_an_offset_equals_folding_at_once(journals: dict[str, Path],
                                                       tmp_path: Path) -> None:
    data = (journals["limited"] / "journal.jsonl").read_bytes()
    whole = fold(read_events(journals["limited"] / "journal.jsonl"))
    growing = tmp_path / "journal.jsonl"
    growing.write_bytes(b"")
    state, folded, step = RunState(), 0, len(data) // 7 + 13  # cuts land mid-line
    for end in range(step, len(data) + step, step):
        growing.write_bytes(data[:end])  # a torn last line waits for the next fold
        folded += state.fold(growing)
        assert state.offset <= end and data[state.offset - 1:state.offset] in (b"\n", b"")
    assert folded == whole.events == len(data.splitlines())
    at_once = RunState()
    at_once.fold(growing)
    assert state._encode() == at_once._encode()
    assert no_offsets(state._encode()) == no_offsets(whole._encode())  # records: no offsets


def test_what_is_new_is_every_event_since_the_offset_whole_and_in_order(
        journals: dict[str, Path], tmp_path: Path) -> None:
    """The MLflow projector reads through the fold: carried on from its offset, a part
    at a time, each read says which events are new, each parsed whole (the searchers'
    logs and the stages' summaries too), with the record's seq; what it folded is what
    a fold at once has. A kind this version does not know, or a damaged line, is
    counted as None (the damaged one told to the reader), not folded."""
    from nestor.orchestrator.journal.events import parse
    from nestor.orchestrator.journal.journal import JournalError

    source = journals["limited"] / "journal.jsonl"
    records = read_events(source)
    data = source.read_bytes()
    growing = tmp_path / "journal.jsonl"
    growing.write_bytes(data[:len(data) // 3])  # a torn last line waits
    state, new, parts = RunState(trials=False), [], 0
    for grown in (False, True):
        more = True
        while more:
            part, more = state.fold_new(growing, 4096)
            new += part
            parts += 1
        if not grown:
            assert len(new) == state.events < len(records)
            growing.write_bytes(data)
    assert parts > 3
    assert [seq for seq, _ in new] == [r["seq"] for r in records]
    assert [event for _, event in new] == [parse(r) for r in records]  # summaries, logs too
    assert state.offset == len(data)
    whole = RunState(trials=False)
    whole.fold(growing)
    assert state._encode() == whole._encode()

    with growing.open("ab") as handle:
        handle.write(b'{"seq":%d,"time":1.0,"event":"from_a_later_nestor"}\n' % len(records))
        handle.write(b'{"seq":%d,"time":1.0,"event":"stage_started","stage":"x"' % (
            len(records) + 1) + b',"stage_kind":"hpo","sources":[],"crc":"00000000"}\n')
    told: list[JournalError] = []
    part, more = state.fold_new(growing, 1 << 20, damaged=told.append)
    assert part == [(len(records), None), (len(records) + 1, None)] and not more
    assert len(told) == 1 and "checksum" in str(told[0]) and "x" not in state.stages
    assert state.events == len(records) + 2 and state.offset == growing.stat().st_size
    with pytest.raises(JournalError):  # without a reader to tell: as the fold does
        RunState(trials=False).fold_new(growing, 1 << 30)


def test_a_snapshot_is_used_while_the_journal_still_holds_what_it_folded(
        journals: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run = cut(journals["sweep"], 0.6, tmp_path / "run")
    first = RunState.of(run)
    assert (run / SNAPSHOT).exists()
    full = (journals["sweep"] / "journal.jsonl").read_bytes()
    (run / "journal.jsonl").write_bytes(full)  # the driver went on
    applied: list[Any] = []
    original = RunState.apply
    monkeypatch.setattr(RunState, "apply", lambda self, e: (applied.append(e),
                                                           original(self, e))[1])
    again = RunState.of(run)
    tail = full[first.offset:].splitlines()
    assert 0 < len(applied) <= len(tail)  # the tail alone was read
    assert again._encode() == folded_afresh(run / "journal.jsonl")._encode()
    # Another journal in its place (same length or longer): the snapshot is not trusted.
    other = (journals["limited"] / "journal.jsonl").read_bytes()
    (run / "journal.jsonl").write_bytes(other)
    applied.clear()
    replaced = RunState.of(run)
    assert replaced._encode() == folded_afresh(run / "journal.jsonl")._encode()
    assert replaced.stages["wide"].finished != again.stages["wide"].finished or \
        replaced.workflow.run_key != again.workflow.run_key


def test_a_read_only_run_is_folded_without_a_snapshot(journals: dict[str, Path],
                                                      tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    run = cut(journals["sweep"], 1.0, tmp_path / "run")

    def refuse(*args: Any) -> None:
        raise PermissionError("read-only")

    monkeypatch.setattr(fold_module.RunState, "save", refuse)
    assert workflow_status(run)["state"] == "finished"
    assert not list(run.glob("journal.fold*"))


@pytest.mark.parametrize("share", [1.0, 0.5])
def test_the_stages_alone_fold_as_the_whole_fold_has_them(journals: dict[str, Path],
                                                         share: float, tmp_path: Path) -> None:
    run = cut(journals["limited"], share, tmp_path / "run")
    whole = RunState.of(run)
    heads = RunState.of(run, trials=False)
    assert (run / STAGES_SNAPSHOT).stat().st_size < (run / SNAPSHOT).stat().st_size / 4
    again = RunState.of(run, trials=False)  # from its snapshot
    for state in (heads, again):
        assert not any(stage.trials or stage.runs for stage in state.stages.values())
        assert [(s.name, s.state, s.finished, s.running) for s in state.stages.values()] == [
            (s.name, s.state, s.finished, s.running) for s in whole.stages.values()]
        assert state.workflow == whole.workflow and state.last_time == whole.last_time


def test_the_searchers_logs_and_stage_summaries_are_not_parsed(
        journals: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    kinds: list[str] = []
    original = fold_module.read
    monkeypatch.setattr(fold_module, "read", lambda r: (kinds.append(r["event"]),
                                                        original(r))[1])
    texts: list[bytes] = []

    class Json:
        @staticmethod
        def loads(text: bytes) -> Any:
            texts.append(text)
            return json.loads(text)

    monkeypatch.setattr(fold_module, "json", Json)
    state = RunState()
    state.fold(journals["sweep"] / "journal.jsonl")
    events = read_events(journals["sweep"] / "journal.jsonl")
    assert "search" not in kinds and any(e["event"] == "search" for e in events)
    assert "stage_finished" in kinds and not any(b'"summary"' in t for t in texts)
    assert state.events == len(events)
    assert {s.name: s.state for s in state.stages.values()} == {"wide": "finished",
                                                                "narrow": "finished"}


def test_a_finished_stage_runs_nothing_whatever_it_left_started() -> None:
    records = [
        {"event": "workflow_started", "time": 0.0, "slots": 2, "pid": os.getpid()},
        {"event": "stage_started", "time": 0.0, "stage": "s", "stage_kind": "hpo"},
        {"event": "trial_started", "time": 1.0, "stage": "s", "trial": {"id": "a"},
         "attempt": 1, "shape": "1x1"},
        {"event": "trial_started", "time": 1.0, "stage": "s", "trial": {"id": "b"},
         "attempt": 1, "shape": "1x1"},
        {"event": "stage_finished", "time": 2.0, "stage": "s", "summary": {}},
    ]
    assert len(fold(records[:-1]).stages["s"].running) == 2
    assert fold(records).stages["s"].running == set()


def test_a_stages_plots_fold_its_records_once_and_again_when_they_grow(
        journals: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    events = read_events(journals["sweep"] / "journal.jsonl")
    folds: list[int] = []
    monkeypatch.setattr(plots, "fold", lambda records: (folds.append(len(records)),
                                                        fold(records))[1])
    curve = plots.best_so_far(events, "wide", "max")
    plots.best_so_far(events, "narrow", "max")
    plots.slot_intervals(events, "wide")
    assert folds == [len(events)]
    events.append({"event": "trial_finished", "time": events[-1]["time"] + 1, "stage": "wide",
                   "trial": {"id": "late"}, "attempt": 1, "status": "completed",
                   "value": 2.0})
    assert plots.best_so_far(events, "wide", "max")[-1][1] == 2.0 != curve[-1][1]
    assert folds == [len(events) - 1, len(events)]


def test_a_snapshot_that_cannot_be_written_leaves_nothing_behind(
        journals: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run = cut(journals["sweep"], 1.0, tmp_path / "run")
    real = Path.replace

    def full(self: Path, target: Any) -> Any:
        if self.name.endswith(".tmp"):
            raise OSError(28, "No space left on device")
        return real(self, target)

    monkeypatch.setattr(Path, "replace", full)
    assert workflow_status(run)["state"] == "finished"
    assert sorted(p.name for p in run.iterdir()) == ["journal.jsonl"]
