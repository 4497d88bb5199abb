"""Many trials' runs in one transaction of MLflow's own SQL store.

Through MLflow's public client a trial's run costs a create, a ``log_batch`` and
its end: three transactions, about 40 SQL statements and some 13 ms of Python,
which caps a trivial trial's projection at a few hundred events a second. MLflow
has no call that writes several runs at once. For the store nestor owns (the run
directory's SQLite file) the projector therefore writes a batch of trials'
runs through MLflow's own store: its ``SqlAlchemyStore`` session and its ORM
models (``SqlRun``, ``SqlTag``, ``SqlParam``, ``SqlMetric``, ``SqlLatestMetric``),
filled as MLflow's ``create_run``, ``log_batch`` and ``update_run_info`` fill
them, all in one transaction, a statement per table (SQLAlchemy Core's
``executemany`` insert into those models' tables, and the ORM's bulk update by
primary key: no SQL text written here, and no unit of work per object, which
costs as much as the client; the ORM's bulk insert alone, which checks each row
against its model in Python, cost as much as SQLite's own work). What a run
holds is what the client would have made: the UI shows it the same, nested
under its stage.

Idempotent as the client path is: a run that exists (its key known) gets its
tags upserted, only the metric points it lacks, its latest metrics kept as
MLflow keeps them (highest step, then time, then value), and its end state; a
transaction that fails leaves nothing behind and the batch is sent again.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

CHUNK = 500  # run ids per ``IN (...)`` when reading the runs a batch touches again


def ordered_run_id() -> str:
    """A new run's id: 32 hex digits as MLflow's own, but begun by the time in
    microseconds (then 72 random bits), so that ids made later sort later.

    Every index of MLflow's run tables holds ``run_uuid``; random ids (MLflow's
    ``uuid4``) put each new run's rows on a random page of each index, so a
    batch dirties (and at 100,000 runs reads back from disk) a page per row
    and index, and the rate falls as the store grows. Ids in time order put
    them at the indexes' ends: a few pages a batch, the same at any size.
    Strictly increasing within a process (two runs in one microsecond: the next)."""
    global _last_stamp
    with _stamp_lock:
        _last_stamp = max(time.time_ns() // 1000, _last_stamp + 1)
        stamp = _last_stamp
    return f"{stamp:014x}{uuid.uuid4().hex[:18]}"


_last_stamp = 0
_stamp_lock = threading.Lock()


class SqlRunWriter:
    """Writes ``RunWrites`` of trial runs, a batch per transaction, into the SQL store
    at ``uri`` (MLflow's ``SqlAlchemyStore`` for it; the engine is MLflow's own,
    shared with the client and its pragmas)."""

    def __init__(self, uri: str) -> None:
        from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

        self.store = SqlAlchemyStore(uri, default_artifact_root=str(Path.cwd()))
        self._locations: dict[str, str] = {}  # experiment id -> its artifact location

    def write(self, experiment_id: str, batch: Iterable[Any], keys: dict[str, str],
              extra_tags: Mapping[str, str]) -> list[tuple[str, str]]:
        """Make each run of ``batch`` (``RunWrites``, parents resolved to run ids) show
        its writes, in one transaction; runs found by ``keys`` (key -> run id) are
        updated, the others made and added to ``keys`` once committed.
        ``extra_tags`` go on every run made. Returns (run id, artifact URI) per
        write, in order, for its files."""
        from mlflow.store.tracking.dbmodels.models import SqlExperiment

        batch = list(batch)
        rows = _Rows()
        with self.store.ManagedSessionMaker(read_only=False) as session:
            location = self._locations.get(experiment_id)
            if location is None:  # it never changes: read once, not once a batch
                location = session.get(SqlExperiment, int(experiment_id)).artifact_location
            rows.read(session, sorted({keys[w.key] for w in batch if w.key in keys}))
            made: dict[str, str] = {}
            out = []
            for writes in batch:
                run_id = keys.get(writes.key) or made.get(writes.key)
                if run_id is None:
                    run_id = made[writes.key] = rows.new_run(writes, experiment_id,
                                                             location, extra_tags)
                out.append((run_id, rows.update(run_id, writes)))
            rows.flush(session)
        keys |= made  # committed: the runs exist
        self._locations[experiment_id] = location
        return out


class _Rows:
    """What one batch reads of the runs it touches again, and the rows it writes:
    a list of rows per MLflow model, inserted or updated in one statement each."""

    def __init__(self) -> None:
        self.runs: dict[str, dict[str, Any]] = {}  # run id -> its row's columns
        self.tags: dict[tuple[str, str], str] = {}  # (run, key) -> value, as stored
        self.latest: dict[tuple[str, str], tuple[Any, ...]] = {}  # (run, key) -> point
        self.points: set[tuple[Any, ...]] = set()
        self.insert: dict[str, list[dict[str, Any]]] = {
            "runs": [], "tags": [], "params": [], "metrics": [], "latest": []}
        self.new_tags: dict[tuple[str, str], dict[str, Any]] = {}
        self.changed_tags: dict[tuple[str, str], dict[str, Any]] = {}
        self.new_latest: dict[tuple[str, str], dict[str, Any]] = {}
        self.changed_latest: dict[tuple[str, str], dict[str, Any]] = {}
        self.ended: dict[str, dict[str, Any]] = {}
        self.made: set[str] = set()  # the runs this batch inserts

    def read(self, session: Any, run_ids: list[str]) -> None:
        """The runs ``run_ids`` as the store holds them: their state, tags, metric
        points and latest metrics (a query per model per ``CHUNK`` runs)."""
        from mlflow.store.tracking.dbmodels.models import (
            SqlLatestMetric,
            SqlMetric,
            SqlRun,
            SqlTag,
        )

        for n in range(0, len(run_ids), CHUNK):
            ids = run_ids[n:n + CHUNK]
            for run_id, stage, uri in session.query(
                    SqlRun.run_uuid, SqlRun.lifecycle_stage, SqlRun.artifact_uri).filter(
                    SqlRun.run_uuid.in_(ids)):
                self.runs[run_id] = {"lifecycle_stage": stage, "artifact_uri": uri}
            for run_id, key, value in session.query(
                    SqlTag.run_uuid, SqlTag.key, SqlTag.value).filter(SqlTag.run_uuid.in_(ids)):
                self.tags[(run_id, key)] = value
            self.points |= {tuple(row) for row in session.query(
                SqlMetric.run_uuid, SqlMetric.key, SqlMetric.timestamp, SqlMetric.step,
                SqlMetric.value).filter(SqlMetric.run_uuid.in_(ids))}
            for run_id, key, step, stamp, value in session.query(
                    SqlLatestMetric.run_uuid, SqlLatestMetric.key, SqlLatestMetric.step,
                    SqlLatestMetric.timestamp, SqlLatestMetric.value).filter(
                    SqlLatestMetric.run_uuid.in_(ids)):
                self.latest[(run_id, key)] = (step, stamp, value)

    def new_run(self, writes: Any, experiment_id: str, location: str,
                extra_tags: Mapping[str, str]) -> str:
        """A run as MLflow's ``create_run`` makes it (a new id, its name tag, RUNNING),
        with its params and the tags it is made with; returns its id."""
        from mlflow.entities import RunStatus, SourceType
        from mlflow.entities.lifecycle_stage import LifecycleStage
        from mlflow.utils.mlflow_tags import MLFLOW_PARENT_RUN_ID, MLFLOW_RUN_NAME
        from mlflow.utils.uri import append_to_uri_path

        from nestor.orchestrator.projections.mlflow_values import KEY_TAG, param_value

        run_id = ordered_run_id()
        begun = writes.start_time
        row = {"run_uuid": run_id, "name": writes.name, "experiment_id": int(experiment_id),
               "artifact_uri": append_to_uri_path(location, run_id, "artifacts"),
               "source_type": SourceType.to_string(SourceType.UNKNOWN), "source_name": "",
               "entry_point_name": "", "user_id": "unknown",
               "status": RunStatus.to_string(RunStatus.RUNNING),
               "start_time": None if begun is None else int(begun * 1000), "end_time": None,
               "deleted_time": None, "source_version": "",
               "lifecycle_stage": LifecycleStage.ACTIVE}
        self.insert["runs"].append(row)
        self.made.add(run_id)
        self.runs[run_id] = row
        tags = {str(k): param_value(v) for k, v in writes.create_tags.items()}
        tags |= dict(extra_tags)
        tags[KEY_TAG] = writes.key
        tags[MLFLOW_RUN_NAME] = writes.name
        if writes.parent is not None:
            tags[MLFLOW_PARENT_RUN_ID] = writes.parent
        self._tags(run_id, tags)
        self.insert["params"] += [{"run_uuid": run_id, "key": str(k), "value": param_value(v)}
                                  for k, v in writes.params.items()]
        return run_id

    def _tags(self, run_id: str, tags: Mapping[str, str]) -> None:
        for key, value in tags.items():
            at = (run_id, key)
            row = {"run_uuid": run_id, "key": key, "value": value}
            if at in self.new_tags:
                self.new_tags[at] = row
            elif at in self.tags:
                if self.tags[at] != value:
                    self.changed_tags[at] = row
            else:
                self.new_tags[at] = row

    def update(self, run_id: str, writes: Any) -> str:
        """Add ``writes``' tags, metric points and end to the run ``run_id`` as
        ``log_batch`` and ``set_terminated`` would: tags upserted, a point already
        there not added again, the latest metric as MLflow keeps it. Returns the
        run's artifact URI."""
        from mlflow.entities.lifecycle_stage import LifecycleStage
        from mlflow.exceptions import MlflowException
        from mlflow.protos.databricks_pb2 import INVALID_PARAMETER_VALUE, RESOURCE_DOES_NOT_EXIST

        from nestor.orchestrator.projections.mlflow_values import metric_entities, param_value

        run = self.runs.get(run_id)
        if run is None:  # as log_batch on a run that is gone: refused
            raise MlflowException(f"Run {run_id!r} must exist, but it is gone",
                                  RESOURCE_DOES_NOT_EXIST)
        if run["lifecycle_stage"] != LifecycleStage.ACTIVE:
            raise MlflowException(f"The run {run_id} must be active, but it is deleted",
                                  INVALID_PARAMETER_VALUE)
        numbers: list[Any] = []
        odd: dict[str, str] = {}
        for values, step, at in writes.metrics:
            found, strange = metric_entities(values, step, at)
            numbers += found
            odd |= strange
        self._tags(run_id, {str(k): param_value(v) for k, v in (writes.tags | odd).items()})
        for metric in numbers:
            point = (run_id, metric.key, metric.timestamp, metric.step, metric.value)
            if point in self.points:
                continue
            self.points.add(point)
            self.insert["metrics"].append({
                "run_uuid": run_id, "key": metric.key, "value": metric.value,
                "timestamp": metric.timestamp, "step": metric.step, "is_nan": False})
            at, newer = (run_id, metric.key), (metric.step, metric.timestamp, metric.value)
            if at in self.latest and newer <= self.latest[at]:
                continue
            row = {"run_uuid": run_id, "key": metric.key, "value": metric.value,
                   "timestamp": metric.timestamp, "step": metric.step, "is_nan": False}
            (self.changed_latest if at in self.latest and at not in self.new_latest
             else self.new_latest)[at] = row
            self.latest[at] = newer
        if writes.end is not None:
            status, at = writes.end
            run["status"], run["end_time"] = status, int(at * 1000)
            if run_id not in self.made:  # a run made here is inserted ended
                self.ended[run_id] = {"run_uuid": run_id, "status": status,
                                      "end_time": int(at * 1000)}
        return str(run["artifact_uri"])

    def flush(self, session: Any) -> None:
        """Everything gathered, a statement per model and kind (runs before the rows
        that name them)."""
        from mlflow.store.tracking.dbmodels.models import (
            SqlLatestMetric,
            SqlMetric,
            SqlParam,
            SqlRun,
            SqlTag,
        )
        from sqlalchemy import insert, update

        for model, rows in ((SqlRun, self.insert["runs"]), (SqlTag, list(self.new_tags.values())),
                            (SqlParam, self.insert["params"]),
                            (SqlMetric, self.insert["metrics"]),
                            (SqlLatestMetric, list(self.new_latest.values()))):
            if rows:
                session.execute(insert(model.__table__), rows)
        for model, rows in ((SqlTag, list(self.changed_tags.values())),
                            (SqlLatestMetric, list(self.changed_latest.values())),
                            (SqlRun, list(self.ended.values()))):
            if rows:
                session.execute(update(model), rows)
