"""Ctrl-C while `nestor run` waits for MLflow after its results: it stops waiting at
once, says what is left and what writes it, and loses nothing. The tracking server
is down for the whole run, so the wait is certain; it comes back afterwards, and
one projector writes every journalled event, each once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from nestor_harness import MlflowServer

from nestor.orchestrator.journal.journal import read_events
from nestor.orchestrator.projections.projector import CURSOR_FILE, Projector
from nestor.orchestrator.spec import load_spec

pytestmark = pytest.mark.slow

SPEC = """
name: waited
resources: {{slots: 2}}
tracking: {{uri: "{uri}"}}
stages:
  - name: tune
    kind: hpo
    trainer: {{command: ["/bin/echo", "FoM: 0.5"]}}
    search: {{algorithm: random, budget: 6, seed: 1}}
    space: {{x: {{type: float, low: 0, high: 1}}}}
    objective: {{metric: FoM, mode: min}}
"""


def test_ctrl_c_while_waiting_for_mlflow_loses_nothing(tmp_path: Path) -> None:
    server = MlflowServer(tmp_path / "server.db")  # not started yet: MLflow is down
    spec = tmp_path / "spec.yaml"
    spec.write_text(textwrap.dedent(SPEC.format(uri=server.uri)))
    run_dir = tmp_path / "run"
    nestor = str(Path(sys.executable).parent / "nestor")
    driver = subprocess.Popen([nestor, "run", str(spec), "--run-dir", str(run_dir)],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              env={**os.environ, "PYTHONUNBUFFERED": "1"})
    said = []
    try:
        assert driver.stdout is not None
        for line in driver.stdout:
            said.append(line)
            if line.startswith("MLflow: "):  # results printed; now it waits for MLflow
                break
        assert any("run directory:" in line for line in said), "".join(said)
        asked = time.monotonic()
        driver.send_signal(signal.SIGINT)
        rest, _ = driver.communicate(timeout=60)
        stopped_in = time.monotonic() - asked
    finally:
        if driver.poll() is None:
            driver.kill()
    output = "".join(said) + rest
    assert driver.returncode == 0, output
    assert stopped_in < 10, (stopped_in, output)
    assert "stopped waiting with" in output and f"nestor resume {run_dir}" in output, output
    assert "RAY_AUTH_MODE=disabled" not in output  # Ray's advice to turn its token off

    events = len(read_events(run_dir / "journal.jsonl"))
    try:
        server.start()
        projector = Projector(run_dir, load_spec(run_dir / "spec.yaml"))
        assert projector.close(timeout_s=120) == 0
        client = projector.tracker.client
        runs = client.search_runs([projector.tracker.experiment_id], max_results=100)
        names = sorted(run.info.run_name for run in runs)
        assert names == sorted(["tune", *[f"tune/{n}" for n in range(6)]]), names  # once each
        assert all(run.info.status == "FINISHED" for run in runs)
        assert (run_dir / CURSOR_FILE).read_text() == str(events)
    finally:
        server.stop()
