"""MLflow, written through one idempotent writer: the projector's.

One experiment per workflow, a parent run per stage and a nested run per
trial, all through ``MlflowClient`` (no global "active run" state). By
default the store is a SQLite file in the run directory, written by the
driver's projector alone (one writer: no "database is locked"; it runs in a
process of its own, ``projector_process``).

The journal is the truth; MLflow is a projection of it
(``orchestrator.projections.projector``). Every write here is safe to repeat, which is
what lets the projector replay events after an outage or a kill: a run is
created only if no run in the experiment carries its key (``nestor.key``;
the keys a store holds are read once per tracker, ``Tracker.resolve``),
a metric is logged with the timestamp of the event it comes from (MLflow
keeps one point per key, step, timestamp and value), tags and terminal
states are upserts, and an artifact is written to the same path.

On a network filesystem the live store is kept on the driver's node-local disk and
copied back whole (``local_store``, ``filesystems``); a new store is a copy of a schema
built once (``store_schema``); where the store and its artifacts are, ``store_paths``.

Each call's wait is bounded (``MLFLOW_HTTP_REQUEST_MAX_RETRIES`` and
``MLFLOW_HTTP_REQUEST_TIMEOUT`` default to 0 and 5 s here instead of
MLflow's 7 retries and 120 s): a server that is down costs the projector a
short wait and a retry later, never the scheduling loop anything.
"""

from __future__ import annotations

import logging
import math
import os
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nestor.orchestrator.journal.safe import inside_or_warn
from nestor.orchestrator.projections.filesystems import on_network_filesystem
from nestor.orchestrator.projections.local_store import LocalStore, default_tracking_uri
from nestor.orchestrator.projections.mlflow_values import (
    KEY_TAG,
    metric_entities,
    param_value,
)
from nestor.orchestrator.projections.store_paths import (
    ARTIFACTS_ROOT,
    STORE_FILE,
    artifact_location,
    copy_artifact,
    list_artifacts,
)
from nestor.orchestrator.projections.store_schema import make_store, sqlite_file, sqlite_pragmas

if TYPE_CHECKING:
    from nestor.orchestrator.projections.sql_store import SqlRunWriter

log = logging.getLogger(__name__)

RUN_KEY_TAG = "nestor.run_key"  # the workflow run's key, on every run: what resolve reads
PAGE = 10_000  # runs per page of the one read that learns a store's run keys
# What one log_batch may carry (MLflow's limits: 100 params, 100 tags, 1,000 in all).
BATCH_LIMITS = {"params": 100, "tags": 100, "metrics": 800}
PENDING = "pending-"
PARALLEL_RUNS = 8  # a batch's runs written at once to a server (``Tracker.apply_all``)


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


@dataclass
class RunWrites:
    """What some journal events ask of one (nested) run, gathered so that they
    cost it as few requests as its state allows (``Tracker.apply``): tags and
    metrics in event order (a later tag wins), its end last."""

    name: str
    key: str
    parent: str | None = None
    start_time: float | None = None
    create_tags: dict[str, Any] = field(default_factory=dict)  # only where it is made
    params: dict[str, Any] = field(default_factory=dict)  # where it is made, again where found
    tags: dict[str, Any] = field(default_factory=dict)
    metrics: list[tuple[Mapping[str, Any], int, float]] = field(default_factory=list)
    artifacts: list[tuple[Path, str | None]] = field(default_factory=list)
    end: tuple[str, float] | None = None  # MLflow's terminal status, when


class _NoDbTracebacks(logging.Filter):
    """MLflow logs each SQL transaction that fails for the database's sake (locked,
    disk full) with its traceback, then raises it; the projector retries the write
    and says so in one line. On a full disk that was thousands of traceback lines."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.exc_info and str(record.msg).startswith("SQLAlchemy database error"))


def _quiet_db_errors() -> None:
    logger = logging.getLogger("mlflow.store.db.utils")
    if not any(isinstance(f, _NoDbTracebacks) for f in logger.filters):
        logger.addFilter(_NoDbTracebacks())


class Tracker:
    """Creates and fills MLflow runs for a workflow's stages and trials; every call
    may be repeated (see the module's docstring) and raises when MLflow fails."""

    def __init__(self, run_dir: Path, experiment: str, uri: str | None = None) -> None:
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "5")
        # MLflow's client prints two "View run/experiment at" lines for each run it
        # ends on a server (and asks the server for the run once more to do so): a
        # sweep's thousands of runs would bury the run's own output. `nestor ui`
        # and the run's summary say where MLflow is, once.
        os.environ["MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT"] = "true"
        from mlflow.tracking import MlflowClient

        _quiet_db_errors()
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.uri = uri or default_tracking_uri(self.run_dir)
        self.own_store = self.uri == default_tracking_uri(self.run_dir)
        self.local: LocalStore | None = None
        if self.own_store and on_network_filesystem(self.run_dir):
            self.local = LocalStore.open(self.run_dir)
        db = self.local.live if self.local else self.run_dir / STORE_FILE
        self.experiment = experiment
        shared = None if self.own_store else sqlite_file(self.uri)
        if self.own_store:
            make_store(db)
        elif shared is not None and shared.parent.is_dir():  # built whole, under a lock
            make_store(shared)
        self._stage_runs: set[str] = set()  # runs without a parent: their end is a sync point
        self._engine = None
        if self.own_store:
            self._engine = sqlite_pragmas(self.uri, "PRAGMA journal_mode=WAL",
                                          "PRAGMA synchronous=NORMAL")
        self.client = MlflowClient(tracking_uri=self.uri)
        self._sql: SqlRunWriter | None = None  # the own store: many runs a transaction
        if self.own_store:
            from nestor.orchestrator.projections.sql_store import SqlRunWriter

            self._sql = SqlRunWriter(self.uri)
        self._experiment_id: str | None = None
        self._made_experiment = False
        self._resolved = False
        self.keys: dict[str, str] = {}  # run key -> MLflow run id, as found or made
        self._artifact_uris: dict[str, str] = {}  # run id -> its artifact URI, as recorded
        self.run_key: str | None = None  # the workflow run's (tags every run made)
        self._pool: Any = None  # the threads that write a batch's runs to a server

    @property
    def experiment_id(self) -> str:
        """The experiment's MLflow id; asks the server (and waits) if not known yet."""
        if self._experiment_id is None:
            existing = self.client.get_experiment_by_name(self.experiment)
            if existing is not None:
                self._experiment_id = existing.experiment_id
            else:
                artifacts = None
                if self.own_store:  # artifacts beside the store, wherever it is moved
                    artifacts = ARTIFACTS_ROOT
                try:
                    self._experiment_id = self.client.create_experiment(
                        self.experiment, artifact_location=artifacts)
                    self._made_experiment = True
                except Exception as exc:  # a shared store: another run made it meanwhile
                    found = self._raced_experiment(exc)
                    if found is None:
                        raise
                    self._experiment_id = found
        return self._experiment_id

    def _raced_experiment(self, exc: Exception) -> str | None:
        """The experiment another run created between this one's look and its create
        (MLflow refuses the second create: RESOURCE_ALREADY_EXISTS), or None."""
        from mlflow.exceptions import MlflowException

        if not isinstance(exc, MlflowException) or exc.error_code != "RESOURCE_ALREADY_EXISTS":
            return None
        existing = self.client.get_experiment_by_name(self.experiment)
        return None if existing is None else existing.experiment_id

    def resolve(self, run_key: str | None = None) -> None:
        """Learn the runs this store holds already, in one paged read: after it, a
        run's key is looked up here, never searched for in MLflow once per run (a
        filtered scan whose cost grows with the store).

        A new experiment holds nothing: no read at all. The run directory's own
        store holds one workflow run's runs (and runs of any nestor version) and is
        read whole; an experiment shared with other runs (a server) only for the
        runs tagged with ``run_key``."""
        if self._resolved:
            return
        self._resolved = True
        run_key = run_key or self.run_key  # read again (``unsure``): the same runs
        if self._new_experiment():
            return
        query = None if self.own_store or run_key is None else (
            f"tags.`{RUN_KEY_TAG}` = '{run_key}'")
        token = None
        while True:
            page = self.client.search_runs([self.experiment_id], filter_string=query or "",
                                           max_results=PAGE, page_token=token)
            for run in page:
                key = run.data.tags.get(KEY_TAG)
                if key and key not in self.keys:
                    self.keys[key] = run.info.run_id
            token = page.token
            if not token:
                return

    def unsure(self) -> None:
        """A write failed without an answer (a timeout, a server gone in the middle):
        a run it asked for may have been made all the same. A server's runs are read
        again (``resolve``, once, before the retry), so the retry finds such a run by
        its key instead of making its twin; runs of a batch in flight at once make
        this likelier than one at a time. The run directory's own store loses a
        failed transaction whole: nothing to learn there."""
        if self._sql is None:
            self._resolved = self._made_experiment = False  # made here or not: read it

    def _new_experiment(self) -> bool:
        """Whether this tracker made its experiment (so it holds no run yet)."""
        _ = self.experiment_id
        return self._made_experiment

    def start_run(
        self,
        name: str,
        *,
        parent: str | None = None,
        tags: Mapping[str, Any] | None = None,
        params: Mapping[str, Any] | None = None,
        key: str | None = None,
        metrics: Sequence[Any] = (),
        start_time: float | None = None,
    ) -> str:
        """The run ``key`` names, created (nested under ``parent``, begun at
        ``start_time``) if there is none yet, with its tags, params and ``metrics``
        (``mlflow.entities.Metric``) in two requests; returns its MLflow id. A run
        that exists is returned as it is."""
        key = key or PENDING + uuid.uuid4().hex
        if key in self.keys:
            return self.keys[key]
        self.resolve()  # a tracker used without the projector: learn the store once
        if key in self.keys:
            return self.keys[key]
        all_tags = {k: param_value(v) for k, v in (tags or {}).items()}
        all_tags[KEY_TAG] = key
        if self.run_key is not None:
            all_tags[RUN_KEY_TAG] = self.run_key
        if parent is not None:
            all_tags["mlflow.parentRunId"] = parent
        begun = None if start_time is None else int(start_time * 1000)
        run_id = self.client.create_run(self.experiment_id, run_name=name, tags=all_tags,
                                        start_time=begun).info.run_id
        self.keys[key] = run_id
        self.write(run_id, params=params, metrics=metrics)
        if parent is None:
            self._stage_runs.add(run_id)
        self._synced()
        return run_id

    def apply(self, writes: RunWrites) -> str:
        """Make the run ``writes.key`` names show ``writes``: created with all of it
        if it is new (create, one log_batch), else its tags and metrics added; then
        its files, then its end. Returns its MLflow id."""
        numbers, odd = [], {}
        for values, step, at in writes.metrics:
            found, strange = metric_entities(values, step, at)
            numbers += found
            odd |= strange
        tags = writes.tags | odd
        self.resolve()
        run_id = self.keys.get(writes.key)
        if run_id is None:
            run_id = self.start_run(writes.name, parent=writes.parent, key=writes.key,
                                    tags=writes.create_tags | tags, params=writes.params,
                                    metrics=numbers, start_time=writes.start_time)
        else:  # params again (the same values: MLflow takes them): a run found may have
            # been made by a create whose answer was lost, or a driver killed after it
            self.write(run_id, params=writes.params, metrics=numbers, tags=tags)
        for path, folder in writes.artifacts:
            self.log_artifact(run_id, path, folder)
        if writes.end is not None:
            self.finish(run_id, *writes.end)
        else:
            self._synced()
        return run_id

    @property
    def bulk(self) -> bool:
        """Whether ``apply_all`` writes a batch in one transaction."""
        return self._sql is not None

    def apply_all(self, batch: Sequence[RunWrites]) -> None:
        """``apply`` each of ``batch``: into the run directory's own SQLite store all in
        one transaction (``orchestrator.projections.sql_store``), elsewhere run by run,
        ``PARALLEL_RUNS`` runs at a time.

        A server answers one request in a round trip of milliseconds to tenths of
        a second, most of it waiting; a trial's run is three requests (create,
        ``log_batch``, end) that must go in order, but the runs of a batch are
        independent (each is the only writer of its run, its stage run made
        before), so their requests overlap. A run that fails raises after the
        others are written; the batch is sent again, idempotently."""
        if self._sql is None:
            self.resolve()
            _ = self.experiment_id  # asked once, not by every thread at once
            if len(batch) < 2:
                for writes in batch:
                    self.apply(writes)
                return
            from concurrent.futures import ThreadPoolExecutor, wait

            if self._pool is None:
                self._pool = ThreadPoolExecutor(PARALLEL_RUNS,
                                                thread_name_prefix="nestor-mlflow-write")
            writing = [self._pool.submit(self.apply, writes) for writes in batch]
            wait(writing)  # all of them: none may still write when the batch is sent again
            for each in writing:
                each.result()  # the first failure, if any
            return
        self.resolve()
        extra = {RUN_KEY_TAG: self.run_key} if self.run_key is not None else {}
        places = self._sql.write(self.experiment_id, batch, self.keys, extra)
        for writes, (run_id, artifact_uri) in zip(batch, places, strict=True):
            self._artifact_uris[run_id] = artifact_uri
            for path, folder in writes.artifacts:
                self.log_artifact(run_id, path, folder)
        self._synced()

    def write(self, run_id: str, *, params: Mapping[str, Any] | None = None,
              metrics: Sequence[Any] = (), tags: Mapping[str, Any] | None = None) -> None:
        """Params, ``mlflow.entities.Metric``s and tags in as few ``log_batch``
        requests as MLflow's limits allow (one, for a trial's)."""
        from mlflow.entities import Param, RunTag

        kinds = {"params": [Param(str(k), param_value(v)) for k, v in (params or {}).items()],
                 "tags": [RunTag(str(k), param_value(v)) for k, v in (tags or {}).items()],
                 "metrics": list(metrics)}
        requests = max(math.ceil(len(items) / BATCH_LIMITS[kind]) for kind, items in kinds.items())
        for n in range(requests):
            self.client.log_batch(run_id, **{
                kind: items[n * BATCH_LIMITS[kind]:(n + 1) * BATCH_LIMITS[kind]]
                for kind, items in kinds.items()})

    def log_metrics(self, run_id: str, metrics: Mapping[str, Any], step: int = 0,
                    at: float | None = None) -> None:
        """Log the finite numeric metrics at ``at`` (unix seconds; now if None);
        NaN and infinities are kept as tags instead."""
        numbers, odd = metric_entities(metrics, step, at)
        self.write(run_id, metrics=numbers, tags=odd)
        self._synced()

    def set_tags(self, run_id: str, tags: Mapping[str, Any]) -> None:
        self.write(run_id, tags=tags)

    def list_artifacts(self, run_id: str, folder: str | None = None) -> list[Any]:
        """The run's artifacts under ``folder``, wherever the store keeps them
        (:func:`list_artifacts`)."""
        return list_artifacts(self.client, self.run_dir, run_id, folder)

    def log_artifact(self, run_id: str, path: Path, folder: str | None = None) -> None:
        """Copy the file ``path`` into the run's artifacts (under ``folder``); into the
        run directory's ``mlartifacts/`` for its own store (``artifact_location``).
        Only a file inside the run directory, links resolved: what is copied here is
        served by ``nestor ui``, and the paths come from the journal (``inside``)."""
        place = inside_or_warn(self.run_dir, os.path.abspath(path), "artifact")
        if place is None or not place.is_file():
            return
        if not self.own_store:
            self.client.log_artifact(run_id, str(place), folder)
            return
        uri = self._artifact_uris.get(run_id)
        if uri is None:
            uri = self._artifact_uris[run_id] = self.client.get_run(run_id).info.artifact_uri
        if uri.startswith(ARTIFACTS_ROOT):
            copy_artifact(self.run_dir, uri, place, folder)
            return
        from mlflow.store.artifact.artifact_repository_registry import get_artifact_repository

        repository = get_artifact_repository(artifact_location(self.run_dir, uri))
        repository.log_artifact(str(place), folder)

    def finish(self, run_id: str, status: str, at: float | None = None) -> None:
        """End a run: FINISHED, FAILED or KILLED (MLflow's terminal states)."""
        self.client.set_terminated(run_id, status,
                                   end_time=int((time.time() if at is None else at) * 1000))
        self._synced(now=run_id in self._stage_runs)  # a stage's end: copy it now

    def _synced(self, now: bool = False) -> None:
        """Where the store is on local disk, copy it to the run directory when due."""
        if self.local is not None:
            self.local.maybe_sync(now)

    def durable(self) -> None:
        """Make what MLflow took so far survive a power cut, not only a kill: the
        projector calls this before its cursor moves (a WAL store's commits are
        synced at its checkpoints)."""
        if self._engine is not None:
            with self._engine.connect() as connection:
                connection.exec_driver_sql("PRAGMA wal_checkpoint(PASSIVE)")

    def close(self) -> None:
        """Nothing is buffered here (the journal is); the store is checkpointed, and
        one kept on local disk is copied to the run directory."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        if self._engine is not None:
            self._engine.dispose()  # the last connection's close checkpoints the WAL
        if self.local is not None:
            self.local.sync()


def permanent(exc: BaseException) -> bool:
    """MLflow refused the request (4xx: a bad value, no such run): retrying cannot help."""
    return _permanent(exc)
