"""Disk full in the run directory: a real, size-limited tmpfs, filled for real.

The driver must stop with a clear message (no traceback), the journal must
stay readable, and `nestor resume` must finish the run once there is space.
"""

from __future__ import annotations

import errno
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from nestor_harness import (
    FIT,
    NESTOR,
    command_spec,
    events,
    finished,
    kill_tagged,
    nestor,
    reruns,
    tagged_env,
    wait_for_no_tagged,
)

from nestor.orchestrator.journal.journal import DiskFull, Journal, read_events
from tests.tmpfs import tmpfs


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 4 MiB tmpfs: ENOSPC as a real full disk gives it (not ulimit's SIGXFSZ)."""
    with tmpfs(tmp_path / "disk", "4m") as mount:
        yield mount


def fill(disk: Path) -> None:
    """Write until the disk says ENOSPC, down to the last byte."""
    for name, size in (("filler", 65536), ("filler-tail", 1)):
        fd = os.open(disk / name, os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            while True:
                os.write(fd, b"\0" * size)
        except OSError as exc:
            assert exc.errno == errno.ENOSPC
        finally:
            os.close(fd)


def test_a_full_disk_raises_disk_full_and_leaves_the_journal_whole(small_disk: Path) -> None:
    journal = Journal(small_disk / "journal.jsonl")
    journal.append("workflow_started")
    fill(small_disk)
    with pytest.raises(DiskFull) as caught:
        for number in range(10_000):  # the page cache may take a few before ENOSPC
            journal.append("trial_finished", trial={"id": f"t{number}"}, pad="x" * 900)
    assert caught.value.errno == errno.ENOSPC and caught.value.needed > 900
    assert "is full" in str(caught.value)
    written = journal.seq
    assert len(read_events(small_disk / "journal.jsonl")) == written  # no torn event
    for name in ("filler", "filler-tail"):
        (small_disk / name).unlink()
    journal.append("workflow_resumed")
    assert [e["seq"] for e in read_events(small_disk / "journal.jsonl")] == list(
        range(written + 1))
    journal.close()


def test_the_driver_stops_clearly_and_resume_finishes_once_space_is_back(
        small_disk: Path, tmp_path: Path) -> None:
    fit = tmp_path / "fit.py"
    fit.write_text(FIT)
    spec = tmp_path / "spec.yaml"
    # MLflow's store lives outside the small disk, so the journal is what fills it.
    spec.write_text(command_spec(
        fit, name="diskfull", budget=30,
        extra=f"tracking: {{uri: 'sqlite:///{tmp_path / 'mlflow.db'}'}}"))
    run_dir = small_disk / "run"
    env = tagged_env(tmp_path, FIT_SLEEP="0.3")
    log = tmp_path / "invocations.log"
    try:
        driver = subprocess.Popen([NESTOR, "run", str(spec), "--run-dir", str(run_dir)],
                                  env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True)
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and driver.poll() is None:
            if (run_dir / "journal.jsonl").exists() and len(finished(run_dir)) >= 5:
                break
            time.sleep(0.2)
        fill(small_disk)
        _, stderr = driver.communicate(timeout=300)
        assert driver.returncode == 75, stderr
        assert "Traceback" not in stderr, stderr
        assert "is full" in stderr and f"nestor resume {run_dir}" in stderr, stderr
        before = finished(run_dir)  # the journal reads whole
        assert 5 <= len(before) < 30
        assert wait_for_no_tagged(env["NESTOR_TEST_TAG"]) == {}
        for name in ("filler", "filler-tail"):
            (small_disk / name).unlink()
        result = nestor("resume", str(run_dir), env=env)
        assert result.returncode == 0, result.stderr
        after = finished(run_dir)
        assert len(after) == 30
        # A trial whose own files hit the full disk before the journal did is not failed
        # for good: the driver stopped, and the resume ran it again.
        odd = {t: e.get("reason") for t, e in after.items() if e["status"] != "completed"}
        assert odd == {}, odd
        for trial_id, event in before.items():
            assert after[trial_id]["value"] == event["value"]
        figures = reruns(log, run_dir)
        assert figures["after_finish"] == 0, figures
        kinds = [e["event"] for e in events(run_dir)]
        assert kinds.count("workflow_finished") == 1
        print(f"\ndisk full: {len(before)} trials before the stop, 30 after resume,"
              f" reruns {figures}")
    finally:
        kill_tagged(env["NESTOR_TEST_TAG"])
