"""A new SQLite MLflow store, made whole, without running MLflow's migrations.

MLflow builds a store's schema in a dozen migrations (1.6 s of CPU here, at the
start of a run, against Ray's start and the scheduling loop), and a driver killed in
the middle of them leaves a store MLflow cannot open. So for the MLflow nestor pins,
the schema those migrations build ships with nestor as SQL (``mlflow_schemas/``,
written by ``scripts/mlflow_schema.py`` from MLflow's own migrations; a test checks
it against them), which SQLite runs in milliseconds. For any other MLflow version
the schema is built once by its migrations (``schema_template``) and each store is
a copy of it. Either way the store is made in a file of its own and renamed into
place under a lock. The connection settings the projector writes with
(``sqlite_pragmas``) are here too.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

SCHEMAS = Path(__file__).with_name("mlflow_schemas")  # the schemas nestor ships, by version


def mlflow_version() -> str:
    from mlflow.version import VERSION

    return str(VERSION)


def shipped_schema(version: str | None = None) -> Path | None:
    """The SQL of a new store's schema that nestor ships for this MLflow version
    (None: none for it, and the store is built by MLflow's migrations)."""
    path = SCHEMAS / f"mlflow-{version or mlflow_version()}.sql"
    return path if path.is_file() else None


def schema_template(version: str | None = None) -> Path:
    """Where a new store's schema, built once per MLflow version, is kept for copying
    (``NESTOR_CACHE_DIR``, else ``$XDG_CACHE_HOME/nestor`` or ``~/.cache/nestor``)."""
    version = version or mlflow_version()
    root = os.environ.get("NESTOR_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "nestor")
    return Path(root) / "mlflow-schema" / f"mlflow-{version}.db"


def make_store(db: Path) -> None:
    """Create a run directory's SQLite store all at once, if it has none.

    MLflow builds a new store's schema in a dozen migrations (alembic): seconds of
    CPU in the driver's process, at the start of the run, when they compete with the
    scheduling loop for its cores and its GIL. So the schema is built once per MLflow
    version (``schema_template``) and each new store is a copy of it. A driver killed
    in the middle of a migration (its first seconds) would leave a store MLflow
    cannot open again ("duplicate column name"): the template and each store are
    built in a file of their own and renamed into place, whole.

    Under a lock on a file beside it (``store_lock``): several drivers that first use
    one new shared store (``tracking.uri: sqlite:///...``) at once would otherwise
    each build it, MLflow's migrations racing in one file ("table _alembic_tmp_...
    already exists") or one driver's store renamed over another's runs."""
    if db.exists():
        return
    with store_lock(db):
        if not db.exists():  # another driver made it while this one waited
            _make_store(db)


@contextlib.contextmanager
def store_lock(db: Path) -> Iterator[None]:
    """An exclusive ``flock`` on ``<db>.lock`` (made if missing; released when the
    process dies) for making the store ``db``. Where the filesystem refuses
    locks (Lustre without ``flock``), nothing is held: a shared SQLite store there
    is unsafe anyway (module docstring)."""
    import fcntl

    path = db.with_name(db.name + ".lock")
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except PermissionError:  # another user's store: a lock read-only is a lock
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError as exc:
            log.warning("cannot lock %s (%s): making the store %s without a lock", path,
                        exc.strerror, db)
        yield
    finally:
        os.close(fd)  # the lock goes with it


def sqlite_file(uri: str) -> Path | None:
    """The file of a ``sqlite:///`` store URI (``sqlite:////abs.db``, ``sqlite:///rel.db``);
    None for any other store (a server, a database, an in-memory SQLite)."""
    if not uri.startswith("sqlite:///"):
        return None
    name = uri[len("sqlite:///"):].split("?")[0]
    return Path(name) if name and name != ":memory:" else None


def _make_store(db: Path) -> None:
    version = mlflow_version()
    template = schema_template(version)
    shipped = shipped_schema(version)
    tmp = db.with_name(f".{db.name}.{os.getpid()}.tmp")
    tmp.unlink(missing_ok=True)
    if shipped is not None:
        with contextlib.closing(sqlite3.connect(tmp)) as connection:
            connection.executescript(shipped.read_text())
        _default_artifacts_here(tmp)
    elif template.is_file():
        shutil.copyfile(template, tmp)
        _default_artifacts_here(tmp)
    else:
        build_by_migrations(tmp)
        with contextlib.suppress(OSError):  # no cache (read-only home): each store builds
            template.parent.mkdir(parents=True, exist_ok=True)
            spare = template.with_name(f".{template.name}.{os.getpid()}.tmp")
            shutil.copyfile(tmp, spare)
            os.replace(spare, template)
    with open(tmp, "rb") as handle:
        os.fsync(handle.fileno())
    os.replace(tmp, db)


def build_by_migrations(path: Path) -> None:
    """A new store at ``path`` built as MLflow builds one: by its migrations, then
    closed."""
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{path.resolve()}"
    # No fsync per migration (seconds on a busy disk): the file is synced once, whole.
    engine = sqlite_pragmas(uri, "PRAGMA synchronous=OFF")
    client = MlflowClient(tracking_uri=uri)
    client.search_experiments(max_results=1)  # the schema exists once this answers
    if engine is not None:
        engine.dispose()


def _default_artifacts_here(path: Path) -> None:
    """Give the new store's Default experiment what MLflow gives it when it builds a
    store here and now: the artifact location ``./mlruns/0`` of this directory and
    the time, not the template's or the shipped schema's."""
    now = int(time.time() * 1000)
    with contextlib.closing(sqlite3.connect(path)) as connection, connection:
        connection.execute("UPDATE experiments SET artifact_location = ?, creation_time = ?,"
                           " last_update_time = ? WHERE experiment_id = 0",
                           (str(Path.cwd() / "mlruns" / "0"), now, now))


def dump_schema(db: Path) -> str:
    """The SQL that makes a new store like ``db`` (a store MLflow's migrations just
    built): its tables, indexes and rows, with the Default experiment's location and
    times left for ``_default_artifacts_here`` to fill."""
    with contextlib.closing(sqlite3.connect(db)) as connection:
        with connection:
            connection.execute("UPDATE experiments SET artifact_location = '',"
                               " creation_time = 0, last_update_time = 0"
                               " WHERE experiment_id = 0")
        return "\n".join(connection.iterdump()) + "\n"


def sqlite_pragmas(uri: str, *pragmas: str) -> Any:
    """Have every connection MLflow opens to the SQLite store ``uri`` run ``pragmas``
    first; returns MLflow's engine for it (None where MLflow has none to hook).

    Settings of the connection, not writes to MLflow's tables: the run directory's
    own store is written in WAL mode with ``synchronous=NORMAL`` (MLflow's own bulk
    import does the same, with no sync at all): a commit costs no fsync, and the
    projector makes MLflow's writes durable (``Tracker.durable``) before its cursor
    says they are done. On a busy disk that is 4 to 5 times the events a second."""
    try:
        from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore
        from sqlalchemy import event

        engine = SqlAlchemyStore._get_or_create_engine(uri)
    except Exception as exc:  # an MLflow without the hook: its defaults, slower
        log.debug("cannot set SQLite pragmas on %s: %s", uri, exc)
        return None
    if getattr(engine, "_nestor_pragmas", None) == pragmas:
        return engine

    def setup(connection: Any, _record: Any) -> None:
        cursor = connection.cursor()
        for pragma in pragmas:
            cursor.execute(pragma)
        cursor.close()

    event.listen(engine, "connect", setup)
    engine._nestor_pragmas = pragmas  # type: ignore[attr-defined]  # a mark of ours on it
    engine.dispose()  # connections opened before, without them
    return engine
