"""A search's state: written as its event log, restored by replaying it or from a snapshot.

Why apart from the algorithms: the log (every ask with the trials it returned, every
tell with its result) is the same small format for every algorithm and enough to
rebuild any of them, and replay checks itself (each replayed ask must return the
trials recorded), so a state restored with other settings or another library version
fails loudly instead of diverging. An algorithm takes part through three hooks of
:class:`~nestor.search._base.Searcher` only: ``_internals``/``_resume`` (a snapshot
of what replaying would rebuild, where that is costly: a genetic search's demes) and
``_replay_ask`` (a Bayesian search takes its costly picks from the record).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, ClassVar, Protocol

from nestor.search._book import Book
from nestor.search._costs import Costs
from nestor.search._records import Objective, Observation, Trial, decode_result
from nestor.search.space import SearchSpace

STATE_FORMAT = 1


class Restorable(Protocol):
    """What :class:`Persistence` reads and calls of its searcher (a ``Searcher``:
    typed by this Protocol so that the imports run one way, base to part)."""

    algorithm: ClassVar[str]
    space: SearchSpace
    objectives: tuple[Objective, ...]
    _settings: dict[str, Any]
    _book: Book
    _costs: Costs | None
    _stop_reason: str | None
    _recorded: dict[str, Trial] | None

    def ask(self, n: int = 1) -> list[Trial]: ...
    def tell(self, trial_id: str, result: Any, *, cost: float | None = None) -> Observation: ...
    def warm_start(self, observations: Iterable[Any]) -> int: ...
    def enqueue(self, configs: Iterable[Mapping[str, Any]]) -> int: ...
    def extend(self, budget: int) -> None: ...
    def _internals(self) -> dict[str, Any] | None: ...
    def _resume(self, internals: Mapping[str, Any]) -> Any: ...
    def _replay_ask(self, n: int, recorded: list[Trial], event: Mapping[str, Any]) -> None: ...


class Persistence:
    """Writes and restores one searcher's state (see :meth:`Searcher.state`)."""

    def __init__(self, searcher: Restorable) -> None:
        self.searcher = searcher

    def state(self) -> dict[str, Any]:
        s = self.searcher
        return json.loads(
            json.dumps(
                {
                    "format": STATE_FORMAT,
                    "algorithm": s.algorithm,
                    "settings": s._settings,
                    "space": repr(s.space),
                    "objectives": [repr(o) for o in s.objectives],
                    "events": s._book.events,
                },
                allow_nan=False,
            )
        )

    def header(self) -> dict[str, Any]:
        """What a state or snapshot must share with this search to continue it."""
        s = self.searcher
        return {
            "format": STATE_FORMAT,
            "algorithm": s.algorithm,
            "settings": json.loads(json.dumps(s._settings)),
            "space": repr(s.space),
            "objectives": [repr(o) for o in s.objectives],
        }

    def restore(self, state: Mapping[str, Any],
                snapshot: Mapping[str, Any] | None = None) -> int:
        s = self.searcher
        if s._book.events:
            raise ValueError("restore must be called on a fresh searcher, before any ask or tell")
        if state.get("format") != STATE_FORMAT:
            raise ValueError(
                f"state format must be {STATE_FORMAT}, but got {state.get('format')!r}"
            )
        for key, expected in self.header().items():
            if state.get(key) != expected:
                raise ValueError(
                    f"state must come from a search with the same {key}, but it has"
                    f" {state.get(key)!r} and this search has {expected!r}"
                )
        events = state["events"]
        covers, resume = self._snapshot_fits(snapshot, events)
        if resume is not None:
            assert snapshot is not None
            self.replay(events[:covers], book_only=True)
            resume()
            s._stop_reason = snapshot["stop_reason"]
        self.replay(events[covers:], book_only=False)
        return covers

    def snapshot(self) -> dict[str, Any] | None:
        s = self.searcher
        internals = s._internals()
        if internals is None:
            return None
        events = s._book.events
        return {**self.header(), "covers": len(events),
                "last": events[-1] if events else None,
                "stop_reason": s._stop_reason, "internals": internals}

    def _snapshot_fits(self, snapshot: Any, events: Sequence[Mapping[str, Any]]
                       ) -> tuple[int, Any]:
        """(entries covered, the callable that restores its internals), or (0, None)
        where the snapshot does not continue this search's log."""
        if not isinstance(snapshot, Mapping) or not events:
            return 0, None
        if any(snapshot.get(key) != expected for key, expected in self.header().items()):
            return 0, None
        covers = snapshot.get("covers")
        if (not isinstance(covers, int) or isinstance(covers, bool)
                or not 0 < covers <= len(events) or events[covers - 1] != snapshot.get("last")):
            return 0, None
        stop = snapshot.get("stop_reason")
        if stop is not None and not isinstance(stop, str):
            return 0, None
        try:
            return covers, self.searcher._resume(snapshot["internals"])
        except (KeyError, IndexError, TypeError, ValueError, AttributeError):
            return 0, None

    def replay(self, events: Sequence[Mapping[str, Any]], *, book_only: bool) -> None:
        """The log's entries again. ``book_only`` (the entries a snapshot covers): into
        the book alone, trials, results, spend and the log itself (what a snapshot's
        internals do not hold), the algorithm not run; otherwise each ask is recomputed
        and checked against the log and each result told."""
        s = self.searcher
        for event in events:
            kind = event["event"]
            if kind == "ask":
                recorded = [Trial.from_dict(t) for t in event["trials"]]
                if not book_only:
                    s._replay_ask(event["n"], recorded, event)
                    continue
                s._book.record_ask(event, recorded)  # type: ignore[arg-type]
            elif kind == "tell":
                result = decode_result(event["result"])
                if book_only:
                    s._book.record_tell(event["id"], result, event.get("cost"), s._costs)
                else:
                    s.tell(event["id"], result, cost=event.get("cost"))
            elif kind == "warm_start":
                s.warm_start(
                    (o["config"], decode_result(o["result"])) for o in event["observations"]
                )
            elif kind == "enqueue":  # a snapshot's internals then put in place over it
                s.enqueue(event["configs"])
            elif kind == "extend":
                s.extend(event["budget"])
            else:
                raise ValueError("state events must be ask, tell, warm_start, enqueue or extend,"
                                 f" but got {kind!r}")

    def replay_ask(self, n: int, recorded: list[Trial]) -> None:
        """Recompute an ask and check it matches the log."""
        s = self.searcher
        s._recorded = {t.id: t for t in recorded}
        try:
            trials = s.ask(n)
        finally:
            s._recorded = None
        if trials != recorded:
            raise ValueError(
                "restore must replay the recorded search, but ask #"
                f"{sum(1 for e in s._book.events if e['event'] == 'ask')} returned"
                f" {[t.to_dict() for t in trials]} where the state recorded"
                f" {[t.to_dict() for t in recorded]} (other settings or library versions?)"
            )
