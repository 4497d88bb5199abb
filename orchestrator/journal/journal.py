"""The run's journal: an append-only, fsynced JSON-lines file of events.

The journal, not MLflow or memory, is the source of truth for what a
workflow has done: an event is written to the file before the driver goes
on, so a driver killed at any instant (SIGKILL included) can be resumed from
the journal without re-running a finished trial or losing a result; and it
is fsynced, many events per fsync (group commit), before anything outside the
driver acts on it. One writer (the driver) appends; anything may read.

A kill can tear the last line. Readers skip a torn tail, and a writer that
reopens the file cuts it off first, so every line stays one JSON object.

Each line ends with its checksum, a last field ``"crc"``: the CRC-32 of the line
as it would read without that field (``{...}``), so a byte changed on disk (a
flipped bit, an edit) is found by the reader, who stops with the file and line
rather than act on it. Lines written before checksums have none and are read as
they are (a journal may hold both: a run resumed by another version).
"""

from __future__ import annotations

import errno
import functools
import json
import os
import shutil
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nestor.durable import replace_durably
from nestor.orchestrator.journal.errors import (  # noqa: F401 (theirs to import from here)
    FULL_ERRNOS,
    DamagedRun,
    JournalError,
)

if TYPE_CHECKING:
    from nestor.orchestrator.journal.events import Event



def damaged_line(path: str | os.PathLike[str], number: int | str, what: str) -> JournalError:
    """The error for a journal line that is not as it was written: where, what, what to do."""
    cut = (f"keep only the lines before it (head -n {number - 1} journal.jsonl > kept.jsonl"
           " && mv kept.jsonl journal.jsonl)" if isinstance(number, int)
           else "keep only the lines before it")
    return JournalError(
        f"{path}: line {number} {what}: the journal is damaged. Restore it from a copy if"
        f" you have one; else {cut} and resume, which first checks it against the"
        " results in attempts/")


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
    return exc.errno in FULL_ERRNOS


def _complete_lines(data: bytes) -> tuple[list[bytes], int]:
    """Split into complete lines; returns them and the length they span."""
    end = data.rfind(b"\n") + 1
    return data[:end].splitlines(), end


def _count_events(path: Path) -> tuple[int, int, int]:
    """The complete non-empty lines (events) of the file, the length they span, and the
    file's length; streamed line by line: a resumed journal of a million events is
    hundreds of MiB, which read whole (and split) were most of a resume's memory."""
    events = end = length = 0
    with path.open("rb") as handle:
        for line in handle:
            length += len(line)
            if not line.endswith(b"\n"):
                break  # a torn tail: the last line
            end = length
            if not line.isspace():
                events += 1
    return events, end, length


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
        events.append(event_of(line, path, number))
    return events


def iter_events(path: str | os.PathLike[str], kinds: frozenset[str] | None = None,
                skip: Callable[[bytes], bool] | None = None) -> Iterator[dict[str, Any]]:
    """The complete events in order, read as they are needed (a journal of a million
    events is hundreds of MiB of dicts at once); with ``kinds``, only those, and a line
    of another kind is not even parsed (its kind is read from the line's start, where
    :meth:`Journal.append` writes it); nor is a line for which ``skip(line)`` is true.
    A torn last line is ignored."""
    if not Path(path).exists():
        return
    # Per line, as little as may be: a million-line journal runs this loop a million
    # times (the kind compared as bytes; a blank line found without copying it).
    # A line parsed has its checksum checked; one skipped unparsed does not (a resume
    # checks every line first: ``verify``), which keeps a filtered read as fast.
    wanted = None if kinds is None else frozenset(kind.encode() for kind in kinds)
    with Path(path).open("rb") as handle:
        for number, line in enumerate(handle, start=1):
            if line[-1:] != b"\n" or line.isspace():
                continue  # a torn tail (the last line), or an empty one
            if skip is not None and skip(line):
                continue
            if wanted is not None:
                found = kind_of_line(line)
                if found is not None and found[0] not in wanted:
                    continue
            event = event_of(line, path, number)
            if kinds is None or event["event"] in kinds:
                yield event


_KIND_MARK = b'"event":"'  # where Journal.append writes an event's kind: its first bytes


def kind_of_line(line: bytes) -> tuple[bytes, int] | None:
    """A journal line's kind, read without parsing the line, and the offset of the quote
    that closes it; None where the kind is not within the line's first 120 bytes, as
    :meth:`Journal.append` writes it (the line is then parsed whole)."""
    start = line.find(_KIND_MARK, 0, 120)
    if start < 0:
        return None
    start += len(_KIND_MARK)
    end = line.find(b'"', start)
    return line[start:end], end


_CRC_MARK = b',"crc":"'  # a line's last field: its checksum, 8 hex digits
_CRC_TAIL = len(_CRC_MARK) + 8 + 2  # ,"crc":"0123abcd"}


def with_crc(body: bytes) -> bytes:
    """A journal line (its JSON object ``body``, one line) with its checksum as its last
    field, and its newline: what :meth:`Journal.append` writes."""
    return b'%s,"crc":"%08x"}\n' % (body[:-1], zlib.crc32(body))


def checked(line: bytes) -> bytes | bool | None:
    """A line's JSON without its checksum, when its checksum matches; False when it
    has none (a line from before checksums: read as it is); None when the checksum
    does not match (the line changed since it was written)."""
    end = len(line) - (line[-1:] == b"\n")
    at = end - _CRC_TAIL
    if at < 0 or line[at:at + 8] != _CRC_MARK or line[end - 2:end] != b'"}':
        return False
    try:
        crc = int(line[at + 8:at + 16], 16)
    except ValueError:
        return None
    body = line[:at] + b"}"
    return body if zlib.crc32(body) == crc else None


def unsummed(line: bytes, path: str | os.PathLike[str], number: int | str) -> bytes:
    """Line ``number`` of the journal at ``path`` without its checksum, to parse (one
    from before checksums: as it is); JournalError if it does not match its checksum.
    (A byte changed in the ``"crc"`` key itself leaves the line as an old one: its
    content is whole, and its JSON is checked when it is parsed.)"""
    body = checked(line)
    if body is None:
        raise damaged_line(path, number, "does not match its checksum")
    return line if body is False else body  # type: ignore[return-value]


def event_of(line: bytes, path: str | os.PathLike[str], number: int | str,
             summed: bool = True) -> dict[str, Any]:
    """Line ``number`` of the journal at ``path``, parsed (JournalError: not an event,
    or not as it was written); ``summed=False``: its checksum was checked already."""
    if summed:
        line = unsummed(line, path, number)
    try:
        event = json.loads(line)
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise damaged_line(path, number, "is not a JSON event") from None
    if not isinstance(event, dict) or not isinstance(event.get("event"), str):
        raise damaged_line(path, number, "is not a journal event")
    return event


def verify(path: str | os.PathLike[str]) -> int:
    """Read every complete line of the journal at ``path`` as an event (its checksum,
    where it has one, instead of its JSON); returns how many. JournalError names the
    first damaged line."""
    count = 0
    if not Path(path).exists():
        return 0
    with Path(path).open("rb") as handle:
        for number, line in enumerate(handle, start=1):
            if line[-1:] != b"\n" or line.isspace():
                continue
            if unsummed(line, path, number) is line:  # no checksum: is it whole JSON?
                event_of(line, path, number, summed=False)
            count += 1
    return count


def write_atomic(path: Path, data: str) -> None:
    """Replace ``path`` with ``data`` all at once: a reader (or a resume after a
    kill) sees the old content or the new, never a mix (``nestor.durable``, which
    the ranks use for checkpoints and results too). A full disk is DiskFull."""
    payload = data.encode()
    try:
        replace_durably(path, lambda handle: handle.write(payload))
    except OSError as exc:
        if _full(exc):
            raise DiskFull(path, len(payload)) from None
        raise


# One encoder for every event, as json.dumps(record, separators=(",", ":"),
# default=str) would make afresh per call (its construction was a tenth of an append).
_ENCODE = json.JSONEncoder(separators=(",", ":"), allow_nan=True, default=str).encode


class Journal:
    """Appends events, and makes them durable many at a time (group commit).

    ``append`` writes the event to the file before it returns, so a killed
    driver (SIGKILL included) never loses it; a writer thread fsyncs whatever
    was written since its last fsync, so one fsync makes a whole group of
    events durable against a crash of the machine too. Whoever acts on an
    event outside the driver (a rank starting a trial, a checkpoint removed)
    first waits for it: :meth:`wait`, :meth:`sync`, or the callable
    :meth:`gate` returns, which a backend calls before a launched trial runs.
    ``on_append`` is told of each event once it is written (the projector then
    reads it from the file), ``on_durable`` once it is durable, and ``on_written``
    with the journal's length in bytes just after it, in journal order (the driver's
    fold snapshot, which must name the offset it covers).

    >>> with Journal(run_dir / "journal.jsonl") as journal:   # doctest: +SKIP
    ...     journal.append("trial_finished", stage="tune", trial="t3", value=0.97)
    ...     journal.sync()  # durable now: act on it
    """

    def __init__(self, path: str | os.PathLike[str],
                 on_append: Callable[[dict[str, Any]], None] | None = None, *,
                 fsync: bool = True,
                 on_durable: Callable[[dict[str, Any]], None] | None = None,
                 on_written: Callable[[dict[str, Any], int], None] | None = None,
                 new: bool = False) -> None:
        self.path = Path(path)
        self.on_append = on_append  # told of each event once it is written
        self.on_durable = on_durable  # ... and once it is durable
        self.on_written = on_written  # ... and, in order, with the bytes written so far
        # Off only where durability buys nothing: a simulation, rerun in seconds.
        self.fsync = fsync
        self.path.parent.mkdir(parents=True, exist_ok=True)
        created = not self.path.exists()
        # ``new``: a new run's journal, created exclusively (FileExistsError if another
        # driver made one meanwhile: never two writers, never another's file appended to).
        flags = os.O_RDWR | os.O_CREAT | os.O_APPEND | (os.O_EXCL if new else 0)
        self._fd = os.open(self.path, flags, 0o644)
        self._seq, end, length = _count_events(self.path)
        if end != length:  # a torn tail from a killed writer: cut it off
            os.ftruncate(self._fd, end)
            os.fsync(self._fd)
        self._size = end  # the file's length: where the next event goes
        if created:  # make the new file's directory entry durable too
            dir_fd = os.open(self.path.parent, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
        self._durable = self._seq  # events fsynced so far (all of them, once opened)
        self._unsynced: list[dict[str, Any]] = []  # written, not yet durable, in order
        self._error: OSError | None = None  # the writer's fsync failed: nothing more is durable
        self._closing = False
        self._cond = threading.Condition()  # waiters: an event became durable
        self._work = threading.Condition(self._cond)  # the writer: something to fsync
        self._idle = False  # the writer waits for work (so an append must wake it)
        self._writer: threading.Thread | None = None
        self.fsyncs = 0  # how many groups were made durable (one fsync each)

    @property
    def seq(self) -> int:
        """Number of events in the journal."""
        return self._seq

    @property
    def size(self) -> int:
        """The journal's length in bytes: where the next event goes."""
        return self._size

    @property
    def durable(self) -> int:
        """Number of events that are durable (fsynced, when fsync is on)."""
        return self._durable

    def append(self, event: str, **fields: Any) -> dict[str, Any]:
        """Write one event; it survives a kill of the driver once this returns, and
        a crash of the machine once :meth:`wait` for it returns."""
        record = {"time": time.time(), "event": event, **fields}
        with self._cond:
            self._raise_failed()
            record = {"seq": self._seq, **record}
            payload = with_crc(_ENCODE(record).encode("utf-8"))
            start = self._size
            written = 0
            try:
                while written < len(payload):
                    written += os.write(self._fd, payload[written:])
            except OSError as exc:
                if written:  # cut the half-written event off: the journal stays whole
                    os.ftruncate(self._fd, start)
                if _full(exc):
                    raise DiskFull(self.path, len(payload)) from None
                raise
            self._seq += 1
            self._size += len(payload)
            if self.on_written is not None:  # under the lock: in order, with its offset
                self.on_written(record, self._size)
            if self.fsync:
                self._unsynced.append(record)
                self._start_writer()
                if self._idle:
                    self._work.notify()
            else:
                self._durable = self._seq
        if self.on_append is not None:
            self.on_append(record)
        if not self.fsync and self.on_durable is not None:
            self.on_durable(record)
        return record

    def record(self, event: Event) -> dict[str, Any]:
        """Append a typed event (``orchestrator.journal.events``): the way the driver writes."""
        return self.append(event.kind, **event.fields())

    def wait(self, count: int | None = None, timeout: float | None = None) -> bool:
        """Block until the first ``count`` events (all written so far: None) are
        durable; False if ``timeout`` passed first. Raises the writer's error."""
        with self._cond:
            target = self._seq if count is None else count
            done = self._cond.wait_for(
                lambda: self._durable >= target or self._error is not None, timeout)
            if self._durable < target:
                self._raise_failed()
            return done

    def sync(self) -> None:
        """Everything appended so far is durable when this returns."""
        self.wait()

    def gate(self) -> Callable[[], None]:
        """A callable that returns once every event appended before this call is
        durable: a backend calls it, off the loop, before a launched trial runs."""
        return functools.partial(self.wait, self._seq)

    def events(self) -> Iterator[dict[str, Any]]:
        yield from read_events(self.path)

    def close(self) -> None:
        """Make every event durable, then close (the writer's error is raised)."""
        if self._fd < 0:
            return
        try:
            if self._error is None:
                self.sync()
        finally:
            with self._cond:
                self._closing = True
                self._work.notify()
            if self._writer is not None:
                self._writer.join()
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> Journal:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the writer thread: one fsync per group -----------------------------------------

    def _start_writer(self) -> None:
        if self._writer is None:
            self._writer = threading.Thread(target=self._write_groups, daemon=True,
                                            name=f"nestor-journal-{self.path.name}")
            self._writer.start()

    def _write_groups(self) -> None:
        """Fsync what was written since the last fsync, then release its waiters."""
        while True:
            with self._cond:
                self._idle = True
                self._work.wait_for(lambda: self._unsynced or self._closing)
                self._idle = False
                if not self._unsynced:
                    return
                group = len(self._unsynced)
            try:
                os.fsync(self._fd)
            except OSError as exc:
                with self._cond:
                    self._error = DiskFull(self.path, 0) if _full(exc) else exc
                    self._cond.notify_all()
                return
            with self._cond:
                records = self._unsynced[:group]
                del self._unsynced[:group]
                self._durable += group
                self.fsyncs += 1
                self._cond.notify_all()
            if self.on_durable is not None:
                for record in records:
                    self.on_durable(record)

    def _raise_failed(self) -> None:
        if self._error is not None:
            raise self._error
