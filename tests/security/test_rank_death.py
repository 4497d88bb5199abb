"""A rank's death ends its command trial's whole process group, and says so.

A command trial runs in a session of its own. When the Ray worker of the rank
that started it was killed (by a person, Ray's memory monitor or the kernel's
OOM killer), the command was re-parented to PID 1 and ran to its end beside the
retry of the same trial, in the same checkpoint folder (on a GPU node, on the
same GPU). Here a real run's rank worker is sent SIGKILL while its command (and
a process the command started) sleeps: both must be gone at once, the retry
must finish the trial, and the failed attempt's reason must say the rank was
killed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from rank_helpers import alive

from nestor.orchestrator.journal.journal import read_events

pytestmark = pytest.mark.slow

NESTOR = str(Path(sys.executable).parent / "nestor")
TRAIN = """
import os, subprocess, sys, time
marks = os.environ["MARKS"]
first = not os.path.exists(os.path.join(marks, "began"))
open(os.path.join(marks, "began"), "a").close()
if first:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    with open(os.path.join(marks, "pids.tmp"), "w") as out:
        out.write(f"{os.getpid()} {os.getppid()} {child.pid}")
    os.rename(os.path.join(marks, "pids.tmp"), os.path.join(marks, "pids"))
    time.sleep(300)
print("FoM: 1.0", flush=True)
"""
SPEC = """
name: rankdeath
resources: {{slots: 1}}
stages:
  - name: tune
    kind: hpo
    trainer: {{command: ["{python}", "{train}"]}}
    search: {{algorithm: random, budget: 1, seed: 1}}
    space:
      x: {{type: float, low: 0, high: 1}}
    objective: {{metric: result, mode: min}}
    trial: {{retries: 1}}
"""



def test_a_killed_rank_takes_its_command_group_with_it(tmp_path: Path) -> None:
    train = tmp_path / "train.py"
    train.write_text(TRAIN)
    spec = tmp_path / "spec.yaml"
    spec.write_text(textwrap.dedent(SPEC.format(python=sys.executable, train=train)))
    marks = tmp_path / "marks"
    marks.mkdir()
    run_dir = tmp_path / "run"
    driver = subprocess.Popen([NESTOR, "run", str(spec), "--run-dir", str(run_dir)],
                              env=dict(os.environ, MARKS=str(marks)),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    command = rank = child = 0
    try:
        deadline = time.monotonic() + 300
        while not (marks / "pids").exists():
            assert driver.poll() is None and time.monotonic() < deadline, driver.communicate()
            time.sleep(0.2)
        command, rank, child = map(int, (marks / "pids").read_text().split())
        assert "ray" in Path(f"/proc/{rank}/cmdline").read_bytes().decode(errors="replace")
        os.kill(rank, signal.SIGKILL)  # the rank's Ray worker, as the OOM killer does
        deadline = time.monotonic() + 30
        while (alive(command) or alive(child)) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not alive(command) and not alive(child), "the command outlived its rank"
        out, err = driver.communicate(timeout=300)
        assert driver.returncode == 0, out + err
    finally:
        for pid in (command, child):
            if pid and alive(pid):
                os.kill(pid, signal.SIGKILL)
        if driver.poll() is None:
            driver.kill()
    events = read_events(run_dir / "journal.jsonl")
    failed = [e for e in events if e["event"] == "trial_attempt_failed"]
    assert len(failed) == 1, failed
    reason = failed[0]["reason"]
    assert "killed" in reason and "SIGKILL" in reason, reason
    finished = [e for e in events if e["event"] == "trial_finished"]
    assert [(e["status"], e["attempt"]) for e in finished] == [("completed", 2)]
