"""Helpers for the Slurm tests: job state, waiting, running nestor."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "slurm" / "local-slurm.sh"
NESTOR = str(Path(sys.executable).parent / "nestor")
TERMINAL = {"COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL", "PREEMPTED",
            "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE"}


def node_count(env: dict[str, str]) -> int:
    out = subprocess.run(["sinfo", "-h", "-N", "-o", "%N"], capture_output=True, text=True,
                         env=env, check=True)
    return len(set(out.stdout.split()))


def job_state(job_id: str, env: dict[str, str]) -> str:
    out = subprocess.run(["squeue", "-h", "--states=all", "-j", job_id, "-o", "%T"],
                         capture_output=True, text=True, env=env, check=False)
    return out.stdout.strip()


def wait_job(job_id: str, env: dict[str, str], timeout: float = 300) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = job_state(job_id, env)
        if state in TERMINAL:
            return state
        time.sleep(1)
    subprocess.run(["scancel", job_id], env=env, check=False)
    raise AssertionError(f"job {job_id} still {job_state(job_id, env)} after {timeout} s")


def nestor(*args: str, env: dict[str, str], timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([NESTOR, *args], capture_output=True, text=True, env=env,
                          timeout=timeout, check=False)


def submitted_id(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 0, result.stderr
    line = next(ln for ln in result.stdout.splitlines() if ln.startswith("submitted job "))
    return line.split()[-1]
