"""A driver stopped while Ray starts says so and exits 143; what it writes is private.

A SIGTERM in a run's first seconds, while ``ray.init`` had put in its own handler,
ended the command with status 15 and not a word (the README promises 143 and a
line saying what is kept). Run-directory files had mixed modes: the journal and
spec.yaml (which holds ``trial.env`` values) 0644, results.json 0600.
"""

from __future__ import annotations

import stat
import subprocess
import sys
from pathlib import Path

import pytest

NESTOR = str(Path(sys.executable).parent / "nestor")
FIT = "import sys\nprint('FoM:', float(sys.argv[1].split('=', 1)[1]) ** 2)\n"
SIGTERM_IN_RAY_START = """
import os, signal, ray
_init = ray.init
def init(*args, **kwargs):
    started = _init(*args, **kwargs)  # Ray's own SIGTERM handler is in now
    os.kill(os.getpid(), signal.SIGTERM)
    return started
ray.init = init
"""


def sweep_args(tmp_path: Path, budget: int = 2) -> list[str]:
    (tmp_path / "fit.py").write_text(FIT)
    return ["sweep", "--command", f"{sys.executable} {tmp_path / 'fit.py'}", "--param",
            "x=float:-1:1", "--mode", "min", "--algorithm", "random", "--budget", str(budget),
            "--parallel", "1",
            "--run-dir", str(tmp_path / "run")]


@pytest.mark.slow
def test_a_sigterm_while_ray_starts_exits_143_saying_what_is_kept(tmp_path: Path,
                                                                  nestor_with_fault) -> None:
    done = nestor_with_fault(SIGTERM_IN_RAY_START, *sweep_args(tmp_path), timeout=600)
    assert done.returncode == 143, (done.returncode, done.stderr[-3000:])
    assert "Traceback" not in done.stderr
    said = " ".join(done.stderr.split())
    assert "stopped on SIGTERM" in said and f"nestor resume {tmp_path / 'run'}" in said, said


@pytest.mark.slow
def test_every_file_and_folder_of_a_run_directory_is_private(tmp_path: Path) -> None:
    done = subprocess.run([NESTOR, *sweep_args(tmp_path)], capture_output=True, text=True,
                          check=False, timeout=600)
    assert done.returncode == 0, done.stderr
    run = tmp_path / "run"
    shared = []
    for path in [run, *run.rglob("*")]:
        if path.is_symlink():
            continue
        mode = stat.S_IMODE(path.stat().st_mode)
        if mode & 0o077:  # anyone but its user may read, write or enter it
            shared.append(f"{path.relative_to(tmp_path)} {oct(mode)}")
    assert not shared, shared
    for name in ("journal.jsonl", "spec.yaml", "results.json"):
        assert stat.S_IMODE((run / name).stat().st_mode) == 0o600, name
    assert stat.S_IMODE(run.stat().st_mode) == 0o700
