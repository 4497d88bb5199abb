"""Fixtures for the trainers tests: real ranks, started by horovodrun (Horovod over
Gloo) or by torchrun (torch.distributed over Gloo)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
HOROVODRUN = Path(sys.executable).parent / "horovodrun"

Launch = Callable[..., subprocess.CompletedProcess]


def _env(backend: str = "horovod") -> dict[str, str]:
    env = dict(os.environ)
    env["NESTOR_GANG_COMM"] = backend  # which backend trainers.parallel.setup initialises
    # The ranks import helpers from this folder and the repository's packages.
    env["PYTHONPATH"] = os.pathsep.join(
        [str(HERE), str(REPO), *filter(None, [env.get("PYTHONPATH")])]
    )
    env.pop("OMP_NUM_THREADS", None)
    return env


def _end(proc: subprocess.Popen) -> None:
    """TERM the launcher's process group (horovodrun then ends its ranks), then KILL."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(10)
            return
        except subprocess.TimeoutExpired:
            continue


def _launcher(backend: str) -> Launch:
    def run(np: int, argv: list[str], *, timeout: float = 180) -> subprocess.CompletedProcess:
        if backend == "horovod":
            cmd = [str(HOROVODRUN), "-np", str(np), "-H", f"localhost:{np}", "--gloo",
                   sys.executable, *argv]
        else:
            cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
                   "--nproc_per_node", str(np), *argv]  # argv may be torchrun's -m too
        proc = subprocess.Popen(cmd, cwd=REPO, env=_env(backend), stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, start_new_session=True)
        try:
            out, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            _end(proc)
            out, _ = proc.communicate()
            pytest.fail(f"{backend} -np {np} timed out after {timeout:g} s:\n{out[-4000:]}")
        finally:
            if proc.poll() is None:
                _end(proc)
        return subprocess.CompletedProcess(cmd, proc.returncode, out, "")

    run.backend = backend  # type: ignore[attr-defined]
    return run


@pytest.fixture
def horovodrun() -> Launch:
    """Run ``python ARGV...`` as ``np`` real Horovod ranks over Gloo on this machine.

    ``run(np, argv, timeout=...)`` returns the CompletedProcess (stdout and
    stderr together, rank-prefixed by horovodrun); on a timeout the ranks are
    ended and the test fails with the output's tail.
    """
    return _launcher("horovod")


@pytest.fixture(params=["horovod", "torch"])
def ranks(request: pytest.FixtureRequest) -> Launch:
    """As ``horovodrun``, once per backend: Horovod's ranks, then torchrun's ranks of
    torch.distributed (the trainers read ``NESTOR_GANG_COMM``), so each check holds for both."""
    return _launcher(request.param)


@pytest.fixture
def trainers_cli(ranks: Launch) -> Callable[..., dict]:
    """``python -m nestor.trainers ARGS`` as np ranks of each backend; returns rank 0's result."""
    import json

    def run(np: int, args: list[str], out: Path, *, timeout: float = 180) -> dict:
        done = ranks(np, ["-m", "trainers", "--quiet", "--json", str(out), *args],
                          timeout=timeout)
        assert out.is_file(), f"no result from the ranks (exit {done.returncode}):\n" \
            + done.stdout[-4000:]
        return json.loads(out.read_text())

    return run
