"""MLflow, written through one idempotent writer: the projector's.

One experiment per workflow, a parent run per stage and a nested run per
trial, all through ``MlflowClient`` (no global "active run" state). By
default the store is a SQLite file in the run directory, written by the
driver's projector thread alone (one writer: no "database is locked").

The journal is the truth; MLflow is a projection of it
(``orchestrator.projector``). Every write here is safe to repeat, which is
what lets the projector replay events after an outage or a kill: a run is
created only if no run in the experiment carries its key (``nestor.key``),
a metric is logged with the timestamp of the event it comes from (MLflow
keeps one point per key, step, timestamp and value), tags and terminal
states are upserts, and an artifact is written to the same path.

Each call's wait is bounded (``MLFLOW_HTTP_REQUEST_MAX_RETRIES`` and
``MLFLOW_HTTP_REQUEST_TIMEOUT`` default to 0 and 5 s here instead of
MLflow's 7 retries and 120 s): a server that is down costs the projector a
short wait and a retry later, never the scheduling loop anything.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

MAX_PARAM_CHARS = 6000  # MLflow's limit on a param value
STORE_FILE = "mlflow.db"  # a run directory's own MLflow store, unless the spec names one
ARTIFACTS_DIR = "mlartifacts"  # beside it, where that store keeps artifacts
KEY_TAG = "nestor.key"
PENDING = "pending-"


def default_tracking_uri(run_dir: Path) -> str:
    return f"sqlite:///{(run_dir / STORE_FILE).resolve()}"


def relocate_artifacts(run_dir: Path) -> list[str]:
    """Point the run directory's own store at its own ``mlartifacts/`` again.

    MLflow records artifact locations as absolute URIs and has no call to change
    an experiment's. A run directory moved or copied (scratch to project
    storage, the cluster to a laptop) would otherwise have ``nestor resume``
    write plots and checkpoints under the old path, and ``nestor ui`` show
    "No Artifacts Recorded". Only the store nestor made (``mlflow.db`` beside
    ``mlartifacts/``) is touched. Returns the old locations rewritten.
    """
    db = run_dir / STORE_FILE
    if not db.is_file():
        return []
    import sqlite3
    import urllib.parse

    here = (run_dir / ARTIFACTS_DIR).resolve().as_uri()
    moved = []
    with contextlib.closing(sqlite3.connect(db, timeout=30)) as connection, connection:
        for (location,) in connection.execute(
                "SELECT artifact_location FROM experiments").fetchall():
            if not location or location == here or not location.startswith("file://"):
                continue
            old = Path(urllib.parse.unquote(urllib.parse.urlparse(location).path))
            if old.name != ARTIFACTS_DIR:
                continue
            connection.execute("UPDATE experiments SET artifact_location = ?"
                               " WHERE artifact_location = ?", (here, location))
            connection.execute("UPDATE runs SET artifact_uri = ? || substr(artifact_uri, ?)"
                               " WHERE substr(artifact_uri, 1, ?) = ?",
                               (here, len(location) + 1, len(location) + 1, location + "/"))
            moved.append(str(old))
    for old in moved:
        log.info("run directory moved: MLflow artifacts recorded under %s now go to %s",
                 old, here)
    return moved


def make_store(db: Path) -> None:
    """Create a run directory's SQLite store all at once, if it has none.

    MLflow builds a new store's schema in a dozen migrations; a driver killed in
    the middle (its first seconds) would leave a store MLflow cannot open again
    ("duplicate column name"). So the schema is built in a file of its own and
    renamed into place, whole."""
    if db.exists():
        return
    from mlflow.tracking import MlflowClient

    tmp = db.with_name(f".{db.name}.{os.getpid()}.tmp")
    tmp.unlink(missing_ok=True)
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp.resolve()}")
    client.search_experiments(max_results=1)  # the schema exists once this answers
    os.replace(tmp, db)


def _param_value(value: Any) -> str:
    text = str(value)
    return text if len(text) <= MAX_PARAM_CHARS else text[: MAX_PARAM_CHARS - 3] + "..."


def _permanent(exc: BaseException) -> bool:
    """A request MLflow refused (4xx: bad value, no such run): retrying cannot help."""
    from mlflow.exceptions import MlflowException

    if not isinstance(exc, MlflowException):
        return False
    try:
        status = exc.get_http_status_code()
    except Exception:
        return False
    return 400 <= status < 500 and status != 429


def derived_key(*parts: str) -> str:
    """A run key that is the same each time it is derived from the same parts.

    The stage runs of a workflow are keyed by its journalled ``run_key`` and the
    stage's name, a trial's run by its stage run's key and the trial's id: the
    projector finds the run a key names instead of making a twin."""
    return PENDING + uuid.uuid5(uuid.NAMESPACE_URL, "/".join(parts)).hex


class Tracker:
    """Creates and fills MLflow runs for a workflow's stages and trials; every call
    may be repeated (see the module's docstring) and raises when MLflow fails."""

    def __init__(self, run_dir: Path, experiment: str, uri: str | None = None) -> None:
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "5")
        from mlflow.tracking import MlflowClient

        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.uri = uri or default_tracking_uri(self.run_dir)
        self.own_store = self.uri == default_tracking_uri(self.run_dir)
        if self.own_store:
            relocate_artifacts(self.run_dir)
        self.experiment = experiment
        if self.own_store:
            make_store(self.run_dir / STORE_FILE)
        self.client = MlflowClient(tracking_uri=self.uri)
        self._experiment_id: str | None = None
        self.keys: dict[str, str] = {}  # run key -> MLflow run id, as found or made

    @property
    def experiment_id(self) -> str:
        """The experiment's MLflow id; asks the server (and waits) if not known yet."""
        if self._experiment_id is None:
            existing = self.client.get_experiment_by_name(self.experiment)
            if existing is not None:
                self._experiment_id = existing.experiment_id
            else:
                artifacts = None
                if self.own_store:  # artifacts beside the store
                    artifacts = (self.run_dir / ARTIFACTS_DIR).resolve().as_uri()
                self._experiment_id = self.client.create_experiment(
                    self.experiment, artifact_location=artifacts)
        return self._experiment_id

    def start_run(
        self,
        name: str,
        *,
        parent: str | None = None,
        tags: Mapping[str, Any] | None = None,
        params: Mapping[str, Any] | None = None,
        key: str | None = None,
    ) -> str:
        """The run ``key`` names, created (nested under ``parent``) if there is none
        yet; returns its MLflow id."""
        from mlflow.entities import Param

        key = key or PENDING + uuid.uuid4().hex
        if key in self.keys:
            return self.keys[key]
        found = self.client.search_runs(
            [self.experiment_id], filter_string=f"tags.`{KEY_TAG}` = '{key}'", max_results=1)
        if found:
            run_id = found[0].info.run_id
        else:
            all_tags = {k: _param_value(v) for k, v in (tags or {}).items()}
            all_tags[KEY_TAG] = key
            if parent is not None:
                all_tags["mlflow.parentRunId"] = parent
            run_id = self.client.create_run(self.experiment_id, run_name=name,
                                            tags=all_tags).info.run_id
            if params:
                self.client.log_batch(run_id, params=[
                    Param(str(k), _param_value(v)) for k, v in params.items()])
        self.keys[key] = run_id
        return run_id

    def log_metrics(self, run_id: str, metrics: Mapping[str, Any], step: int = 0,
                    at: float | None = None) -> None:
        """Log the finite numeric metrics at ``at`` (unix seconds; now if None);
        NaN and infinities are kept as tags instead."""
        from mlflow.entities import Metric

        stamp = int((time.time() if at is None else at) * 1000)
        numbers, odd = [], {}
        for key, value in metrics.items():
            if isinstance(value, bool) or not isinstance(value, int | float):
                continue
            if math.isfinite(value):
                numbers.append(Metric(str(key), float(value), stamp, int(step)))
            else:
                odd[f"nestor.metric.{key}"] = str(value)
        if numbers:
            self.client.log_batch(run_id, metrics=numbers)
        self.set_tags(run_id, odd)

    def set_tags(self, run_id: str, tags: Mapping[str, Any]) -> None:
        from mlflow.entities import RunTag

        if tags:
            self.client.log_batch(run_id, tags=[RunTag(str(k), _param_value(v))
                                                for k, v in tags.items()])

    def log_artifact(self, run_id: str, path: Path, folder: str | None = None) -> None:
        if Path(path).is_file():
            self.client.log_artifact(run_id, str(Path(path).resolve()), folder)

    def finish(self, run_id: str, status: str, at: float | None = None) -> None:
        """End a run: FINISHED, FAILED or KILLED (MLflow's terminal states)."""
        self.client.set_terminated(run_id, status,
                                   end_time=int((time.time() if at is None else at) * 1000))

    def close(self) -> None:
        """Nothing is buffered here (the journal is); kept for symmetry with callers."""


def permanent(exc: BaseException) -> bool:
    """MLflow refused the request (4xx: a bad value, no such run): retrying cannot help."""
    return _permanent(exc)
