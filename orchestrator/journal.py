"""The run's journal: an append-only, fsynced JSON-lines file of events.

The journal, not MLflow or memory, is the source of truth for what a
workflow has done: an event counts only once it is on disk, so a driver
killed at any instant (SIGKILL included) can be resumed from the journal
without re-running a finished trial or losing a result. One writer (the
driver) appends; anything may read.

A kill can tear the last line. Readers skip a torn tail, and a writer that
reopens the file cuts it off first, so every line stays one JSON object.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from orchestrator.events import Event


class JournalError(RuntimeError):
    """The journal cannot be read as a sequence of events (not just a torn tail)."""


class DiskFull(OSError):
    """The disk holding the run directory is full: the driver must stop, the journal
    is left whole (a half-written event is cut off), and `nestor resume` goes on
    once there is space again."""

    def __init__(self, path: Path, needed: int) -> None:
        self.path = Path(path)
        self.needed = needed
        try:
            self.free = shutil.disk_usage(self.path.parent).free
        except OSError:
            self.free = 0
        super().__init__(errno.ENOSPC, self.message(), str(path))

    def message(self) -> str:
        return (
            f"the disk holding {self.path.parent} is full ({self.free} bytes free) and"
            f" {self.path.name} needs at least {self.needed} more bytes"
        )

    def __str__(self) -> str:
        return self.message()


def disk_full_message(exc: OSError, run_dir: Path | None) -> str | None:
    """What to tell the user when the driver stopped on a full disk (None: not that)."""
    if not _full(exc):
        return None
    if not isinstance(exc, DiskFull):
        exc = DiskFull(Path(exc.filename or run_dir or "."), 0)
    where = run_dir or next((p for p in exc.path.parents if (p / "spec.yaml").exists()),
                            exc.path.parent)
    return (
        f"{exc}. The driver stopped; finished trials are in the journal. Free some space"
        f" there, then continue with: nestor resume {where}"
    )


def _full(exc: OSError) -> bool:
    return exc.errno in (errno.ENOSPC, errno.EDQUOT)


def _complete_lines(data: bytes) -> tuple[list[bytes], int]:
    """Split into complete lines; returns them and the length they span."""
    end = data.rfind(b"\n") + 1
    return data[:end].splitlines(), end


def read_events(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """All complete events in order; a torn last line is ignored."""
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        return []
    lines, _ = _complete_lines(data)
    events = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            event = json.loads(line)
        except json.JSONDecodeError as exc:
            raise JournalError(f"{path}:{number}: not a JSON event ({exc.msg})") from None
        if not isinstance(event, dict) or "event" not in event:
            raise JournalError(f"{path}:{number}: not a journal event: {line[:80]!r}")
        events.append(event)
    return events


def write_atomic(path: Path, data: str) -> None:
    """Replace ``path`` with ``data`` all at once: a reader (or a resume after a
    kill) sees the old content or the new, never a mix (trainers.durable, which
    the ranks use for checkpoints and results). A full disk is DiskFull."""
    from trainers.durable import replace_durably

    payload = data.encode()
    try:
        replace_durably(path, lambda handle: handle.write(payload))
    except OSError as exc:
        if _full(exc):
            raise DiskFull(path, len(payload)) from None
        raise


class Journal:
    """Appends events durably: written, flushed and fsynced before append returns.

    >>> with Journal(run_dir / "journal.jsonl") as journal:   # doctest: +SKIP
    ...     journal.append("trial_finished", stage="tune", trial="t3", value=0.97)
    """

    def __init__(self, path: str | os.PathLike[str],
                 on_append: Callable[[dict[str, Any]], None] | None = None, *,
                 fsync: bool = True) -> None:
        self.path = Path(path)
        self.on_append = on_append  # told of each event once it is on disk
        # Off only where durability buys nothing: a simulation, rerun in seconds.
        self.fsync = fsync
        self.path.parent.mkdir(parents=True, exist_ok=True)
        created = not self.path.exists()
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        data = self.path.read_bytes()
        lines, end = _complete_lines(data)
        if end != len(data):  # a torn tail from a killed writer: cut it off
            os.ftruncate(self._fd, end)
            os.fsync(self._fd)
        self._seq = sum(1 for line in lines if line.strip())
        if created:  # make the new file's directory entry durable too
            dir_fd = os.open(self.path.parent, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)

    @property
    def seq(self) -> int:
        """Number of events in the journal."""
        return self._seq

    def append(self, event: str, **fields: Any) -> dict[str, Any]:
        record = {"seq": self._seq, "time": time.time(), "event": event, **fields}
        line = json.dumps(record, separators=(",", ":"), allow_nan=True, default=str) + "\n"
        payload = line.encode("utf-8")
        start = os.lseek(self._fd, 0, os.SEEK_END)
        written = 0
        try:
            while written < len(payload):
                written += os.write(self._fd, payload[written:])
            if self.fsync:
                os.fsync(self._fd)
        except OSError as exc:
            if written:  # cut the half-written event off: the journal stays whole
                os.ftruncate(self._fd, start)
            if _full(exc):
                raise DiskFull(self.path, len(payload)) from None
            raise
        self._seq += 1
        if self.on_append is not None:
            self.on_append(record)
        return record

    def record(self, event: Event) -> dict[str, Any]:
        """Append a typed event (``orchestrator.events``): the way the driver writes."""
        return self.append(event.kind, **event.fields())

    def events(self) -> Iterator[dict[str, Any]]:
        yield from read_events(self.path)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> Journal:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
