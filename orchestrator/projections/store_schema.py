"""A new SQLite MLflow store, made whole: its schema built once per MLflow version.

MLflow builds a store's schema in a dozen migrations (seconds of CPU, at the start of
a run, against the scheduling loop), and a driver killed in the middle of them leaves
a store MLflow cannot open. So the schema is built once (``schema_template``) and each
store is a copy of it, renamed into place under a lock. The connection settings the
projector writes with (``sqlite_pragmas``) are here too.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

def schema_template(version: str | None = None) -> Path:
    """Where a new store's schema, built once per MLflow version, is kept for copying
    (``NESTOR_CACHE_DIR``, else ``$XDG_CACHE_HOME/nestor`` or ``~/.cache/nestor``)."""
    if version is None:
        from mlflow.version import VERSION as version
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
    template = schema_template()
    tmp = db.with_name(f".{db.name}.{os.getpid()}.tmp")
    tmp.unlink(missing_ok=True)
    if template.is_file():
        shutil.copyfile(template, tmp)
        _default_artifacts_here(tmp)
    else:
        _build_schema(tmp)
        with contextlib.suppress(OSError):  # no cache (read-only home): each store builds
            template.parent.mkdir(parents=True, exist_ok=True)
            spare = template.with_name(f".{template.name}.{os.getpid()}.tmp")
            shutil.copyfile(tmp, spare)
            os.replace(spare, template)
    with open(tmp, "rb") as handle:
        os.fsync(handle.fileno())
    os.replace(tmp, db)


def _build_schema(path: Path) -> None:
    """MLflow's own creation of a store at ``path``: its migrations, then closed."""
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{path.resolve()}"
    # No fsync per migration (seconds on a busy disk): the file is synced once, whole.
    engine = sqlite_pragmas(uri, "PRAGMA synchronous=OFF")
    client = MlflowClient(tracking_uri=uri)
    client.search_experiments(max_results=1)  # the schema exists once this answers
    if engine is not None:
        engine.dispose()


def _default_artifacts_here(path: Path) -> None:
    """Give the copied template's Default experiment the artifact location MLflow gives
    it when it builds a store here (``./mlruns`` of this directory), not the template's."""
    import sqlite3

    with contextlib.closing(sqlite3.connect(path)) as connection, connection:
        connection.execute("UPDATE experiments SET artifact_location = ?"
                           " WHERE experiment_id = 0", (str(Path.cwd() / "mlruns" / "0"),))


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
