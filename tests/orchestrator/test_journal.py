"""The journal keeps every acknowledged event through kills and torn writes."""

from __future__ import annotations

import math
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from orchestrator.journal import Journal, JournalError, read_events


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
    with pytest.raises(JournalError, match=r"journal.jsonl:2: not a JSON event"):
        read_events(path)


WRITER = """
import sys
from orchestrator.journal import Journal
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
