"""A run directory's SQLite store kept on the node's disk when the run directory is on
a network filesystem (``filesystems``), and copied back into it whole.

The live store is on the driver's node-local disk (``NESTOR_LOCAL_STORE_DIR``, else
``$TMPDIR``, else ``/tmp``); a consistent copy (SQLite's online backup, renamed into
place whole) is put in the run directory every ``SYNC_INTERVAL_S`` seconds, at every
stage's end and when the tracker closes. Beside that copy, ``mlflow.db.json`` records
how far the projector had got when it was taken; a driver that opens the store again
(``nestor resume``, on any node) starts from that copy and that position, so what
MLflow lacks is projected again from the journal, idempotently.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import json
import logging
import os
import shutil
import tempfile
import threading
import time
import weakref
from pathlib import Path
from typing import ClassVar

from nestor.orchestrator.projections.cursor import read_cursor
from nestor.orchestrator.projections.filesystems import filesystem_type, on_network_filesystem
from nestor.orchestrator.projections.store_paths import STORE_FILE

log = logging.getLogger(__name__)

SYNC_META = STORE_FILE + ".json"  # beside the run directory's copy: the cursor it matches
SYNC_INTERVAL_S = 30.0  # the run directory's copy of a node-local store lags by at most this


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


def copy_cursor(run_dir: Path) -> int | None:
    """Where the projector of ``run_dir``'s own store must start at the latest: the
    position of the copy its node-local store started from (once per process);
    None where the store is the run directory's file itself."""
    if not on_network_filesystem(run_dir):
        return None
    return LocalStore.open(run_dir).take_cursor()


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
