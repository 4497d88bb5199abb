"""A genetic search restored from a snapshot of its internals goes on as one replayed
from its whole log: the same next trials, the same best; a snapshot that does not fit
the log is ignored and the whole log replayed."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
from _search_helpers import MIN, MIXED, loss

from nestor.search import Failure, GeneticSearch, Objective

TWO = [Objective("loss", "min"), Objective("layers", "max")]

SETTINGS = [
    ({"population": 12, "generations": 8}, MIN),
    ({"population": 12, "generations": 8, "schedule": "async"}, MIN),
    ({"population": 12, "generations": 8, "demes": 3, "migration_interval": 2}, MIN),
    ({"population": 12, "generations": 8, "demes": 2, "schedule": "async",
      "migration_interval": 1}, MIN),
    ({"population": 12, "generations": 8, "crossover": "de"}, MIN),
    ({"population": 12, "generations": 8, "crossover": "de", "schedule": "async"}, MIN),
    ({"population": 8, "generations": 8, "mode": "mu_plus_lambda", "offspring": 5,
      "crossover": "sbx", "patience": 3}, MIN),
    ({"population": 12, "generations": 8, "elitism": 2, "sigma_rule": "fixed"}, MIN),
    ({"population": 12, "generations": 8}, TWO),
    ({"population": 12, "generations": 8, "schedule": "async"}, TWO),
]


class Driver:
    """Asks a few trials at a time and tells a few of those running, in an order of
    its own seeded RNG (some fail): two drivers with the same seed, given searchers
    in the same state, drive them the same way."""

    def __init__(self, seed: int, running: list[Any] | None = None) -> None:
        self.rng = random.Random(seed)
        self.running = list(running or [])

    def step(self, searcher: GeneticSearch) -> list[tuple[str, dict[str, Any]]]:
        asked = searcher.ask(self.rng.randint(1, 7))
        self.running += asked
        for _ in range(self.rng.randint(0, 6)):
            if not self.running:
                break
            trial = self.running.pop(self.rng.randrange(len(self.running)))
            config = trial.config
            result: Any = ({"loss": loss(config), "layers": config["layers"]}
                           if self.rng.random() > 0.06 else Failure("crashed"))
            searcher.tell(trial.id, result)
        return [(t.id, t.config) for t in asked]


def fresh(settings: dict[str, Any], objectives: Any) -> GeneticSearch:
    return GeneticSearch(MIXED, objectives, seed=7, **settings)


def roundtrip(data: Any) -> Any:
    return json.loads(json.dumps(data))  # as the driver writes it and resume reads it


@pytest.mark.parametrize(("settings", "objectives"), SETTINGS)
def test_a_snapshot_restores_the_search_a_full_replay_does(settings: dict[str, Any],
                                                           objectives: Any) -> None:
    for taken_at in (9, 23):  # mid-generation, and later
        original = fresh(settings, objectives)
        driver = Driver(3)
        for _ in range(taken_at):
            driver.step(original)
        snapshot = roundtrip(original.snapshot())
        for _ in range(5):  # the log goes on after the snapshot: that tail is replayed
            driver.step(original)
        state = roundtrip(original.state())

        from_snapshot, replayed = fresh(settings, objectives), fresh(settings, objectives)
        assert from_snapshot.restore(state, snapshot) == snapshot["covers"] > 0
        assert replayed.restore(state) == 0
        assert from_snapshot._internals() == replayed._internals()
        assert from_snapshot.state() == replayed.state() == original.state()

        drivers = [Driver(11, driver.running) for _ in range(3)]
        searchers = (original, from_snapshot, replayed)
        for _ in range(60):
            asked = [d.step(s) for d, s in zip(drivers, searchers, strict=True)]
            assert asked[0] == asked[1] == asked[2]
        assert [s.pending for s in searchers[1:]] == [original.pending] * 2
        assert [s.best() for s in searchers[1:]] == [original.best()] * 2
        assert [s.stop_reason for s in searchers[1:]] == [original.stop_reason] * 2


def run_with_snapshot() -> tuple[dict[str, Any], dict[str, Any], list[Any]]:
    searcher = fresh(*SETTINGS[0])
    driver = Driver(3)
    for _ in range(12):
        driver.step(searcher)
    snapshot = roundtrip(searcher.snapshot())
    for _ in range(4):
        driver.step(searcher)
    return roundtrip(searcher.state()), snapshot, driver.running


def stale(snapshot: dict[str, Any], state: dict[str, Any]) -> list[dict[str, Any]]:
    """Snapshots that must not be used with ``state``'s log."""
    other = fresh(*SETTINGS[0])
    other_driver = Driver(4)  # the same search told other results: another log
    while len(other._book.events) < snapshot["covers"]:
        other_driver.step(other)
    elsewhere = roundtrip(other.snapshot())
    return [
        {**snapshot, "covers": len(state["events"]) + 1},  # ahead of the log (a lost tail)
        {**snapshot, "last": {"event": "tell", "id": "0", "result": {"values": [1.0]}}},
        elsewhere,  # another run's, as far into its log
        {**snapshot, "settings": {**snapshot["settings"], "seed": 8}},
        {**snapshot, "internals": {**snapshot["internals"], "rng": [3, [1, 2], None]}},
        {**snapshot, "internals": {**snapshot["internals"], "parents": [[10**6]]}},
        {**snapshot, "internals": "garbled"},
        [1, 2, 3],
    ]


def test_a_stale_or_corrupt_snapshot_is_ignored_and_the_log_replayed() -> None:
    state, snapshot, running = run_with_snapshot()
    replayed = fresh(*SETTINGS[0])
    replayed.restore(state)
    for bad in stale(snapshot, state):
        restored = fresh(*SETTINGS[0])
        assert restored.restore(state, roundtrip(bad)) == 0, bad
        assert restored._internals() == replayed._internals()
        one, two = Driver(5, running), Driver(5, running)
        for _ in range(30):
            assert one.step(restored) == two.step(replayed)
        replayed = fresh(*SETTINGS[0])
        replayed.restore(state)
