"""MLflow, written through one idempotent writer: the projector's.

One experiment per workflow, a parent run per stage and a nested run per
trial, all through ``MlflowClient`` (no global "active run" state). By
default the store is a SQLite file in the run directory, written by the
driver's projector thread alone (one writer: no "database is locked").

The journal is the truth; MLflow is a projection of it
(``orchestrator.projections.projector``). Every write here is safe to repeat, which is
what lets the projector replay events after an outage or a kill: a run is
created only if no run in the experiment carries its key (``nestor.key``;
the keys a store holds are read once per tracker, ``Tracker.resolve``),
a metric is logged with the timestamp of the event it comes from (MLflow
keeps one point per key, step, timestamp and value), tags and terminal
states are upserts, and an artifact is written to the same path.

On a network filesystem (NFS, Lustre, GPFS, BeeGFS, CephFS, ...: the run
directory's type read from ``/proc/mounts``) SQLite's file locks are not to
be trusted: Lustre mounted without ``flock`` refuses them ("disk I/O error"),
NFS may lose them. There the live store is kept on the driver's node-local
disk (``NESTOR_LOCAL_STORE_DIR``, else ``$TMPDIR``, else ``/tmp``) and a
consistent copy (SQLite's online backup, renamed into place whole) is put in
the run directory every ``SYNC_INTERVAL_S`` seconds, at every stage's end and
when the tracker closes. Beside that copy, ``mlflow.db.json`` records how far
the projector had got when it was taken; a driver that opens the store again
(``nestor resume``, on any node) starts from that copy and that position, so
what MLflow lacks is projected again from the journal, idempotently. Artifacts
stay in the run directory (plain files, one writer). Set
``NESTOR_MLFLOW_LOCAL_STORE`` to ``always`` or ``never`` to override the
detection, or ``tracking.uri`` to an MLflow server to have no file store at all.

Each call's wait is bounded (``MLFLOW_HTTP_REQUEST_MAX_RETRIES`` and
``MLFLOW_HTTP_REQUEST_TIMEOUT`` default to 0 and 5 s here instead of
MLflow's 7 retries and 120 s): a server that is down costs the projector a
short wait and a retry later, never the scheduling loop anything.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import json
import logging
import math
import os
import shutil
import tempfile
import threading
import time
import uuid
import weakref
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from nestor.orchestrator.journal.safe import inside_or_warn
from nestor.orchestrator.projections.cursor import read_cursor
from nestor.orchestrator.projections.mlflow_values import (
    KEY_TAG,
    metric_entities,
    param_value,
)

if TYPE_CHECKING:
    from nestor.orchestrator.projections.sql_store import SqlRunWriter

log = logging.getLogger(__name__)

STORE_FILE = "mlflow.db"  # a run directory's own MLflow store, unless the spec names one
ARTIFACTS_DIR = "mlartifacts"  # beside it, where that store keeps artifacts
ARTIFACTS_ROOT = "mlflow-artifacts:/"  # that store's artifact locations: relative to it
RUN_KEY_TAG = "nestor.run_key"  # the workflow run's key, on every run: what resolve reads
PAGE = 10_000  # runs per page of the one read that learns a store's run keys
# What one log_batch may carry (MLflow's limits: 100 params, 100 tags, 1,000 in all).
BATCH_LIMITS = {"params": 100, "tags": 100, "metrics": 800}
PENDING = "pending-"
PARALLEL_RUNS = 8  # a batch's runs written at once to a server (``Tracker.apply_all``)
SYNC_META = STORE_FILE + ".json"  # beside the run directory's copy: the cursor it matches
SYNC_INTERVAL_S = 30.0  # the run directory's copy of a node-local store lags by at most this
MOUNTS = Path("/proc/mounts")
# Filesystems on which SQLite's locking is unreliable or refused (kernel and FUSE names).
NETWORK_FILESYSTEMS = frozenset({
    "nfs", "nfs4", "lustre", "gpfs", "beegfs", "cifs", "smb3", "smbfs", "ceph", "fuse.ceph",
    "fuse.cephfs", "glusterfs", "fuse.glusterfs", "fuse.sshfs", "panfs", "pvfs2", "orangefs",
    "afs", "wekafs", "fuse.weka", "ocfs2", "gfs2", "fuse.gcsfuse", "fuse.s3fs", "9p",
})


def _unescape_mount(field: str) -> str:
    """/proc/mounts writes space, tab, newline and backslash as octal escapes."""
    for code, char in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"),
                       ("\\134", "\\")):
        field = field.replace(code, char)
    return field


def filesystem_type(path: Path, mounts: str | None = None) -> str:
    """The type of the filesystem ``path`` is on: the longest mount point in
    ``mounts`` (``/proc/mounts``' text; read when None) that contains it."""
    if mounts is None:
        try:
            mounts = MOUNTS.read_text()
        except OSError:
            return "unknown"
    target = Path(os.path.realpath(path))
    best, kind = -1, "unknown"
    for line in mounts.splitlines():
        fields = line.split()
        if len(fields) < 3:
            continue
        point = Path(_unescape_mount(fields[1]))
        if (target == point or point in target.parents) and len(point.parts) > best:
            best, kind = len(point.parts), fields[2]  # a later mount over the same point wins
    return kind


def on_network_filesystem(path: Path, mounts: str | None = None) -> bool:
    """Whether SQLite should not keep a store at ``path`` (see the module's docstring)."""
    override = os.environ.get("NESTOR_MLFLOW_LOCAL_STORE", "auto").lower()
    if override in {"always", "1", "yes"}:
        return True
    if override in {"never", "0", "no"}:
        return False
    return filesystem_type(path, mounts) in NETWORK_FILESYSTEMS


def local_store_path(run_dir: Path) -> Path:
    """Where a run directory on a network filesystem keeps its live store on this node."""
    base = os.environ.get("NESTOR_LOCAL_STORE_DIR") or tempfile.gettempdir()
    run = str(Path(run_dir).resolve())
    key = hashlib.sha256(run.encode()).hexdigest()[:16]
    return Path(base) / f"nestor-mlflow-{os.getuid()}" / f"{Path(run).name[:40]}-{key}" / STORE_FILE


def default_tracking_uri(run_dir: Path) -> str:
    """The URI of the store the driver writes for ``run_dir`` when the spec names none.

    On a network filesystem the first call in a process opens the node-local store
    (``LocalStore.open``): it starts from the run directory's copy, and the
    projector starts from that copy's position (``copy_cursor``) if it is behind
    the projector's own cursor."""
    if on_network_filesystem(run_dir):
        return f"sqlite:///{LocalStore.open(run_dir).live.resolve()}"
    return f"sqlite:///{(run_dir / STORE_FILE).resolve()}"


def artifact_location(run_dir: Path, uri: str) -> str:
    """Where the artifacts MLflow records at ``uri`` are on this machine.

    The run directory's own store records its artifacts as ``mlflow-artifacts:/``
    URIs (``ARTIFACTS_ROOT``), which name a place relative to an artifact root,
    not a path: the root is the run directory's ``mlartifacts/`` wherever the run
    directory now is (``nestor ui`` gives it to ``mlflow server`` as
    ``--artifacts-destination``; nestor writes there itself). A run directory moved
    or copied (scratch to project storage, the cluster to a laptop) keeps showing
    its artifacts, with nothing in the store rewritten. Other URIs are returned
    as they are."""
    if not uri.startswith(ARTIFACTS_ROOT):
        return uri
    place = uri[len(ARTIFACTS_ROOT):].lstrip("/")
    return (Path(run_dir).resolve() / ARTIFACTS_DIR / place).as_uri()


def list_artifacts(client: Any, run_dir: Path, run_id: str,
                   folder: str | None = None) -> list[Any]:
    """The artifacts of ``run_id`` under ``folder`` (MLflow's FileInfo), read where they
    are on this machine: MLflow's client alone cannot follow an ``mlflow-artifacts:/``
    location without a server (``nestor ui`` is one), so this reads the run directory's
    ``mlartifacts/`` for its own store, through MLflow's artifact repository."""
    from mlflow.store.artifact.artifact_repository_registry import get_artifact_repository

    uri = client.get_run(run_id).info.artifact_uri
    if not uri.startswith(ARTIFACTS_ROOT):
        return client.list_artifacts(run_id, folder)
    return get_artifact_repository(artifact_location(run_dir, uri)).list_artifacts(folder)


def copy_cursor(run_dir: Path) -> int | None:
    """Where the projector of ``run_dir``'s own store must start at the latest: the
    position of the copy its node-local store started from (once per process);
    None where the store is the run directory's file itself."""
    if not on_network_filesystem(run_dir):
        return None
    return LocalStore.open(run_dir).take_cursor()


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
    engine._nestor_pragmas = pragmas
    engine.dispose()  # connections opened before, without them
    return engine


def _put_whole(source: Path, target: Path) -> None:
    """Copy the file ``source`` to ``target`` by plain reads and writes (no SQLite,
    so no file locks on the network filesystem), written beside it and renamed
    over it: a reader (``nestor ui``) sees the old copy or the new, never half."""
    tmp = target.with_name(f".{target.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        shutil.copyfile(source, tmp)
        with open(tmp, "rb") as handle:
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)


def _snapshot(live: Path, target: Path) -> None:
    """A consistent copy of the SQLite file ``live`` (on local disk) at ``target``.

    SQLite's online backup reads committed pages only, so the projector may go
    on writing in its thread; the backup is made on local disk, then copied."""
    import sqlite3

    local = live.with_name(f".{live.name}.{os.getpid()}.{threading.get_ident()}.copy")
    try:
        with contextlib.closing(sqlite3.connect(f"{live.resolve().as_uri()}?mode=ro",
                                                uri=True, timeout=30)) as src, \
                contextlib.closing(sqlite3.connect(local)) as dst:
            src.backup(dst)
            dst.execute("PRAGMA journal_mode=DELETE")  # a copy that needs no -wal beside it
        _put_whole(local, target)
    finally:
        local.unlink(missing_ok=True)


class LocalStore:
    """A run directory's SQLite store kept on this node's disk, copied back whole.

    Opening it starts from the run directory's copy (or from nothing) and keeps
    where that copy was taken (``take_cursor``): the projector starts there, so
    whatever a copy on some node's disk held beyond it is projected again, from
    the journal."""

    _open: ClassVar[weakref.WeakValueDictionary[Path, LocalStore]] = \
        weakref.WeakValueDictionary()
    _open_lock: ClassVar[threading.Lock] = threading.Lock()

    @classmethod
    def open(cls, run_dir: Path) -> LocalStore:
        """The store for ``run_dir``: the one this process has open already (a second
        tracker must not start it afresh under the first one's feet), else a new one."""
        with cls._open_lock:
            live = local_store_path(run_dir)
            store = cls._open.get(live)
            if store is None:
                store = cls._open[live] = cls(run_dir)
                # A strong reference: the projector (and its tracker) may be gone by
                # exit, and the events it projected after the last copy with it.
                atexit.register(store.sync_at_exit)
            return store

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = Path(run_dir)
        self.live = local_store_path(self.run_dir)
        self.mirror = self.run_dir / STORE_FILE
        self.meta = self.run_dir / SYNC_META
        self.last_sync = time.monotonic()
        self._lock = threading.Lock()
        self.live.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        for stale in (self.live, self.live.with_name(self.live.name + "-journal"),
                      self.live.with_name(self.live.name + "-wal")):
            stale.unlink(missing_ok=True)
        cursor = 0
        if self.mirror.is_file():  # never written in place: a byte copy is consistent
            _put_whole(self.mirror, self.live)
            with contextlib.suppress(FileNotFoundError, ValueError):
                cursor = int(json.loads(self.meta.read_text()).get("cursor") or 0)
        self._copy_cursor: int | None = cursor  # the projector's start (take_cursor)
        log.info("MLflow store for %s (a %s filesystem) kept on local disk at %s",
                 self.run_dir, filesystem_type(self.run_dir), self.live)

    def take_cursor(self) -> int | None:
        """Where the projector must start on this store, once: the position its
        copy was taken at (None after the first call, when the live store holds
        what this process's projector wrote). The projector alone writes its
        cursor; it takes this one if it is behind its own."""
        cursor, self._copy_cursor = self._copy_cursor, None
        return cursor

    def sync(self) -> None:
        """Copy the live store into the run directory, with the cursor it matches."""
        from nestor.orchestrator.journal.journal import write_atomic

        with self._lock:
            if not self.live.is_file():
                return
            cursor = read_cursor(self.run_dir)  # read first: the copy holds at least this
            _snapshot(self.live, self.mirror)
            write_atomic(self.meta, json.dumps({
                "cursor": cursor, "copied_at": time.time(), "host": os.uname().nodename,
                "live": str(self.live)}))
            self.last_sync = time.monotonic()

    def sync_at_exit(self) -> None:
        try:
            self.sync()
        except Exception as exc:  # the next driver re-projects from the last copy
            log.warning("could not copy the MLflow store to %s at exit: %s", self.run_dir, exc)

    def maybe_sync(self, now: bool = False) -> None:
        if now or time.monotonic() - self.last_sync >= SYNC_INTERVAL_S:
            self.sync()


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
        from mlflow.store.artifact.artifact_repository_registry import get_artifact_repository

        uri = self._artifact_uris.get(run_id)
        if uri is None:
            uri = self._artifact_uris[run_id] = self.client.get_run(run_id).info.artifact_uri
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
