"""A run directory that cannot be written: read as it is, refused to drive, no traceback.

A colleague's run, or one on a read-only mount (a project space's snapshot): ``nestor
status`` and ``results`` read it; ``nestor resume`` and ``run`` exit 2 saying it cannot
be written and what to do; ``nestor ui`` shows a private copy of its store. A real
read-only tmpfs is used: the test runs as root (as CI does), where permission bits
alone would not stop a write.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from nestor.orchestrator.backends import SimulatedBackend, fixed_trials
from nestor.orchestrator.engine.workflow import run_workflow
from nestor.orchestrator.projections.projector import Projector
from nestor.orchestrator.spec import load_spec_text
from tests.tmpfs import tmpfs

NESTOR = str(Path(sys.executable).parent / "nestor")
SPEC = textwrap.dedent("""
    name: frozen
    stages:
      - name: tune
        kind: hpo
        trainer: {function: "nestor.orchestrator.simulate:simulated_trial"}
        search: {algorithm: random, budget: 4, seed: 1}
        space:
          x: {type: float, low: 0, high: 1}
        objective: {metric: val_accuracy, mode: max}
    """)


@pytest.fixture
def read_only_run(tmp_path: Path) -> Iterator[Path]:
    """A finished run with its MLflow store, copied onto a tmpfs remounted read-only."""
    made = tmp_path / "made"
    workflow = load_spec_text(SPEC)
    run_workflow(workflow, SimulatedBackend(nodes=1, slots_per_node=2, seed=0,
                                            trial_model=fixed_trials(60.0, 0.7)), made)
    (made / "spec.yaml").write_text(SPEC)
    Projector(made, workflow).close()
    assert (made / "mlflow.db").is_file()
    with tmpfs(tmp_path / "mount", "64m") as mount:
        shutil.copytree(made, mount / "run")
        subprocess.run(["mount", "-o", "remount,ro", str(mount)], check=True)
        yield mount / "run"


def nestor(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([NESTOR, *args], capture_output=True, text=True, check=False,
                          timeout=120)


def test_it_is_read_but_never_driven(read_only_run: Path) -> None:
    status = nestor("status", str(read_only_run))
    assert status.returncode == 0, status.stderr
    assert "finished" in status.stdout
    results = nestor("results", str(read_only_run))
    assert results.returncode == 0, results.stderr
    assert "best first" in results.stdout
    for args in (["resume", str(read_only_run)],
                 ["run", str(read_only_run / "spec.yaml"), "--run-dir", str(read_only_run)]):
        refused = nestor(*args)
        assert refused.returncode == 2, refused.stderr
        assert "Traceback" not in refused.stderr
        text = " ".join(refused.stderr.split())
        assert "cannot be written" in text or "already holds a workflow run" in text, text


def test_the_ui_shows_a_private_copy(read_only_run: Path) -> None:
    port = 5191
    ui = subprocess.Popen([NESTOR, "ui", str(read_only_run), "--port", str(port)],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 90
        link = None
        assert ui.stdout is not None
        while link is None and time.monotonic() < deadline:
            line = ui.stdout.readline()
            assert line or ui.poll() is None, ui.stderr.read() if ui.stderr else ""
            found = [word for word in line.split() if "nestor_token=" in word]
            if found:
                link = found[0]
        assert link is not None, "no link printed"
        opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor())
        with opener.open(link.split("#")[0], timeout=30) as page:  # the token, then a cookie
            assert page.status == 200
    finally:
        ui.terminate()
        _, err = ui.communicate(timeout=30)
    assert "Traceback" not in err
    assert "private copy" in " ".join(err.split())
