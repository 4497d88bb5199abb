"""results.json, written with an index of where each stage's trials lie in it.

A million-event sweep's results.json is about 200 MiB, nearly all of it the
stages' ``trials`` lists (a record per trial); ``nestor results`` shows each
stage's summary, product and cost, which read a trial list only for a few kinds
of stage. So the driver writes ``results.index.json`` beside it: the byte range
of each stage's trial list, the file's size and a digest of every byte outside
those ranges. :func:`read_results` with ``lazy=True`` parses the rest alone and
gives each stage a :class:`LazyTrials` that parses its own range the first time
anything reads it; an index that does not match the file (an older run, a
results.json rewritten or edited since) is ignored and the whole file is read.

results.json itself is unchanged JSON: anything else reads it whole as before.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from nestor.orchestrator.journal.journal import write_atomic

INDEX_SUFFIX = ".index.json"
VERSION = 1
_HOLE = "\x00nestor-trials-{}\x00"  # where a stage's trials go, while the rest is dumped


def index_path(path: Path) -> Path:
    return path.with_name(path.stem + INDEX_SUFFIX)


def write_results(path: Path, results: dict[str, Any], indent: int | None = None) -> None:
    """results.json (atomically), then its index: the index is checked against the
    file, so one left stale by a kill between the two is ignored."""
    stages = results.get("stages") or []
    head = {**results, "stages": [
        {**stage, "trials": _HOLE.format(i)} if isinstance(stage.get("trials"), list) else stage
        for i, stage in enumerate(stages)]}
    text = json.dumps(head, indent=indent, default=str)
    parts: list[bytes] = []
    ranges: list[tuple[int, int, int]] = []  # stage, start, end
    digest = hashlib.sha1()
    at, size = 0, 0
    encoded = text.encode()
    for i, stage in enumerate(stages):
        if not isinstance(stage.get("trials"), list):
            continue
        hole = json.dumps(_HOLE.format(i)).encode()
        where = encoded.find(hole, at)
        parts.append(encoded[at:where])
        digest.update(encoded[at:where])
        size += where - at
        trials = json.dumps(stage["trials"], indent=indent, default=str).encode()
        ranges.append((i, size, size + len(trials)))
        parts.append(trials)
        size += len(trials)
        at = where + len(hole)
    parts.append(encoded[at:])
    digest.update(encoded[at:])
    size += len(encoded) - at
    write_atomic(path, b"".join(parts).decode())
    write_atomic(index_path(path), json.dumps({
        "version": VERSION, "size": size, "digest": digest.hexdigest(), "trials": ranges}))


def read_results(path: Path, lazy: bool = False) -> dict[str, Any]:
    """results.json's data; ``lazy``: each stage's trials parsed when first read (if
    the index matches the file; else everything now)."""
    if lazy:
        head = _read_head(path)
        if head is not None:
            return head
    return json.loads(path.read_bytes())


def _read_head(path: Path) -> dict[str, Any] | None:
    try:
        index = json.loads(index_path(path).read_bytes())
        if index.get("version") != VERSION or path.stat().st_size != index["size"]:
            return None
        ranges = [(int(i), int(start), int(end)) for i, start, end in index["trials"]]
        digest = hashlib.sha1()
        parts: list[bytes] = []
        with path.open("rb") as handle:
            at = 0
            for _, start, end in ranges:
                handle.seek(at)
                part = handle.read(start - at)
                digest.update(part)
                parts += [part, b"null"]
                at = end
            handle.seek(at)
            part = handle.read()
            digest.update(part)
            parts.append(part)
        if digest.hexdigest() != index["digest"]:
            return None
        results = json.loads(b"".join(parts))
        for i, start, end in ranges:
            results["stages"][i]["trials"] = LazyTrials(path, start, end)
        return results
    except (OSError, ValueError, KeyError, TypeError, IndexError):
        return None


class LazyTrials(list):  # type: ignore[type-arg]
    """A stage's trial list, parsed from results.json the first time it is read.
    (Not for ``json.dumps``, whose encoder reads a list's items directly: read the
    results whole, ``lazy=False``, to write them out again.)"""

    def __init__(self, path: Path, start: int, end: int) -> None:
        super().__init__()
        self._where: tuple[Path, int, int] | None = (path, start, end)

    def _load(self) -> None:
        if self._where is None:
            return
        path, start, end = self._where
        self._where = None
        with path.open("rb") as handle:
            handle.seek(start)
            super().extend(json.loads(handle.read(end - start)))

    def __len__(self) -> int:
        self._load()
        return super().__len__()

    def __bool__(self) -> bool:
        return len(self) > 0

    def __iter__(self) -> Iterator[Any]:
        self._load()
        return super().__iter__()

    def __reversed__(self) -> Iterator[Any]:
        self._load()
        return super().__reversed__()

    def __getitem__(self, item: Any) -> Any:
        self._load()
        return super().__getitem__(item)

    def __contains__(self, item: object) -> bool:
        self._load()
        return super().__contains__(item)

    def __eq__(self, other: object) -> bool:
        self._load()
        return super().__eq__(other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        self._load()
        return super().__repr__()

    def index(self, *args: Any) -> int:
        self._load()
        return super().index(*args)

    def count(self, item: Any) -> int:
        self._load()
        return super().count(item)

    def copy(self) -> list[Any]:
        self._load()
        return list(super().__iter__())
