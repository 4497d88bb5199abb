"""Fixtures shared across the test packages."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest

# pytester: tests of the test set-up itself; skip_policy: under CI a skip fails the run;
# timeouts: a test marked slow gets the longer slow_timeout (pytest-timeout's per test).
pytest_plugins = ("pytester", "skip_policy", "timeouts")


@pytest.fixture(scope="session")
def ray_local() -> Iterator[object]:
    """A real local Ray with this machine's 2 CPUs, shared by the tests that need one."""
    import ray

    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False,
             configure_logging=False)
    yield ray
    ray.shutdown()


@pytest.fixture
def nestor_with_fault() -> Callable[..., subprocess.CompletedProcess]:
    """``nestor ARGS`` in a process where ``fault`` (Python source, run first) has
    replaced some function: how a test puts a kill or a race exactly where it wants
    one, instead of hoping a timed signal lands there."""

    def run(fault: str, *args: str, **options: Any) -> subprocess.CompletedProcess:
        script = (f"{fault}\nimport sys\nfrom nestor.orchestrator.commands import cli\n"
                  "sys.argv = ['nestor', *sys.argv[1:]]\ncli.main()\n")
        return subprocess.run([sys.executable, "-c", script, *args], capture_output=True,
                              text=True, check=False, **options)

    return run
