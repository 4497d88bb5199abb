"""The schema nestor ships for its pinned MLflow is the one MLflow's migrations build,
and a store made from it is one MLflow opens and writes without migrating."""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path

import pytest

from nestor.orchestrator.projections import store_schema
from nestor.orchestrator.projections.store_schema import (
    build_by_migrations,
    make_store,
    mlflow_version,
    shipped_schema,
)
from nestor.orchestrator.projections.tracking import Tracker

TABLE_CONSTRAINT = ("CONSTRAINT ", "CHECK ", "CHECK(", "FOREIGN KEY", "PRIMARY KEY", "UNIQUE ")


def comparable(sql: str) -> str:
    """A table's SQL with its table constraints in one order. MLflow's migrations
    rebuild tables (alembic's batch mode) and write a table's constraints in an order
    that changes from one Python process to the next (set order, by hash seed):
    ``runs`` gets its two named CHECKs either way. The columns keep their order."""
    lines = [line.strip().rstrip(",").strip() for line in sql.split("\n")]
    kept = [line for line in lines if not line.startswith(TABLE_CONSTRAINT)]
    return "\n".join(kept + sorted(line for line in lines if line.startswith(TABLE_CONSTRAINT)))


def contents(db: Path) -> tuple[list[tuple], dict[str, list[tuple]]]:
    """A store's schema (every table, index and trigger as SQLite holds it) and rows,
    the Default experiment's location and times aside (they are where and when)."""
    with contextlib.closing(sqlite3.connect(db)) as connection:
        schema = sorted((kind, name, table, comparable(sql)) for kind, name, table, sql in
                        connection.execute("SELECT type, name, tbl_name, COALESCE(sql, '')"
                                           " FROM sqlite_master"))
        rows = {}
        for (table,) in connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'"
                                           " AND name NOT LIKE 'sqlite_%'"):
            if table == "experiments":
                query = ("SELECT experiment_id, name, lifecycle_stage, workspace"
                         " FROM experiments")
            else:
                query = f'SELECT * FROM "{table}"'
            rows[table] = sorted(connection.execute(query), key=repr)
    return schema, rows


def test_nestor_ships_the_schema_of_the_mlflow_it_pins() -> None:
    assert shipped_schema() is not None, (
        f"no schema shipped for MLflow {mlflow_version()}: run scripts/mlflow_schema.py")


def test_the_shipped_schema_is_what_mlflows_migrations_build(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("NESTOR_CACHE_DIR", str(tmp_path / "cache"))
    migrated = tmp_path / "migrated.db"
    build_by_migrations(migrated)
    (tmp_path / "run").mkdir()
    shipped = tmp_path / "run" / "mlflow.db"
    make_store(shipped)
    schema, rows = contents(shipped)
    assert (schema, rows) == contents(migrated)
    assert len(schema) > 100 and rows["alembic_version"]  # a whole schema, at its head
    assert not (tmp_path / "cache").exists()  # made from the shipped SQL: nothing cached


def test_a_store_made_from_the_shipped_schema_is_written_without_migrating(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import mlflow.store.db.utils as db_utils

    def migrating(engine: object) -> None:
        raise AssertionError("a store made from the shipped schema ran MLflow's migrations")

    monkeypatch.setattr(db_utils, "_upgrade_db", migrating)
    monkeypatch.setenv("NESTOR_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    tracker = Tracker(tmp_path / "run", "demo")
    run = tracker.start_run("tune", key="k")
    tracker.client.log_metric(run, "score", 0.5, step=3)
    assert tracker.client.get_run(run).data.metrics == {"score": 0.5}
    default = tracker.client.get_experiment("0")  # as MLflow makes it here and now
    assert default.artifact_location == str(tmp_path / "mlruns" / "0")
    assert default.creation_time > 0


def test_an_mlflow_nestor_ships_no_schema_for_gets_its_migrations(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(store_schema, "SCHEMAS", tmp_path / "none")
    assert shipped_schema() is None
    monkeypatch.setenv("NESTOR_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    make_store(tmp_path / "mlflow.db")
    assert store_schema.schema_template().is_file()  # built by the migrations, kept
    build_by_migrations(tmp_path / "migrated.db")
    assert contents(tmp_path / "mlflow.db") == contents(tmp_path / "migrated.db")
