"""A stage's search log: what its searcher asked and was told, journalled, and the
searcher rebuilt from the journal on resume.

A searcher that keeps a log (``log_since``) has its new entries journalled after
every ask and tell (``SearchLogged``); a snapshot of its whole state, written to
``searcher/STAGE.json`` every ``SNAPSHOT_EVERY`` entries at least, only shortens the
replay on resume. A fixed plan (a few named trials) has its whole state journalled
whenever it changes (``PlanState``); older run directories kept it only in the file,
which a resume still reads.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from orchestrator.journal.events import Event, PlanState, SearchLogged
from orchestrator.journal.journal import Journal, write_atomic

# Searcher log entries between two snapshots of a searcher's whole state, at
# least: the journal holds every entry, a snapshot only shortens the replay.
SNAPSHOT_EVERY = 500


class SearchLog:
    """Journals one stage's searcher (or fixed plan) and restores it.

    >>> log = SearchLog("tune", searcher, journal, run_dir / "searcher" / "tune.json")
    ...                                                               # doctest: +SKIP
    >>> searcher.ask(1); log.record()                                 # doctest: +SKIP
    """

    def __init__(self, stage: str, searcher: Any, journal: Journal, state_path: Path) -> None:
        self.stage = stage
        self.searcher = searcher
        self.journal = journal
        self.state_path = state_path
        self.logged = 0  # searcher log entries journalled so far
        self.snapshot_at = 0  # ... and covered by the snapshot in state_path
        self._plan_state: dict[str, Any] | None = None  # a fixed plan's, as last journalled

    def follow(self, searcher: Any) -> None:
        """Journal and restore ``searcher`` from now on, in place of the one before (a
        kind's plan made once its preparing task is done); nothing of it is journalled
        yet: the next ``record`` journals its state, ``restore`` reads it back."""
        self.searcher = searcher
        self.logged = self.snapshot_at = 0
        self._plan_state = None

    @property
    def is_plan(self) -> bool:
        """A fixed plan: no log, its whole state is a few trials."""
        return getattr(self.searcher, "log_since", None) is None

    def record(self) -> None:
        """Journal what the searcher logged since last time (a plan: its state, if it
        changed); snapshot a searcher's whole state every SNAPSHOT_EVERY entries, so
        that resume replays a short tail."""
        if self.is_plan:
            state = self.searcher.state()
            if state != self._plan_state:
                self.journal.record(PlanState(stage=self.stage, state=state))
                self._plan_state = state
            return
        entries = self.searcher.log_since(self.logged)
        if not entries:
            return
        self.journal.record(SearchLogged(stage=self.stage, start=self.logged, entries=entries))
        self.logged += len(entries)
        # A snapshot serialises the whole log: take them further apart as it grows
        # (every SNAPSHOT_EVERY entries, or once the log has doubled), so their cost
        # stays linear in the run and a resume replays at most about half of it.
        if self.logged - self.snapshot_at >= max(SNAPSHOT_EVERY, self.snapshot_at):
            self.journal.sync()  # never a snapshot ahead of the journal's durable events
            write_atomic(self.state_path, json.dumps({"covers": self.logged,
                                                      "state": self.searcher.state()}))
            self.snapshot_at = self.logged

    def restore(self, mine: Iterable[Event]) -> None:
        """The searcher as the last snapshot and the journalled entries after it left it
        (a plan: as its last journalled state, else as its file); ``mine`` are this
        stage's events, typed."""
        mine = list(mine)
        if self.is_plan:
            # A plan of no trials (a kind's, while its preparing task ran) told nothing:
            # the plan made after it is the one to restore.
            states = [e.state for e in mine if isinstance(e, PlanState) and e.state.get("trials")]
            if states:
                saved: Any = states[-1]
            elif self.state_path.exists():  # a run directory from before PlanState
                saved = json.loads(self.state_path.read_text())
            else:
                return
            self.searcher.restore(saved)
            self._plan_state = self.searcher.state()
            return
        saved = json.loads(self.state_path.read_text()) if self.state_path.exists() else None
        if saved is None:
            state, covers = self.searcher.state(), 0
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
        if log_entries:
            self.searcher.restore({**state, "events": log_entries})
        self.logged = len(log_entries)
        self.snapshot_at = covers
