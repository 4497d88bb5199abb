"""The engine drives a ``Backend`` and loads neither concrete backend (issue 42): once
it imported the ``backends`` package, whose ``__init__`` loaded the Ray backend and the
simulator with it. The package still names both for the code that chooses one."""

from __future__ import annotations

import subprocess
import sys


def test_importing_the_engine_loads_neither_backend() -> None:
    probe = ("import sys\n"
             "import nestor.orchestrator.engine.workflow, nestor.orchestrator.engine.trials\n"
             "print(sorted(m for m in sys.modules if m.startswith("
             "('nestor.orchestrator.backends.ray', 'nestor.orchestrator.backends.simulated'))))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          check=True)
    assert done.stdout.strip() == "[]", done.stdout


def test_the_package_still_names_both_backends() -> None:
    from nestor.orchestrator import backends
    from nestor.orchestrator.backends.ray.backend import RayBackend
    from nestor.orchestrator.backends.simulated.backend import SimulatedBackend

    assert backends.RayBackend is RayBackend and backends.SimulatedBackend is SimulatedBackend
    assert set(backends.__all__) >= {"Backend", "RayBackend", "SimulatedBackend", "Draw"}
