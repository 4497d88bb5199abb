"""What a journal says a trial logged (``trial_finished``'s ``logged``) is data: the
projector shows a trial's metrics, tags and files from it only where they are what
the trial left, and never lets it reach outside the run directory or rename runs.

A run directory may have been written by someone else. Its journal could name, as
a trial's artifact, a file of the user's outside the run (an absolute path,
``..``, a link out), a place among the MLflow artifacts that climbs out of the
run's folder, or a file since changed; or set the ``nestor.key`` tag by which the
projector finds each run (a twin, or another run overwritten, on the next
resume), or a metric name MLflow refuses (which would hold up every later event).
A real projector, a real SQLite store, a hand-written journal. An older journal,
without ``logged``, projects as before.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from nestor.orchestrator.journal.events import (
    StageStarted,
    TrialFinished,
    TrialStarted,
    WorkflowStarted,
    parse,
)
from nestor.orchestrator.journal.journal import Journal
from nestor.orchestrator.projections.tracking import KEY_TAG
from tests.orchestrator.projections.test_projector import project, trial, workflow


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def entry(run_dir: Path, name: str, path: str, content: Path | None = None) -> dict:
    file = content if content is not None else run_dir / path
    return {"name": name, "path": path, "sha256": sha256(file), "bytes": file.stat().st_size}


def test_a_journal_cannot_turn_a_trials_logs_against_the_user(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    folder = run_dir / "artifacts" / "tune" / "0"
    folder.mkdir(parents=True)
    (folder / "report.txt").write_text("the trial's own report")
    (folder / "changed.txt").write_text("what the trial left")
    digest_before = sha256(folder / "changed.txt")
    (folder / "changed.txt").write_text("written over since")
    secret = tmp_path / "secret.txt"
    secret.write_text("the user's secret")
    (folder / "link.txt").symlink_to(secret)
    logged = {
        "metrics": {"train_loss": [[0, 0.5, 1_700_000_000.0], [10, 0.25, 1_700_000_001.0]],
                    "bad!": [[0, 1.0, 1_700_000_000.0]],  # MLflow would refuse the batch
                    "odd": [["x", 1.0, 1.0], [1, "nan", 1.0]]},
        "tags": {"model": "mlp", KEY_TAG: "another run's key",
                 "mlflow.parentRunId": "somebody else's"},
        "artifacts": [
            entry(run_dir, "report.txt", "artifacts/tune/0/report.txt"),
            entry(run_dir, "secret.txt", str(secret), secret),  # absolute, outside
            entry(run_dir, "secret.txt", "../secret.txt", secret),  # climbs out
            entry(run_dir, "link.txt", "artifacts/tune/0/link.txt", secret),  # a link out
            entry(run_dir, "../../escape/report.txt", "artifacts/tune/0/report.txt"),
            {**entry(run_dir, "changed.txt", "artifacts/tune/0/changed.txt"),
             "sha256": digest_before},  # not what the trial left
        ],
    }
    old = {"event": "trial_finished", "seq": 9, "stage": "tune", "trial": trial(1),
           "attempt": 1, "status": "completed", "value": 0.2, "metrics": {"result": 0.2},
           "reason": None, "slot_seconds": 1.0}
    assert parse(old).logged is None  # an older journal's event reads

    wf = workflow(tmp_path)
    with Journal(run_dir / "journal.jsonl") as journal:
        journal.record(WorkflowStarted(workflow="projected", slots=2, pid=1, run_key="k"))
        journal.record(StageStarted(stage="tune", stage_kind="hpo", sources=[]))
        for number in (0, 1):
            journal.record(TrialStarted(stage="tune", trial=trial(number), attempt=1, gang=1,
                                        shape="1x1"))
        journal.record(TrialFinished(
            stage="tune", trial=trial(0), attempt=1, status="completed", value=0.5,
            metrics={"result": 0.5}, reason=None, slot_seconds=1.0, logged=logged))
        journal.record(parse(old))
    projector = project(run_dir, wf)

    client = projector.tracker.client
    runs = {r.info.run_name: r for r in client.search_runs([projector.tracker.experiment_id])}
    assert sorted(runs) == ["tune", "tune/0", "tune/1"]
    shown = runs["tune/0"]
    history = client.get_metric_history(shown.info.run_id, "train_loss")
    assert sorted((m.step, m.value) for m in history) == [(0, 0.5), (10, 0.25)]
    assert set(shown.data.metrics) == {"result", "train_loss"}  # nothing of "bad!", "odd"
    assert shown.data.tags["model"] == "mlp"
    assert shown.data.tags[KEY_TAG] != "another run's key"
    assert shown.data.tags["mlflow.parentRunId"] == runs["tune"].info.run_id
    stored = sorted(p.relative_to(run_dir / "mlartifacts").as_posix()
                    for p in (run_dir / "mlartifacts").rglob("*") if p.is_file())
    assert [p.split("/artifacts/", 1)[1] for p in stored] == ["report.txt"], stored
    assert not any("secret" in p.read_text() for p in (run_dir / "mlartifacts").rglob("*")
                   if p.is_file())
    assert not (tmp_path / "escape").exists() and not (run_dir / "escape").exists()
    assert runs["tune/1"].info.status == "FINISHED"  # the older event, as before


def test_a_shipped_function_is_loaded_only_when_its_owner_alone_may_write_it(
        tmp_path: Path) -> None:
    """A pickled ``__main__`` trainer runs code when loaded: one that another user could
    have written (group- or world-writable, or not the user's) is refused."""
    import os

    from nestor.orchestrator.engine.shipped import save_functions, shipped_code
    from nestor.orchestrator.journal.safe import UnsafeRunData

    save_functions(tmp_path, {"__main__:train": b"pickled"})
    path = tmp_path / "functions" / "train.pkl"
    os.chmod(path, 0o600)
    assert shipped_code(tmp_path, "__main__:train") == b"pickled"
    for mode in (0o620, 0o602):
        os.chmod(path, mode)
        with pytest.raises(UnsafeRunData, match="nobody else may write it"):
            shipped_code(tmp_path, "__main__:train")
    os.chmod(path, 0o600)
    os.chown(path, 12345, -1)  # tests run as root: another user's file
    with pytest.raises(UnsafeRunData, match="owned by uid 12345"):
        shipped_code(tmp_path, "__main__:train")


def test_a_link_planted_among_the_artifacts_is_not_written_through(tmp_path: Path) -> None:
    """The projector copies a run's files into the run directory's ``mlartifacts/``
    itself (``store_paths.copy_artifact``, not MLflow's repository, which costs a
    millisecond a file). A link planted there, where a run's folder will be, must
    not carry the copy out of the run directory: the write is refused and the place
    the link names stays untouched."""
    from mlflow.exceptions import MlflowException

    from nestor.orchestrator.projections.tracking import Tracker

    run_dir, outside = tmp_path / "run", tmp_path / "outside"
    outside.mkdir()
    tracker = Tracker(run_dir, "planted")
    run = tracker.start_run("trial", key="trial")
    log = run_dir / "logs" / "stdout.log"
    log.parent.mkdir(parents=True)
    log.write_text("FoM: 0.5\n")
    log.chmod(0o640)
    tracker.log_artifact(run, log, "logs/attempt-1")  # as a trial's log is
    uri = tracker.client.get_run(run).info.artifact_uri
    place = run_dir / "mlartifacts" / uri.split(":/", 1)[1].lstrip("/")
    copied = place / "logs" / "attempt-1" / "stdout.log"
    assert copied.read_text() == "FoM: 0.5\n"
    assert copied.stat().st_mode & 0o777 == 0o640  # as MLflow's copy keeps it
    assert [p.name for p in copied.parent.iterdir()] == ["stdout.log"]  # no staged leftover

    (place / "logs" / "attempt-2").symlink_to(outside, target_is_directory=True)
    with pytest.raises(MlflowException, match="outside"):
        tracker.log_artifact(run, log, "logs/attempt-2")
    with pytest.raises(MlflowException):  # a folder that climbs out, as MLflow refuses it
        tracker.log_artifact(run, log, "../../escaped")
    tracker.close()
    assert list(outside.iterdir()) == []
    assert not (run_dir / "mlartifacts" / "escaped").exists()
