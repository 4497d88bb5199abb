"""The journal keeps every acknowledged event through kills and torn writes."""

from __future__ import annotations

import itertools
import math
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from nestor.orchestrator.journal.journal import Journal, JournalError, iter_events, read_events


def test_events_round_trip_in_order(tmp_path: Path) -> None:
    path = tmp_path / "run" / "journal.jsonl"
    with Journal(path) as journal:
        journal.append("trial_started", trial="t1", config={"lr": 0.1})
        journal.append("trial_finished", trial="t1", value=float("nan"))
    events = read_events(path)
    assert [e["event"] for e in events] == ["trial_started", "trial_finished"]
    assert [e["seq"] for e in events] == [0, 1]
    assert events[0]["config"] == {"lr": 0.1}
    assert math.isnan(events[1]["value"])  # a NaN result is recorded, not lost


def test_a_torn_tail_is_skipped_and_cut_on_reopen(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    with Journal(path) as journal:
        journal.append("a")
        journal.append("b")
    with path.open("ab") as handle:
        handle.write(b'{"seq": 2, "event": "tor')  # a write cut short by a kill
    assert [e["event"] for e in read_events(path)] == ["a", "b"]
    with Journal(path) as journal:
        assert journal.seq == 2
        journal.append("c")
    assert [(e["seq"], e["event"]) for e in read_events(path)] == [(0, "a"), (1, "b"), (2, "c")]


def test_garbage_in_the_middle_is_an_error_not_silence(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    path.write_text('{"seq": 0, "event": "a"}\nnot json\n{"seq": 2, "event": "c"}\n')
    with pytest.raises(JournalError, match=r"journal.jsonl: line 2 is not a JSON event"):
        read_events(path)


WRITER = """
import sys
from nestor.orchestrator.journal.journal import Journal
journal = Journal(sys.argv[1])
i = 0
while True:
    journal.append("tick", i=i, pad="x" * 2000)
    print(i, flush=True)
    i += 1
"""


@pytest.mark.slow
def test_sigkill_loses_no_acknowledged_event(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(path)], stdout=subprocess.PIPE, text=True
    )
    acknowledged = -1
    deadline = time.monotonic() + 60
    assert proc.stdout is not None
    while acknowledged < 200 and time.monotonic() < deadline:
        acknowledged = int(proc.stdout.readline())
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    events = read_events(path)
    ticks = [e["i"] for e in events]
    assert ticks == list(range(len(ticks)))  # contiguous, no duplicates, no holes
    assert len(ticks) >= acknowledged + 1  # everything printed as done is on disk


# -- group commit: many events per fsync, each acknowledged only once fsynced --------------


def test_many_events_share_one_fsync_and_none_is_acked_before_its_fsync(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "journal.jsonl"
    synced_sizes: list[int] = []  # the file's size at each fsync that completed
    real_fsync = os.fsync

    def slow_fsync(fd: int) -> None:
        size = os.fstat(fd).st_size
        time.sleep(0.005)  # a slow disk: events queue up behind the fsync in flight
        real_fsync(fd)
        synced_sizes.append(size)

    acked: list[tuple[int, int]] = []  # (seq, durable size when acknowledged)

    def ack(record: dict[str, Any]) -> None:
        acked.append((record["seq"], synced_sizes[-1]))

    journal = Journal(path, on_durable=ack)
    monkeypatch.setattr(os, "fsync", slow_fsync)
    for i in range(300):
        journal.append("tick", i=i, pad="x" * 200)
    journal.sync()
    monkeypatch.setattr(os, "fsync", real_fsync)
    assert journal.durable == journal.seq == 300
    assert [seq for seq, _ in acked] == list(range(300))  # each once, in order
    assert len(synced_sizes) < 100  # one fsync per event would be 300
    ends = list(itertools.accumulate(len(line) + 1 for line in path.read_bytes().splitlines()))
    for seq, durable_size in acked:  # acked only once an fsync covered its bytes
        assert ends[seq] <= durable_size
    journal.close()


def test_a_gate_opens_only_once_the_events_before_it_are_durable(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    journal = Journal(tmp_path / "journal.jsonl")
    release = threading.Event()
    real_fsync = os.fsync

    def held_fsync(fd: int) -> None:
        release.wait(10)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", held_fsync)
    journal.append("trial_started", trial="t1")
    gate = journal.gate()
    opened = threading.Event()
    threading.Thread(target=lambda: (gate(), opened.set()), daemon=True).start()
    assert not opened.wait(0.3)  # the fsync has not returned: the trial must not run
    assert journal.durable == 0
    release.set()
    assert opened.wait(10)
    assert journal.durable == 1
    journal.append("trial_finished", trial="t1")  # a later event does not hold the gate
    assert journal.wait(1, timeout=5)
    journal.close()
    assert journal.durable == 2


GROUP_WRITER = """
import sys
from nestor.orchestrator.journal.journal import Journal

def ack(record):
    print(record["seq"], journal.fsyncs, flush=True)

journal = Journal(sys.argv[1], on_durable=ack)
i = 0
while True:
    journal.append("tick", i=i, pad="x" * 2000)
    i += 1
"""


@pytest.mark.slow
def test_sigkill_mid_group_loses_no_event_acked_as_durable(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    proc = subprocess.Popen(
        [sys.executable, "-c", GROUP_WRITER, str(path)], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    acked: list[int] = []
    fsyncs = 0
    stop_at = random.randint(300, 3000)  # a random moment, while groups are in flight
    deadline = time.monotonic() + 60
    while len(acked) < stop_at and time.monotonic() < deadline:
        seq, fsyncs = map(int, proc.stdout.readline().split())
        acked.append(seq)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert acked == list(range(len(acked))) and len(acked) >= stop_at
    assert fsyncs < len(acked)  # groups: fewer fsyncs than durable events
    ticks = [e["i"] for e in read_events(path)]
    assert ticks == list(range(len(ticks)))  # contiguous, no duplicates, no holes
    assert len(ticks) >= len(acked)  # every event acknowledged as durable is there


def test_iter_events_streams_only_the_kinds_asked_for_and_skips_a_torn_tail(
        tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    with Journal(path) as journal:
        for i in range(5):
            journal.append("trial_started", trial={"id": f"t{i}"})
            journal.append("search", entries=[{"n": i}] * 50)
    with path.open("ab") as handle:
        handle.write(b'{"seq": 10, "time": 0, "event": "trial_sta')  # a kill mid-write
    started = list(iter_events(path, frozenset({"trial_started"})))
    assert [e["trial"]["id"] for e in started] == [f"t{i}" for i in range(5)]
    assert list(iter_events(path)) == read_events(path)
    assert list(iter_events(tmp_path / "none.jsonl")) == []
