"""The local Slurm's nodes offer this machine's CPUs, whatever OMP_NUM_THREADS says.

`nproc` honours OMP_NUM_THREADS, and Ray sets it to 1 in a process that started Ray:
in a full test run, an earlier in-process Ray left it in pytest's environment, the
local Slurm's nodes were written with CPUs=1, and a job of 2 nodes got 2 slots
instead of 4 (test_submit failed in CI, twice)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "slurm" / "local-slurm.sh"


def test_the_nodes_cpus_ignore_omp_num_threads() -> None:
    line = next(x for x in SCRIPT.read_text().splitlines() if x.startswith("CPUS="))
    env = dict(os.environ, OMP_NUM_THREADS="1", OMP_THREAD_LIMIT="1")
    done = subprocess.run(["bash", "-c", f"{line}; echo $CPUS"], env=env, capture_output=True,
                          text=True, check=True)
    assert int(done.stdout) == len(os.sched_getaffinity(0))
