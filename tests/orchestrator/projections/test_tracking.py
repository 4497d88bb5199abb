"""Stage and trial runs land in a real MLflow SQLite store, nested and tagged."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from nestor.orchestrator.projections.store_paths import artifact_location
from nestor.orchestrator.projections.tracking import Tracker


def test_nested_runs_with_params_metrics_and_tags(tmp_path: Path) -> None:
    tracker = Tracker(tmp_path, "demo")
    stage = tracker.start_run("tune", tags={"nestor.stage": "tune"})
    trial = tracker.start_run(
        "t1", parent=stage, params={"lr": 0.1, "act": "relu"},
        tags={"nestor.generation": 0, "nestor.dp": 2},
    )
    for epoch, acc in enumerate([0.5, 0.7]):
        tracker.log_metrics(trial, {"val_accuracy": acc, "loss": float("nan")}, step=epoch)
    tracker.set_tags(trial, {"nestor.status": "completed"})
    tracker.finish(trial, "FINISHED")
    tracker.finish(stage, "FINISHED")

    # Read back through a second client, as the MLflow UI would.
    again = Tracker(tmp_path, "demo")
    assert again.experiment_id == tracker.experiment_id
    run = again.client.get_run(trial)
    assert run.data.tags["mlflow.parentRunId"] == stage
    assert run.data.params == {"lr": "0.1", "act": "relu"}
    assert run.data.tags["nestor.generation"] == "0"
    assert run.data.tags["nestor.metric.loss"] == "nan"
    assert run.info.status == "FINISHED"
    history = again.client.get_metric_history(trial, "val_accuracy")
    assert [(m.step, m.value) for m in history] == [(0, 0.5), (1, 0.7)]
    assert (tmp_path / "mlflow.db").exists()


def test_a_moved_run_directory_keeps_its_artifacts_its_own(tmp_path: Path) -> None:
    first = tmp_path / "scratch" / "run"
    tracker = Tracker(first, "demo")
    stage = tracker.start_run("tune")
    note = first / "note.txt"  # a run directory's own file (the only kind it logs)
    note.write_text("before")
    tracker.log_artifact(stage, note)
    tracker.finish(stage, "FINISHED")
    tracker.close()
    moved = tmp_path / "project" / "run"
    moved.parent.mkdir()
    first.rename(moved)

    note = moved / "note.txt"
    note.write_text("after")
    # What `nestor resume` does, in a process of its own as resume is (MLflow
    # caches a run's artifact location per process).
    subprocess.run([sys.executable, "-c", (
        "import sys; from pathlib import Path; from nestor.orchestrator.projections.tracking import Tracker\n"  # noqa: E501
        "t = Tracker(Path(sys.argv[1]), 'demo')\n"
        "t.log_artifact(sys.argv[2], Path(sys.argv[3]), folder='later'); t.close()"),
        str(moved), stage, str(note)], check=True, cwd=Path(__file__).parents[3])
    again = Tracker(moved, "demo")
    run = again.client.get_run(stage)
    # The store holds a location relative to the artifact root (nothing rewritten by the
    # move), which resolves into the moved directory's mlartifacts/.
    assert artifact_location(moved, run.info.artifact_uri) == (
        (moved / "mlartifacts").resolve().as_uri() + f"/{stage}/artifacts")
    assert (moved / "mlartifacts" / stage / "artifacts" / "later" / "note.txt").read_text() == (
        "after")
    assert not first.exists()  # nothing written back under the old path
    listed = {f.path for f in again.list_artifacts(stage)}
    assert listed == {"note.txt", "later"}


NO_MIGRATION = """
import sys
from pathlib import Path
import mlflow.store.db.utils as db_utils
def migrating(engine):
    raise SystemExit("a store copied from the template ran MLflow's migrations")
db_utils._upgrade_db = migrating
from nestor.orchestrator.projections import store_schema
store_schema.SCHEMAS = Path(sys.argv[2])
from nestor.orchestrator.projections.tracking import Tracker
Tracker(Path(sys.argv[1]), "demo").start_run("tune")
"""


def test_a_driver_killed_while_its_store_is_made_leaves_one_mlflow_can_open(
        tmp_path: Path) -> None:
    # MLflow builds a new SQLite store in a dozen migrations over a second or two; a
    # store cut off half-way could never be opened again ("duplicate column name").
    # The child SIGKILLs itself that far into MLflow's schema upgrade.
    script = """
import os, signal, sys, threading
from pathlib import Path
import mlflow.store.db.utils as db_utils
real = db_utils._upgrade_db
def dying(engine):
    threading.Timer(float(sys.argv[2]), os.kill, (os.getpid(), signal.SIGKILL)).start()
    real(engine)
db_utils._upgrade_db = dying
from nestor.orchestrator.projections import store_schema
store_schema.SCHEMAS = Path(sys.argv[3])  # none shipped: an MLflow nestor has no schema for
from nestor.orchestrator.projections.tracking import Tracker
Tracker(Path(sys.argv[1]), "demo").start_run("tune")
"""
    for delay in ("0.2", "0.5", "1.0"):
        run_dir = tmp_path / f"killed-after-{delay}"
        # A cache of its own: with a schema template there would be no migration to cut.
        env = dict(os.environ, NESTOR_CACHE_DIR=str(tmp_path / f"cache-{delay}"))
        child = subprocess.run([sys.executable, "-c", script, str(run_dir), delay,
                                str(tmp_path / "none-shipped")],
                               cwd=Path(__file__).parents[3], capture_output=True, check=False,
                               env=env)
        assert child.returncode == -9, child.stderr  # it died in the upgrade
        if list((tmp_path / f"cache-{delay}").rglob("*.db")):  # killed after it was made
            # A template left is whole: a store copied from it opens, no migration run.
            fresh = subprocess.run([sys.executable, "-c", NO_MIGRATION,
                                    str(tmp_path / f"fresh-{delay}"),
                                    str(tmp_path / "none-shipped")],
                                   cwd=Path(__file__).parents[3], capture_output=True,
                                   check=False, env=env)
            assert fresh.returncode == 0, fresh.stderr.decode()
        tracker = Tracker(run_dir, "demo")  # what the resumed driver does
        run = tracker.start_run("tune", key="k")
        assert tracker.client.get_run(run).info.run_name == "tune"


def test_a_new_store_is_a_copy_of_the_schema_built_once(tmp_path: Path, monkeypatch) -> None:
    # MLflow's migrations cost the driver seconds of CPU at a run's start, beside its
    # scheduling loop: only the first store of an MLflow version runs them.
    # (For an MLflow nestor ships no schema for: test_store_schema.py has the one it ships.)
    import mlflow.store.db.utils as db_utils

    from nestor.orchestrator.projections import store_schema
    from nestor.orchestrator.projections.store_schema import make_store, schema_template

    monkeypatch.setattr(store_schema, "SCHEMAS", tmp_path / "none-shipped")
    monkeypatch.setenv("NESTOR_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "first").mkdir()
    make_store(tmp_path / "first" / "mlflow.db")
    assert schema_template().is_file()

    def migrating(engine) -> None:
        raise AssertionError("a second store ran MLflow's migrations")

    monkeypatch.setattr(db_utils, "_upgrade_db", migrating)
    tracker = Tracker(tmp_path / "second", "demo")
    run = tracker.start_run("tune", key="k")
    assert tracker.client.get_run(run).info.run_name == "tune"
    default = tracker.client.get_experiment("0")  # as MLflow makes it here, not the cache's
    assert default.artifact_location == str(tmp_path / "mlruns" / "0")
