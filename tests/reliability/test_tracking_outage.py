"""A real `mlflow server` goes away in the middle of a run, and comes back.

The driver only appends to its journal, so an outage costs it nothing; the
projector retries, a projector that ends (or is SIGKILLed) while the server
is down leaves the rest to the next one, and once the server answers, MLflow
shows every journalled event once, even when the journal is projected again.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from nestor_harness import MlflowServer

from nestor.orchestrator.journal.events import (
    StageStarted,
    TrialFinished,
    TrialStarted,
    WorkflowStarted,
)
from nestor.orchestrator.journal.journal import Journal
from nestor.orchestrator.projections.projector import CURSOR_FILE, Projector
from nestor.orchestrator.spec import load_spec

pytestmark = pytest.mark.slow

SPEC = """
name: outage
resources: {{slots: 2}}
tracking: {{uri: "{uri}"}}
stages:
  - name: tune
    kind: hpo
    trainer: {{command: ["true"]}}
    search: {{algorithm: random, budget: 40, seed: 1}}
    space: {{x: {{type: float, low: 0, high: 1}}}}
    objective: {{metric: result, mode: min}}
"""

# A second driver on the run directory (a resume) journals more while the server is
# still down, then dies like SIGKILL: no atexit, no flush.
CRASHING_DRIVER = """
import os, sys, time
from pathlib import Path
from nestor.orchestrator.journal.events import TrialFinished, TrialStarted
from nestor.orchestrator.journal.journal import Journal
from nestor.orchestrator.projections.projector import Projector
from nestor.orchestrator.spec import load_spec
run = Path(sys.argv[1])
projector = Projector(run, load_spec(run / "spec.yaml"))
journal = Journal(run / "journal.jsonl", on_append=projector.wake)
for n in range(21, 26):
    trial = {"id": str(n), "config": {"x": n / 100}, "generation": 0, "deme": 0,
             "parents": [], "origin": "random"}
    journal.record(TrialStarted(stage="tune", trial=trial, attempt=1, gang=1, shape="1x1"))
    journal.record(TrialFinished(stage="tune", trial=trial, attempt=1, status="completed",
                                 value=n / 10, metrics={"result": n / 10}, reason=None,
                                 slot_seconds=1.0, history=[{"result": n / 5}]))
time.sleep(2)
os._exit(9)
"""


def trial(number: int) -> dict:
    return {"id": str(number), "config": {"x": number / 100}, "generation": 0, "deme": 0,
            "parents": [], "origin": "random"}


def run_trial(journal: Journal, number: int) -> None:
    journal.record(TrialStarted(stage="tune", trial=trial(number), attempt=1, gang=1,
                                shape="1x1"))
    journal.record(TrialFinished(stage="tune", trial=trial(number), attempt=1,
                                 status="completed", value=number / 10,
                                 metrics={"result": number / 10}, reason=None,
                                 slot_seconds=1.0, history=[{"result": number / 5}]))


def test_an_outage_costs_the_driver_nothing_and_every_event_reaches_mlflow_once(
        tmp_path: Path) -> None:
    server = MlflowServer(tmp_path / "server.db")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "spec.yaml").write_text(SPEC.format(uri="URI"))
    try:
        server.start()
        (run_dir / "spec.yaml").write_text(SPEC.format(uri=server.uri))
        workflow = load_spec(run_dir / "spec.yaml")
        projector = Projector(run_dir, workflow)
        journal = Journal(run_dir / "journal.jsonl", on_append=projector.wake)
        journal.record(WorkflowStarted(workflow="outage", slots=2, pid=1, run_key="k"))
        journal.record(StageStarted(stage="tune", stage_kind="hpo", sources=[]))
        run_trial(journal, 0)
        assert projector.flush(timeout_s=60)

        server.stop()
        waits = []
        for number in range(1, 21):  # a stretch of sweep while the server is gone
            began = time.monotonic()
            run_trial(journal, number)
            waits.append(time.monotonic() - began)
        assert max(waits) < 0.5, waits  # the driver never waits on MLflow
        assert not projector.flush(timeout_s=3)
        left = projector.close(timeout_s=1)  # the driver ends while the server is down
        journal.close()
        assert left >= 38

        crashed = subprocess.run([sys.executable, "-c", textwrap.dedent(CRASHING_DRIVER),
                                  str(run_dir)], capture_output=True, text=True, timeout=120,
                                 check=False, cwd=Path(__file__).parents[2])
        assert crashed.returncode == 9, crashed.stderr

        server.start()  # the server is back: the next driver's projector catches up
        resumed = Projector(run_dir, workflow)
        assert resumed.flush(timeout_s=120), f"{resumed.behind} events not projected"
        resumed.close()
        check(resumed)

        (run_dir / CURSOR_FILE).write_text("0")  # everything projected once more
        again = Projector(run_dir, workflow)
        assert again.flush(timeout_s=120)
        again.close()
        check(again)
        print(f"\noutage: 25 trials journalled while the server was down (appends took at"
              f" most {max(waits) * 1000:.1f} ms), across two drivers (one SIGKILLed);"
              " all in MLflow once after the restart, and again after a full replay")
    finally:
        server.stop()


def check(projector: Projector) -> None:
    client = projector.tracker.client
    runs = client.search_runs([projector.tracker.experiment_id], max_results=1000)
    names = sorted(r.info.run_name for r in runs)
    assert names == sorted(["tune", *[f"tune/{n}" for n in range(26)]]), names  # each once
    stage = next(r.info.run_id for r in runs if r.info.run_name == "tune")
    for run in runs:
        if run.info.run_name == "tune":
            continue
        number = int(run.info.run_name.split("/")[1])
        assert run.info.status == "FINISHED"
        assert run.data.tags["mlflow.parentRunId"] == stage
        assert run.data.params == {"x": str(number / 100)}
        history = client.get_metric_history(run.info.run_id, "result")
        assert [(m.step, m.value) for m in history] == [(0, number / 5), (1, number / 10)]
