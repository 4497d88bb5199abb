"""A real Slurm for the tests: slurm/local-slurm.sh, started once per session.

If a local Slurm already runs, the tests use it and leave it running; if they
started it, they stop it. Two Slurm nodes on this host (nestor1, nestor2,
each its own slurmd) let the multi-node bootstrap run for real.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator

import pytest
from _slurm_helpers import SCRIPT


def _conf() -> str:
    out = subprocess.run([str(SCRIPT), "env"], capture_output=True, text=True, check=True)
    return out.stdout.strip().split("=", 1)[1]


@pytest.fixture(scope="session")
def local_slurm() -> Iterator[dict[str, str]]:
    """The environment to run Slurm commands and nestor with; skips without Slurm."""
    if shutil.which("slurmctld") is None or os.geteuid() != 0:
        pytest.skip("needs Debian's slurm-wlm and munge and root (.ci/run installs them)")
    running = subprocess.run([str(SCRIPT), "status"], capture_output=True, text=True)
    started = running.returncode != 0
    if started:
        subprocess.run([str(SCRIPT), "start", "--nodes", "2"], check=True,
                       capture_output=True, text=True)
    env = dict(os.environ, SLURM_CONF=_conf())
    try:
        yield env
    finally:
        if started:
            subprocess.run([str(SCRIPT), "stop"], capture_output=True, text=True)
