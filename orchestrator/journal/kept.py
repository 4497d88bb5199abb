"""The driver keeps the run's stages fold snapshot current as it journals.

``nestor status`` folds the journal (:class:`RunState`, its stages alone) from
its snapshot ``journal.fold-stages.json``; with no snapshot, or one far behind,
its first look at a million-event run folds hundreds of MiB. So the driver
folds each event it writes (told by the journal, in order, with the byte offset
after it: ``Journal(on_written=keeper.written)``) and rewrites the snapshot at
most every ``every_s`` seconds and when it stops: a look at the run, while the
driver runs, after it finished or after it was killed, folds at most the last
``every_s`` seconds of events.

The journal stays the truth: the snapshot is a cache that names the offset it
covers and a digest of the bytes before it (:meth:`RunState.load` checks them),
so one that no longer matches the journal (a machine crash that lost unsynced
events, a journal cut by hand) is folded afresh, and any reader may delete it.

What this driver's journal held before it started (a resumed run) the resume has
folded already, to read the journal through it (``engine.history``): the keeper
takes that fold (``start(size, folded)``). Without one, it is folded on a thread of
its own from the last snapshot, so the driver does not wait for it; the driver's
own events are kept until it is done, then folded after it.

    keeper = FoldKeeper(run_dir)
    journal = Journal(run_dir / "journal.jsonl", on_written=keeper.written)
    keeper.start(journal.size, resume_fold)   # or without: folded on a thread
    ...
    journal.close(); keeper.close()
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from pathlib import Path
from typing import Any

from nestor.orchestrator.journal.journal import JournalError
from nestor.orchestrator.journal.state import RunState, snapshot_path

log = logging.getLogger(__name__)

EVERY_S = 2.0  # the snapshot is at most this many seconds of events behind the journal


class FoldKeeper:
    """Folds what a driver journals into the stages' RunState and saves its snapshot."""

    def __init__(self, run_dir: str | Path, journal: str = "journal.jsonl",
                 every_s: float | None = None) -> None:
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / journal
        self.every_s = EVERY_S if every_s is None else every_s
        self.state: RunState | None = None  # None until the journal before us is folded
        self.saves = 0  # snapshots written
        self._journal = journal
        self._waiting: list[tuple[dict[str, Any], int]] = []  # written before state was
        self._base: RunState | None = None  # the earlier journal's fold, from the thread
        self._thread: threading.Thread | None = None
        self._gave_up = False  # the earlier journal did not fold: keep nothing
        self._saved_at = time.monotonic()

    def start(self, size: int, folded: RunState | None = None) -> None:
        """Fold the journal's first ``size`` bytes (what was there before this driver),
        off the driver's thread: a resumed driver need not wait for it. ``folded``: the
        stages' fold of them that the driver made already (its resume reads them
        through it): taken as it is, and folded on, if it covers exactly those bytes."""
        if size == 0:
            self._base = RunState(trials=False)
            return
        if folded is not None and not folded.trials and folded.offset == size:
            self._base = folded
            return
        self._thread = threading.Thread(target=self._fold_before, args=(size,), daemon=True,
                                        name="nestor-fold-keeper")
        self._thread.start()

    def written(self, record: dict[str, Any], end: int) -> None:
        """The journal wrote ``record``, ending at byte ``end`` (called in journal order)."""
        if self.state is None:
            if self._gave_up:
                return
            if self._base is None:
                self._waiting.append((record, end))
                return
            self._adopt()
        state = self.state
        assert state is not None
        state.apply_record(record)
        state.offset = end
        if time.monotonic() - self._saved_at >= self.every_s:
            self.save()

    def save(self) -> None:
        """Write the snapshot now (best effort: a full disk costs only a longer fold)."""
        if self.state is None:
            return
        self._saved_at = time.monotonic()
        try:
            self.state.save(snapshot_path(self.run_dir, trials=False), self.path)
            self.saves += 1
        except OSError as exc:
            log.debug("the fold snapshot was not written: %s", exc)

    def close(self, timeout_s: float = 60.0) -> None:
        """After the journal's last event: wait for the earlier journal's fold (up to
        ``timeout_s``), fold what waited for it, and write the snapshot."""
        if self._thread is not None:
            self._thread.join(timeout_s)
        if self.state is None and self._base is not None:
            self._adopt()
        self.save()

    def _adopt(self) -> None:
        """The earlier journal's fold is done: take it, then what was written since."""
        state, self._base = self._base, None
        assert state is not None
        for record, end in self._waiting:
            state.apply_record(record)
            state.offset = end
        self._waiting.clear()
        self.state = state

    def _fold_before(self, size: int) -> None:
        base = RunState(trials=False)
        with contextlib.suppress(OSError, ValueError, JournalError):  # no snapshot then
            base = RunState.of(self.run_dir, self._journal, trials=False, save=False,
                               until=size)
        if base.offset != size:  # unreadable, or not whole: no snapshot from this driver
            log.debug("the journal before this driver folded to %d of %d bytes",
                      base.offset, size)
            self._gave_up = True
            self._waiting.clear()
            return
        self._base = base
