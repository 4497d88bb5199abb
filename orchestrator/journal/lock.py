"""One driver per run directory: an exclusive lock the kernel releases when it dies.

Two drivers on one run directory (two ``nestor resume`` of one interrupted run,
say) each appended to the journal: trials ran twice, ``seq`` numbers repeated,
MLflow runs doubled, and the journal could no longer be folded. ``run``,
``resume`` and ``sweep`` therefore hold :class:`RunLock` on ``RUN/.nestor.lock``
for as long as they drive the run. It is an ``flock``: released by the kernel
when the holding process exits, however it exits (SIGKILL included), so a killed
driver never leaves a stale lock behind. The file holds the holder's PID and
host, for the message a second driver exits with.

Readers (``status``, ``results``, ``ui``) take no lock: the journal is
append-only and they read only complete lines.

The lock is re-entrant within one process (:func:`hold` counts), so a command
that takes it before its run starts and the run path that takes it again share
one. It is an advisory lock on a local or NFSv4/Lustre file system; on a file
system without ``flock`` the lock is refused loudly rather than skipped.
"""

from __future__ import annotations

import errno
import fcntl
import os
import socket
import threading
from pathlib import Path

LOCK_FILE = ".nestor.lock"


class RunDirLocked(RuntimeError):
    """Another live driver holds the run directory; the message names it."""


class RunDirReadOnly(RunDirLocked):
    """The run directory cannot be written (a read-only mount, another user's files):
    no driver can go on with it there; readers still can."""


class RunLock:
    """The exclusive lock on one run directory, held by this process."""

    def __init__(self, run_dir: Path, fd: int) -> None:
        self.run_dir = run_dir
        self._fd = fd
        self._count = 1

    @property
    def held(self) -> bool:
        return self._fd >= 0

    def release(self) -> None:
        """Give up one hold; the lock goes when the last one is given up."""
        with _GUARD:
            self._count -= 1
            if self._count > 0 or self._fd < 0:
                return
            _HELD.pop(_key(self.run_dir), None)
            os.close(self._fd)  # closing the only descriptor releases the flock
            self._fd = -1

    def __enter__(self) -> RunLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


_GUARD = threading.Lock()
_HELD: dict[str, RunLock] = {}


def _key(run_dir: Path) -> str:
    return str(Path(run_dir).resolve())


def hold(run_dir: str | os.PathLike[str]) -> RunLock:
    """Take (or, if this process holds it already, share) the run directory's lock;
    :class:`RunDirLocked` naming the holder when another process has it.

    The directory must exist. The lock file is created private (0600) and never
    follows a link (a run directory is data: its ``.nestor.lock`` could be a link
    to a file of the user's, which must not be written)."""
    run_dir = Path(run_dir)
    with _GUARD:
        held = _HELD.get(_key(run_dir))
        if held is not None and held.held:
            held._count += 1
            return held
        path = run_dir / LOCK_FILE
        flags = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0)
        try:
            fd = os.open(path, flags, 0o600)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise RunDirLocked(f"{path} is a symbolic link; a run directory's lock file"
                                   " must be a plain file: remove the link") from None
            if exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
                raise RunDirReadOnly(
                    f"{run_dir} cannot be written ({exc.strerror}): nestor status and nestor"
                    " results read it as it is; to go on with the run, copy the directory"
                    " somewhere you can write and resume the copy") from None
            raise
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            holder = _holder(fd)
            os.close(fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise RunDirLocked(
                    f"{run_dir} is being run by another nestor driver ({holder}); one driver"
                    " per run directory: wait for it to end (nestor status shows its"
                    " progress) or stop it first"
                ) from None
            raise RunDirLocked(f"{run_dir}: the file system refused a lock ({exc.strerror});"
                               " run directories need a file system with flock") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()} on host {socket.gethostname()}\n".encode(), 0)
        lock = RunLock(run_dir, fd)
        _HELD[_key(run_dir)] = lock
        return lock


def _holder(fd: int) -> str:
    """Who holds the lock, as its holder wrote it (PID and host)."""
    try:
        text = os.pread(fd, 200, 0).decode(errors="replace").strip()
    except OSError:
        text = ""
    return text or "holder unknown"
