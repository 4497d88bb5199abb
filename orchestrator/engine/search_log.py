"""A stage's search log: what its searcher asked and was told, journalled, and the
searcher rebuilt from the journal on resume.

A search (a :class:`~orchestrator.engine.source.LoggedSearch`: it keeps a log) has
its new entries journalled after every ask and tell (``SearchLogged``); a snapshot,
written to ``searcher/STAGE.json`` every ``SNAPSHOT_EVERY`` entries at least, only
shortens the replay on resume: of the search's internals where it keeps them
(``snapshot()``: a genetic search's demes and RNG; the journal's log entries before it
then only fill the searcher's book, none of its asks is recomputed), else of its whole
state (its log up to then). A snapshot that is unreadable or does not fit the journal
is ignored: the whole log is replayed. A fixed plan (a few named trials) has its whole
state journalled whenever it changes (``PlanState``); older run directories kept it
only in the file, which a resume still reads.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from nestor.orchestrator.engine.source import LoggedSearch, TrialSource
from nestor.orchestrator.journal.events import Event, PlanState, SearchLogged
from nestor.orchestrator.journal.journal import Journal, write_atomic

log = logging.getLogger(__name__)

# Searcher log entries between two snapshots of a searcher's whole state, at
# least: the journal holds every entry, a snapshot only shortens the replay.
SNAPSHOT_EVERY = 500
# A snapshot of a search's internals is written once the log has grown by its size
# over this (a journal entry is a few hundred bytes): its writes stay a share of
# the journal's, and a resume replays a few of its sizes' worth of entries at most.
SNAPSHOT_BYTES_PER_ENTRY = 64


class SearchLog:
    """Journals one stage's searcher (or fixed plan) and restores it.

    >>> log = SearchLog("tune", searcher, journal, run_dir / "searcher" / "tune.json")
    ...                                                               # doctest: +SKIP
    >>> searcher.ask(1); log.record()                                 # doctest: +SKIP
    """

    def __init__(self, stage: str, searcher: TrialSource | None, journal: Journal,
                 state_path: Path) -> None:
        self.stage = stage
        self.journal = journal
        self.state_path = state_path
        self.logged = 0  # searcher log entries journalled so far
        self.snapshot_at = 0  # ... and covered by the snapshot in state_path
        self._every = SNAPSHOT_EVERY  # entries from one snapshot to the next, at least
        self._plan_state: dict[str, Any] | None = None  # a fixed plan's, as last journalled
        self.follow(searcher)

    def follow(self, searcher: TrialSource | None) -> None:
        """Journal and restore ``searcher`` from now on, in place of the one before (a
        kind's plan made once its preparing task is done); nothing of it is journalled
        yet: the next ``record`` journals its state, ``restore`` reads it back."""
        self.searcher = searcher
        # A search, told apart from a plan once (by its shape: LoggedSearch's methods),
        # not at every record.
        self._search = searcher if isinstance(searcher, LoggedSearch) else None
        self.logged = self.snapshot_at = 0
        self._every = SNAPSHOT_EVERY
        self._plan_state = None

    @property
    def is_plan(self) -> bool:
        """A fixed plan: no log, its whole state is a few trials."""
        return self._search is None

    def record(self) -> None:
        """Journal what the searcher logged since last time (a plan: its state, if it
        changed); snapshot a searcher's whole state every SNAPSHOT_EVERY entries, so
        that resume replays a short tail."""
        search = self._search
        if search is None:
            plan = self._plan()
            state = plan.state()
            if state != self._plan_state:
                self.journal.record(PlanState(stage=self.stage, state=state))
                self._plan_state = state
            return
        entries = search.log_since(self.logged)
        if not entries:
            return
        self.journal.record(SearchLogged(stage=self.stage, start=self.logged, entries=entries))
        self.logged += len(entries)
        if self.logged - self.snapshot_at < max(SNAPSHOT_EVERY, self._every):
            return
        self.journal.sync()  # never a snapshot ahead of the journal's durable events
        snapshot = search.snapshot()
        if snapshot is not None:
            # The search's internals (a genetic search's demes, RNG, counters): the
            # journal holds the log, and a resume replays only the entries after it.
            # Its size does not grow with the log: one every that many bytes' worth
            # of entries keeps its cost a share of the journal's.
            text = json.dumps({"covers": self.logged, "snapshot": snapshot})
            self._every = len(text) // SNAPSHOT_BYTES_PER_ENTRY
        else:
            # The state is the whole log: take them further apart as it grows (or
            # once the log has doubled), so their cost stays linear in the run and a
            # resume replays at most about half of it.
            text = json.dumps({"covers": self.logged, "state": search.state()})
            self._every = self.logged
        write_atomic(self.state_path, text)
        self.snapshot_at = self.logged

    def restore(self, mine: Iterable[Event]) -> None:
        """The searcher as the last snapshot and the journalled entries after it left it
        (a plan: as its last journalled state, else as its file); ``mine`` are this
        stage's events, typed."""
        mine = list(mine)
        search = self._search
        if search is None:
            plan = self._plan()
            # A plan of no trials (a kind's, while its preparing task ran) told nothing:
            # the plan made after it is the one to restore.
            states = [e.state for e in mine if isinstance(e, PlanState) and e.state.get("trials")]
            if states:
                saved: Any = states[-1]
            elif self.state_path.exists():  # a run directory from before PlanState
                saved = json.loads(self.state_path.read_text())
            else:
                return
            plan.restore(saved)
            self._plan_state = plan.state()
            return
        saved = self._saved()
        snapshot = None
        if saved is None:
            state, covers = search.state(), 0
        elif "snapshot" in saved:  # the search's internals; its log is the journal's
            state, covers, snapshot = search.state(), 0, saved["snapshot"]
        elif "covers" in saved:
            state, covers = saved["state"], saved["covers"]
        else:  # a run directory from before the journal held the searcher's log
            state, covers = saved, len(saved.get("events", []))
        log_entries = list(state.get("events", []))[:covers]
        for event in mine:
            if not isinstance(event, SearchLogged):
                continue
            for index, entry in enumerate(event.entries, start=event.start):
                if index == len(log_entries):
                    log_entries.append(entry)
        if log_entries and snapshot is not None:
            covers = search.restore({**state, "events": log_entries}, snapshot)
            if not covers:
                log.warning("stage %s: its searcher snapshot %s does not fit the journal;"
                            " the whole search log is replayed", self.stage, self.state_path)
        elif log_entries:
            search.restore({**state, "events": log_entries})
        self.logged = len(log_entries)
        self.snapshot_at = covers
        self._every = covers if snapshot is None else SNAPSHOT_EVERY

    def _plan(self) -> TrialSource:
        """The fixed plan it journals (a stage's source must be built before its first
        record or restore)."""
        if self.searcher is None:
            raise RuntimeError(f"stage {self.stage}: no source of trials to journal yet")
        return self.searcher

    def _saved(self) -> Any:
        """The snapshot file's content (None: none, or not a JSON object: a resume
        replays the journal's log instead, which holds every entry)."""
        try:
            saved = json.loads(self.state_path.read_bytes())
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            saved = exc
        if not isinstance(saved, dict):
            log.warning("stage %s: its searcher snapshot %s is unreadable (%s); the whole"
                        " search log is replayed", self.stage, self.state_path, saved)
            return None
        return saved
