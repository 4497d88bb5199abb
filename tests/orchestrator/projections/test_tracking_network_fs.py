"""The default MLflow store on a network filesystem: SQLite on the driver's local
disk, a whole copy in the run directory at stage ends, and a resume (on this or
another node) that starts from that copy and re-projects what it lacks.

This machine has no NFS or Lustre mount, so the run directory's filesystem type
is read from a mounts table the test writes (the same parser reads
``/proc/mounts``); the SQLite files, copies and MLflow runs are real."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from nestor.orchestrator.projections import filesystems
from nestor.orchestrator.projections.filesystems import filesystem_type, on_network_filesystem
from nestor.orchestrator.projections.tracking import Tracker

MOUNTS = r"""overlay / overlay rw,relatime,lowerdir=/a:/b 0 0
proc /proc proc rw,nosuid,nodev,noexec,relatime 0 0
tmpfs /tmp tmpfs rw,nosuid,nodev 0 0
10.0.0.2:/export/home /home nfs4 rw,relatime,vers=4.2,hard,proto=tcp 0 0
192.168.1.5@o2ib:/scratch /lustre/scratch lustre rw,flock,lazystatfs 0 0
gpfs1 /mnt/project\040data gpfs rw,relatime 0 0
/dev/sdb1 /home/me/local ext4 rw,relatime 0 0
tmpfs /lustre/scratch/me/tmp tmpfs rw 0 0
"""


@pytest.mark.parametrize(("path", "kind"), [
    ("/lustre/scratch/me/runs/mnist-1", "lustre"),
    ("/lustre/scratch", "lustre"),
    ("/lustre/scratchy/run", "overlay"),  # a name that only starts like a mount point
    ("/home/alice/runs", "nfs4"),
    ("/home/me/local/runs", "ext4"),  # a local disk mounted inside the NFS home
    ("/lustre/scratch/me/tmp/x", "tmpfs"),
    ("/mnt/project data/runs", "gpfs"),  # /proc/mounts writes the space as \040
    ("/tmp/run", "tmpfs"),
    ("/opt/run", "overlay"),
])
def test_the_filesystem_type_is_the_longest_mount_point_that_holds_the_path(
        path: str, kind: str) -> None:
    assert filesystem_type(Path(path), MOUNTS) == kind


def test_which_filesystems_count_as_network(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NESTOR_MLFLOW_LOCAL_STORE", raising=False)
    assert on_network_filesystem(Path("/lustre/scratch/run"), MOUNTS)
    assert on_network_filesystem(Path("/home/alice/run"), MOUNTS)
    assert on_network_filesystem(Path("/mnt/project data/run"), MOUNTS)
    assert not on_network_filesystem(Path("/home/me/local/run"), MOUNTS)
    assert not on_network_filesystem(Path("/tmp/run"), MOUNTS)
    monkeypatch.setenv("NESTOR_MLFLOW_LOCAL_STORE", "never")
    assert not on_network_filesystem(Path("/lustre/scratch/run"), MOUNTS)
    monkeypatch.setenv("NESTOR_MLFLOW_LOCAL_STORE", "always")
    assert on_network_filesystem(Path("/tmp/run"), MOUNTS)


@pytest.fixture
def nfs_run_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A run directory that the mounts table puts on NFS; local disk under tmp_path."""
    run_dir = tmp_path / "nfs" / "run"
    run_dir.mkdir(parents=True)
    mounts = tmp_path / "mounts"
    mounts.write_text(Path("/proc/mounts").read_text()
                      + f"server:/export {(tmp_path / 'nfs').resolve()} nfs4 rw,hard 0 0\n")
    monkeypatch.setattr(filesystems, "MOUNTS", mounts)
    monkeypatch.delenv("NESTOR_MLFLOW_LOCAL_STORE", raising=False)
    monkeypatch.setenv("NESTOR_LOCAL_STORE_DIR", str(tmp_path / "node-a"))
    return run_dir


def runs_in(db: Path) -> dict[str, str]:
    """Run name -> status, read straight from a SQLite file."""
    with sqlite3.connect(db) as connection:
        return dict(connection.execute("SELECT name, status FROM runs").fetchall())


def test_on_nfs_the_store_lives_on_local_disk_and_is_copied_at_stage_ends(
        nfs_run_dir: Path, tmp_path: Path) -> None:
    tracker = Tracker(nfs_run_dir, "demo")
    live = tracker.local.live
    assert live.is_relative_to(tmp_path / "node-a") and live.is_file()
    assert tracker.uri == f"sqlite:///{live.resolve()}"
    stage = tracker.start_run("tune")
    trial = tracker.start_run("t1", parent=stage, params={"lr": 0.1})
    tracker.log_metrics(trial, {"val_accuracy": 0.9})
    tracker.finish(trial, "FINISHED")
    assert not (nfs_run_dir / "mlflow.db").exists()  # a trial's end is not a sync point
    (nfs_run_dir / "mlflow-projected").write_text("7")  # how far the projector got
    tracker.finish(stage, "FINISHED")

    copy = nfs_run_dir / "mlflow.db"
    assert runs_in(copy) == {"tune": "FINISHED", "t1": "FINISHED"}
    assert json.loads((nfs_run_dir / "mlflow.db.json").read_text())["cursor"] == 7
    assert not [p.name for p in nfs_run_dir.iterdir() if p.name.endswith(".tmp")]
    artifacts = nfs_run_dir / "mlartifacts"  # artifacts stay in the run directory
    (nfs_run_dir / "table.md").write_text("# tune\n")
    tracker.log_artifact(stage, nfs_run_dir / "table.md")
    assert (artifacts / stage / "artifacts" / "table.md").is_file()


def test_a_resume_elsewhere_starts_from_the_copy_and_rewinds_the_projector(
        nfs_run_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = Tracker(nfs_run_dir, "demo")
    stage = first.start_run("tune")
    (nfs_run_dir / "mlflow-projected").write_text("3")
    first.finish(stage, "FINISHED")  # copied with cursor 3
    late = first.start_run("late", parent=stage)  # only on node A's disk ...
    (nfs_run_dir / "mlflow-projected").write_text("9")  # ... then node A dies

    monkeypatch.setenv("NESTOR_LOCAL_STORE_DIR", str(tmp_path / "node-b"))
    again = Tracker(nfs_run_dir, "demo")  # `nestor resume` on node B
    assert again.local.live.is_relative_to(tmp_path / "node-b")
    assert again.local.take_cursor() == 3  # the projector re-projects 3..8 (its own cursor)
    names = {run.info.run_name for run in again.client.search_runs([again.experiment_id])}
    assert names == {"tune"}
    assert late  # it comes back when the journal's events are projected again
    again.close()
    assert runs_in(nfs_run_dir / "mlflow.db") == {"tune": "FINISHED"}


def test_a_resumed_projector_goes_back_to_where_the_copy_was_taken(
        nfs_run_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The projector reads its cursor once, when it is made: it must read the
    wound-back one, or the events after the copy would never reach MLflow."""
    from types import SimpleNamespace

    from nestor.orchestrator.projections.projector import Projector

    first = Tracker(nfs_run_dir, "demo")
    stage = first.start_run("tune")
    (nfs_run_dir / "mlflow-projected").write_text("3")
    first.finish(stage, "FINISHED")
    (nfs_run_dir / "mlflow-projected").write_text("9")

    monkeypatch.setenv("NESTOR_LOCAL_STORE_DIR", str(tmp_path / "node-b"))
    workflow = SimpleNamespace(name="demo", tracking=SimpleNamespace(uri=None, experiment="demo"))
    projector = Projector(nfs_run_dir, workflow)
    try:
        assert projector.done == 3
        assert projector.uri.startswith(f"sqlite:///{(tmp_path / 'node-b').resolve()}")
    finally:
        projector.close(timeout_s=5)


def test_a_second_tracker_in_one_process_shares_the_store(nfs_run_dir: Path) -> None:
    first = Tracker(nfs_run_dir, "demo")
    stage = first.start_run("tune")
    second = Tracker(nfs_run_dir, "demo")  # must not start the local store afresh
    assert second.local is first.local
    assert second.client.get_run(stage).info.run_name == "tune"


def test_on_a_local_filesystem_the_store_stays_in_the_run_directory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NESTOR_MLFLOW_LOCAL_STORE", raising=False)
    tracker = Tracker(tmp_path, "demo")
    assert tracker.local is None
    assert tracker.uri == f"sqlite:///{(tmp_path / 'mlflow.db').resolve()}"


SPEC = """
name: nfs-store
resources: {slots: 1}
stages:
  - name: tune
    kind: hpo
    trainer: {command: ["%s", "%s"]}
    search: {algorithm: random, budget: 3, seed: 1}
    space: {x: {type: float, low: -1, high: 1}}
    objective: {metric: fom, mode: min}
"""


@pytest.mark.slow  # a real `nestor run`: Ray, 3 trials
def test_nestor_run_with_the_store_on_local_disk(tmp_path: Path) -> None:
    fit = tmp_path / "fit.py"
    fit.write_text("import sys\nx = float(sys.argv[1].split('=')[1])\nprint(f'FoM: {x * x}')\n")
    spec = tmp_path / "spec.yaml"
    spec.write_text(textwrap.dedent(SPEC % (sys.executable, fit)))
    run_dir = tmp_path / "run"
    env = {**os.environ, "NESTOR_MLFLOW_LOCAL_STORE": "always",
           "NESTOR_LOCAL_STORE_DIR": str(tmp_path / "local")}
    nestor = str(Path(sys.executable).parent / "nestor")
    done = subprocess.run([nestor, "run", str(spec), "--run-dir", str(run_dir)], env=env,
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    live = list((tmp_path / "local").rglob("mlflow.db"))
    assert len(live) == 1
    runs = runs_in(run_dir / "mlflow.db")
    assert sorted(runs.values()) == ["FINISHED"] * 4, runs  # the stage and its 3 trials
    assert runs_in(live[0]) == runs
    events = sum(1 for line in (run_dir / "journal.jsonl").read_text().splitlines() if line)
    assert int((run_dir / "mlflow-projected").read_text()) == events
    # The last copy (at exit) was taken with every event projected.
    assert json.loads((run_dir / "mlflow.db.json").read_text())["cursor"] == events
    shutil.rmtree(tmp_path / "local")  # the node's disk is gone: the copy has it all
