"""Several runs that first use one new shared SQLite store, all at once.

A spec's ``tracking.uri: sqlite:///shared.db`` lets runs share a store. Three
drivers starting on a store that did not exist yet each ran MLflow's schema
migrations in the one file: "table _alembic_tmp_latest_metrics already exists",
no events written, and a half-migrated store MLflow's own client could no longer
open. Here three real processes open real trackers on one new store at the same
instant (a barrier file) and write a run each.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

WRITER = """
import os, sys, time
from pathlib import Path
go, uri, name = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
import mlflow, sqlalchemy  # imported before the barrier: the race is the store's alone
while not go.exists():
    time.sleep(0.001)
from nestor.orchestrator.projections.tracking import Tracker
tracker = Tracker(Path(sys.argv[4]), "shared", uri)
run = tracker.start_run(name, params={"who": name})
tracker.log_metrics(run, {"loss": 0.5})
tracker.finish(run, "FINISHED")
tracker.close()
print("wrote", run)
"""


def test_three_runs_first_using_one_new_store_all_succeed(tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    from mlflow.tracking import MlflowClient

    # No schema template to copy: each process would build the store by migrations.
    monkeypatch.setenv("NESTOR_CACHE_DIR", str(tmp_path / "cache"))
    store = tmp_path / "shared" / "mlflow.db"
    store.parent.mkdir()
    uri = f"sqlite:///{store}"
    go = tmp_path / "go"
    writers = [subprocess.Popen([sys.executable, "-c", WRITER, str(go), uri, f"run{n}",
                                 str(tmp_path / f"run{n}")],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
               for n in range(3)]
    time.sleep(15)  # all three past their imports, waiting at the barrier
    go.touch()
    results = [(w.wait(timeout=300), *w.communicate()) for w in writers]
    for code, out, err in results:
        assert code == 0 and "wrote" in out, err[-3000:]
    client = MlflowClient(tracking_uri=uri)  # MLflow's own client opens the store
    experiment = client.get_experiment_by_name("shared")
    runs = client.search_runs([experiment.experiment_id])
    assert sorted(r.info.run_name for r in runs) == ["run0", "run1", "run2"]
    assert all(r.info.status == "FINISHED" and r.data.metrics == {"loss": 0.5} for r in runs)
