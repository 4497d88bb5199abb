"""Many trials' runs in one transaction of MLflow's own SQL store.

Through MLflow's public client a trial's run costs a create, a ``log_batch`` and
its end: three transactions, about 40 SQL statements and some 13 ms of Python,
which caps a trivial trial's projection at a few hundred events a second. MLflow
has no call that writes several runs at once. For the store nestor owns (the run
directory's SQLite file) the projector therefore writes a batch of trials'
runs through MLflow's own store: its ``SqlAlchemyStore`` session and its ORM
models (``SqlRun``, ``SqlTag``, ``SqlParam``, ``SqlMetric``, ``SqlLatestMetric``),
filled as MLflow's ``create_run``, ``log_batch`` and ``update_run_info`` fill
them, all in one transaction: no SQL written here, and what a run holds is what
the client would have made (the UI shows it the same, nested under its stage).

Idempotent as the client path is: a run that exists (its key known) gets its
tags upserted, only the metric points it lacks, its latest metrics kept as
MLflow keeps them (highest step, then time, then value), and its end state; a
transaction that fails leaves nothing behind and the batch is sent again.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

CHUNK = 500  # run ids per ``IN (...)`` when reading the runs a batch touches again


class SqlRunWriter:
    """Writes ``RunWrites`` of trial runs, a batch per transaction, into the SQL store
    at ``uri`` (MLflow's ``SqlAlchemyStore`` for it; the engine is MLflow's own,
    shared with the client and its pragmas)."""

    def __init__(self, uri: str) -> None:
        from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

        self.store = SqlAlchemyStore(uri, default_artifact_root=str(Path.cwd()))

    def write(self, experiment_id: str, batch: Iterable[Any], keys: dict[str, str],
              extra_tags: Mapping[str, str]) -> list[tuple[str, str]]:
        """Make each run of ``batch`` (``RunWrites``, parents resolved to run ids) show
        its writes, in one transaction; runs found by ``keys`` (key -> run id) are
        updated, the others made and added to ``keys`` once committed.
        ``extra_tags`` go on every run made. Returns (run id, artifact URI) per
        write, in order, for its files."""
        from mlflow.store.tracking.dbmodels.models import SqlExperiment, SqlRun
        from sqlalchemy.orm import selectinload

        batch = list(batch)
        made: dict[str, str] = {}
        out: list[tuple[str, str]] = []
        with self.store.ManagedSessionMaker(read_only=False) as session:
            location = session.get(SqlExperiment, int(experiment_id)).artifact_location
            known = sorted({keys[w.key] for w in batch if w.key in keys})
            runs: dict[str, Any] = {}
            points: set[tuple[Any, ...]] = set()
            for n in range(0, len(known), CHUNK):
                ids = known[n:n + CHUNK]
                for run in (session.query(SqlRun).filter(SqlRun.run_uuid.in_(ids))
                            .options(selectinload(SqlRun.tags),
                                     selectinload(SqlRun.latest_metrics))):
                    runs[run.run_uuid] = run
                points |= _points(session, ids)
            for writes in batch:
                run_id = keys.get(writes.key) or made.get(writes.key)
                if run_id is None:
                    run = _new_run(writes, experiment_id, location, extra_tags)
                    session.add(run)
                    run_id = made[writes.key] = run.run_uuid
                    runs[run_id] = run
                run = runs.get(run_id)
                if run is None:  # as log_batch on a run that is gone: refused
                    from mlflow.exceptions import MlflowException
                    from mlflow.protos.databricks_pb2 import RESOURCE_DOES_NOT_EXIST

                    raise MlflowException(f"Run {run_id!r} must exist, but it is gone",
                                          RESOURCE_DOES_NOT_EXIST)
                _update(session, run, writes, points)
                out.append((run_id, run.artifact_uri))
        keys |= made  # committed: the runs exist
        return out


def _points(session: Any, run_ids: list[str]) -> set[tuple[Any, ...]]:
    """The metric points the runs ``run_ids`` hold (MLflow's primary key of a point)."""
    from mlflow.store.tracking.dbmodels.models import SqlMetric

    rows = session.query(SqlMetric.run_uuid, SqlMetric.key, SqlMetric.timestamp,
                         SqlMetric.step, SqlMetric.value).filter(
        SqlMetric.run_uuid.in_(run_ids))
    return {tuple(row) for row in rows}


def _new_run(writes: Any, experiment_id: str, location: str,
             extra_tags: Mapping[str, str]) -> Any:
    """A run as MLflow's ``create_run`` makes it (a new id, its name tag, RUNNING),
    with its params and the tags it is made with."""
    from mlflow.entities import RunStatus, SourceType
    from mlflow.entities.lifecycle_stage import LifecycleStage
    from mlflow.store.tracking.dbmodels.models import SqlParam, SqlRun, SqlTag
    from mlflow.utils.mlflow_tags import MLFLOW_PARENT_RUN_ID, MLFLOW_RUN_NAME
    from mlflow.utils.uri import append_to_uri_path

    from orchestrator.projections.tracking import KEY_TAG, _param_value

    run_id = uuid.uuid4().hex
    tags = {str(k): _param_value(v) for k, v in writes.create_tags.items()}
    tags |= dict(extra_tags)
    tags[KEY_TAG] = writes.key
    tags[MLFLOW_RUN_NAME] = writes.name
    if writes.parent is not None:
        tags[MLFLOW_PARENT_RUN_ID] = writes.parent
    begun = writes.start_time
    run = SqlRun(name=writes.name, run_uuid=run_id, experiment_id=int(experiment_id),
                 artifact_uri=append_to_uri_path(location, run_id, "artifacts"),
                 source_type=SourceType.to_string(SourceType.UNKNOWN), source_name="",
                 entry_point_name="", user_id="unknown",
                 status=RunStatus.to_string(RunStatus.RUNNING),
                 start_time=None if begun is None else int(begun * 1000), end_time=None,
                 deleted_time=None, source_version="",
                 lifecycle_stage=LifecycleStage.ACTIVE)
    run.tags = [SqlTag(key=k, value=v) for k, v in tags.items()]
    run.params = [SqlParam(key=str(k), value=_param_value(v))
                  for k, v in writes.params.items()]
    return run


def _update(session: Any, run: Any, writes: Any, points: set[tuple[Any, ...]]) -> None:
    """Add ``writes``' tags, metric points and end to ``run`` as ``log_batch`` and
    ``set_terminated`` would: tags upserted, a point already there not added again."""
    from mlflow.entities.lifecycle_stage import LifecycleStage
    from mlflow.exceptions import MlflowException
    from mlflow.protos.databricks_pb2 import INVALID_PARAMETER_VALUE
    from mlflow.store.tracking.dbmodels.models import SqlLatestMetric, SqlMetric, SqlTag

    from orchestrator.projections.tracking import _metrics, _param_value

    if run.lifecycle_stage != LifecycleStage.ACTIVE:
        raise MlflowException(f"The run {run.run_uuid} must be active, but it is deleted",
                              INVALID_PARAMETER_VALUE)
    numbers, odd = [], {}
    for values, step, at in writes.metrics:
        found, strange = _metrics(values, step, at)
        numbers += found
        odd |= strange
    have = {tag.key: tag for tag in run.tags}
    for key, value in (writes.tags | odd).items():
        text = _param_value(value)
        if key in have:
            have[key].value = text
        else:
            have[key] = SqlTag(key=str(key), value=text)
            run.tags.append(have[key])
    latest = {metric.key: metric for metric in run.latest_metrics}
    for metric in numbers:
        point = (run.run_uuid, metric.key, metric.timestamp, metric.step, metric.value)
        if point in points:
            continue
        points.add(point)
        session.add(SqlMetric(run_uuid=run.run_uuid, key=metric.key, value=metric.value,
                              timestamp=metric.timestamp, step=metric.step, is_nan=False))
        old = latest.get(metric.key)
        if old is None:
            latest[metric.key] = SqlLatestMetric(
                key=metric.key, value=metric.value, timestamp=metric.timestamp,
                step=metric.step, is_nan=False)
            run.latest_metrics.append(latest[metric.key])
        elif (metric.step, metric.timestamp, metric.value) > (old.step, old.timestamp,
                                                                old.value):
            old.value, old.timestamp, old.step = metric.value, metric.timestamp, metric.step
            old.is_nan = False
    if writes.end is not None:
        status, at = writes.end
        run.status, run.end_time = status, int(at * 1000)
