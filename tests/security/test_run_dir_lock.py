"""One driver per run directory, and a refused command writes nothing.

Two ``nestor resume`` on one interrupted run used to both drive it: trials ran
twice, ``seq`` repeated, MLflow runs doubled. The lock (``orchestrator.journal.lock``)
is an ``flock`` the kernel releases when its holder dies; these tests check it from
outside, with real processes, and that files of the user's are never overwritten.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
import time
from collections import Counter
from pathlib import Path

import pytest

from nestor.orchestrator.engine.workflow import RunError, prepare_run_dir
from nestor.orchestrator.journal.lock import RunDirLocked, hold

NESTOR = str(Path(sys.executable).parent / "nestor")

HOLDER = """
import sys, time
from nestor.orchestrator.journal.lock import hold
lock = hold(sys.argv[1])
print("held", flush=True)
time.sleep(600)
"""


def holder(run_dir: Path) -> subprocess.Popen[str]:
    """Another process that takes the lock and keeps it until killed."""
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(run_dir)],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


def test_a_second_process_is_refused_naming_the_holder_and_a_kill_frees_it(
        tmp_path: Path) -> None:
    tmp_path.mkdir(exist_ok=True)
    proc = holder(tmp_path)
    try:
        with pytest.raises(RunDirLocked, match=rf"pid {proc.pid} on host \S+"):
            hold(tmp_path)
    finally:
        proc.send_signal(signal.SIGKILL)  # no clean-up runs: the kernel frees the lock
        proc.wait()
    with hold(tmp_path) as lock:
        assert lock.held
        with hold(tmp_path) as again:  # re-entrant within one process
            assert again is lock
        assert lock.held
    assert not lock.held


def test_a_lock_file_that_is_a_link_is_not_followed(tmp_path: Path) -> None:
    mine = tmp_path / "mine.txt"
    mine.write_text("keep")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / ".nestor.lock").symlink_to(mine)
    with pytest.raises(RunDirLocked, match="symbolic link"):
        hold(run_dir)
    assert mine.read_text() == "keep"


def test_a_new_run_is_refused_while_another_driver_holds_the_directory(tmp_path: Path) -> None:
    """The check-then-create window: the spec is written only under the lock."""
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC.format(command="true", budget=1))
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    proc = holder(run_dir)
    try:
        with pytest.raises(RunError, match=f"pid {proc.pid}"):
            prepare_run_dir(spec, run_dir, False)
    finally:
        proc.kill()
        proc.wait()
    assert not (run_dir / "spec.yaml").exists()


def test_a_folder_of_the_users_is_refused_and_left_as_it_was(tmp_path: Path) -> None:
    """``nestor run spec.yaml --run-dir FOLDER`` on a folder holding the user's own
    spec.yaml (and data) used to overwrite it and run among their files."""
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "spec.yaml").write_text("# my notes, not this spec\n")
    (folder / "data.csv").write_text("1,2\n")
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC.format(command="true", budget=1))
    result = subprocess.run([NESTOR, "run", str(spec), "--run-dir", str(folder)],
                            capture_output=True, text=True, check=False, timeout=120)
    assert result.returncode == 2, result.stderr
    assert "holds files that are not a nestor run" in " ".join(result.stderr.split())
    assert "Traceback" not in result.stderr
    assert (folder / "spec.yaml").read_text() == "# my notes, not this spec\n"
    assert sorted(p.name for p in folder.iterdir()) == ["data.csv", "spec.yaml"]


def test_a_sweep_into_an_existing_run_writes_nothing(tmp_path: Path) -> None:
    """``nestor sweep --run-dir EXISTING`` used to overwrite its sweep.yaml, then refuse."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "journal.jsonl").write_text("")
    (run_dir / "spec.yaml").write_text("# the first run's spec\n")
    before = {p.name: p.read_bytes() for p in run_dir.iterdir()}
    result = subprocess.run(
        [NESTOR, "sweep", "--command", "true", "--param", "x=float:0:1", "--mode", "min",
         "--budget", "1", "--run-dir", str(run_dir)],
        capture_output=True, text=True, check=False, timeout=120)
    assert result.returncode == 2, result.stderr
    assert "already holds a workflow run" in " ".join(result.stderr.split())
    assert {p.name: p.read_bytes() for p in run_dir.iterdir()} == before


SPEC = textwrap.dedent("""
    name: locked
    resources: {{slots: 2}}
    stages:
      - name: tune
        kind: hpo
        trainer: {{command: ["{python}", "-c", "{command}"]}}
        space:
          x: {{type: float, low: 0, high: 1}}
        search: {{algorithm: random, budget: {budget}, seed: 0}}
        objective: {{metric: fom, mode: min}}
        parallel: {{data: 1}}
    """).replace("{python}", sys.executable)

# A trial a user would write: sleeps a while, prints its figure of merit.
SLOW_TRIAL = ("import sys,time; time.sleep(3); "
              "x=float([a for a in sys.argv if a.startswith('--x=')][0][4:]); print('FoM:', x)")


@pytest.mark.slow
def test_two_drivers_on_one_run_directory_never_run_a_trial_twice(tmp_path: Path) -> None:
    """The reported failure: a second ``nestor resume`` while the first drives the run.
    The second exits 2 naming the first's PID; the run ends with each trial once."""
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC.format(command=SLOW_TRIAL, budget=6))
    run_dir = tmp_path / "run"
    first = subprocess.Popen([NESTOR, "run", str(spec), "--run-dir", str(run_dir)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 180
        while not (run_dir / "journal.jsonl").exists() or b"trial_started" not in (
                run_dir / "journal.jsonl").read_bytes():
            assert first.poll() is None, first.communicate()
            assert time.monotonic() < deadline, "the first driver never started a trial"
            time.sleep(0.5)
        for args in (["resume", str(run_dir)], ["run", str(spec), "--run-dir", str(run_dir)]):
            second = subprocess.run([NESTOR, *args], capture_output=True, text=True,
                                    check=False, timeout=120)
            assert second.returncode == 2, second.stderr
            text = " ".join(second.stderr.split())
            assert f"pid {first.pid}" in text or "already holds a workflow run" in text, text
            assert "Traceback" not in second.stderr
        _out, err = first.communicate(timeout=300)
        assert first.returncode == 0, err
    finally:
        if first.poll() is None:
            first.kill()
    events = [json.loads(line) for line in (run_dir / "journal.jsonl").read_text().splitlines()]
    seqs = Counter(e["seq"] for e in events)
    assert max(seqs.values()) == 1, "two writers: a seq appears twice"
    finished = Counter(e["trial"]["id"] for e in events if e["event"] == "trial_finished")
    assert len(finished) == 6 and max(finished.values()) == 1
    starts = [e for e in events if e["event"] in ("workflow_started", "workflow_resumed")]
    assert len(starts) == 1, "a second driver journalled its start"
