"""A real `mlflow server` goes away in the middle of tracking, and comes back.

Writes must not wait on the dead server, must survive the driver dying while
buffered, must be sent when the server returns, and must not be logged twice
even when the outbox is replayed again.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from nestor_harness import MlflowServer

from orchestrator.tracking import CURSOR_FILE, OUTBOX_FILE, Tracker

pytestmark = pytest.mark.slow


CRASHING_DRIVER = """
import os, sys
from pathlib import Path
from orchestrator.tracking import Tracker
tracker = Tracker(Path(sys.argv[1]), "outage", uri=sys.argv[2])
run = sys.argv[3]
for step in range(5):
    tracker.log_metrics(run, {"loss": 1.0 / (step + 1)}, step=step)
late = tracker.start_run("late-trial", parent=sys.argv[4], params={"lr": 0.5})
tracker.log_metrics(late, {"result": 0.25})
tracker.finish(late, "FINISHED")
tracker.finish(run, "FINISHED")
print(tracker.pending)
os._exit(9)  # as SIGKILL: no atexit, no flush
"""


def test_an_outage_is_buffered_durably_and_sent_once(tmp_path: Path) -> None:
    server = MlflowServer(tmp_path / "server.db")
    run_dir = tmp_path / "run"
    try:
        server.start()
        tracker = Tracker(run_dir, "outage", uri=server.uri)
        stage = tracker.start_run("tune")
        early = tracker.start_run("t0", parent=stage, params={"lr": 0.1})
        tracker.log_metrics(early, {"result": 0.9})
        tracker.finish(early, "FINISHED")
        assert tracker.pending == 0 and not early.startswith("pending-")

        server.stop()
        waits = []
        keys = []
        for number in range(1, 21):  # a stretch of sweep while the server is gone
            began = time.monotonic()
            run = tracker.start_run(f"t{number}", parent=stage, params={"lr": number / 100})
            tracker.log_metrics(run, {"result": number / 10}, step=1)
            tracker.set_tags(run, {"nestor.status": "completed"})
            tracker.finish(run, "FINISHED")
            waits.append(time.monotonic() - began)
            keys.append(run)
        assert tracker.buffered and tracker.pending >= 80
        assert max(waits[1:]) < 0.5, waits  # after the first failure, no call waits
        assert waits[0] < 8, waits  # the first one waited at most the bounded timeout
        assert all(k.startswith("pending-") for k in keys)
        left = tracker.close(timeout_s=1)  # the driver ends while the server is still down
        assert left == tracker.pending > 0

        # A second driver (a resume) buffers more, then dies like SIGKILL.
        crashed = subprocess.run(
            [sys.executable, "-c", textwrap.dedent(CRASHING_DRIVER), str(run_dir), server.uri,
             keys[-1], stage],
            capture_output=True, text=True, timeout=120, check=False,
            cwd=Path(__file__).parents[2])
        assert crashed.returncode == 9, crashed.stderr
        saved = (run_dir / OUTBOX_FILE).read_bytes()
        assert saved.count(b"\n") >= int(crashed.stdout.split()[-1])

        server.start()  # the server is back
        resumed = Tracker(run_dir, "outage", uri=server.uri)
        assert resumed.flush(timeout_s=120), f"{resumed.pending} writes still buffered"
        check(resumed, stage, keys)
        resumed.close()

        # Replay everything once more, as a driver killed mid-drain would: no duplicates.
        (run_dir / OUTBOX_FILE).write_bytes(saved)
        (run_dir / CURSOR_FILE).write_text("0")
        again = Tracker(run_dir, "outage", uri=server.uri)
        assert again.flush(timeout_s=120)
        check(again, stage, keys)
        again.close()
        print(f"\noutage: 20 trials logged while down, first call {waits[0]:.2f} s, then at"
              f" most {max(waits[1:]) * 1000:.1f} ms; {len(saved.splitlines())} writes buffered"
              f" across two drivers (one SIGKILLed), sent once after the restart, replayed"
              f" twice without duplicates")
    finally:
        server.stop()


def check(tracker: Tracker, stage: str, keys: list[str]) -> None:
    client = tracker.client
    runs = client.search_runs([tracker.experiment_id], max_results=1000)
    names = sorted(r.info.run_name for r in runs)
    expected = sorted(["tune", "late-trial", *[f"t{n}" for n in range(21)]])
    assert names == expected, names  # each run once, none duplicated by a replay
    assert all(r.info.status == "FINISHED" for r in runs if r.info.run_name != "tune")
    for number, key in enumerate(keys, start=1):
        run_id = tracker.run_id(key)
        assert run_id is not None
        run = client.get_run(run_id)
        assert run.data.tags["mlflow.parentRunId"] == stage
        assert run.data.params == {"lr": str(number / 100)}
        history = client.get_metric_history(run_id, "result")
        assert [(m.step, m.value) for m in history] == [(1, number / 10)]
    last = tracker.run_id(keys[-1])
    assert [m.value for m in client.get_metric_history(last, "loss")] == [
        1.0 / (s + 1) for s in range(5)]
