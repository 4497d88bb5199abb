"""``continuable()``: the checkpoints a search may still continue from.

The driver removes every other checkpoint under ``keep_checkpoints`` (keeping
also the pending trials' and the N best, which these tests leave out so the
searcher's answer alone is checked). A searcher that under-reports makes a
later exploit or promotion find its source gone; one that over-reports keeps
the whole population on disk. Both are checked here, with results arriving in
random order, failures among them, several trials at once.
"""

from __future__ import annotations

import random

import pytest
from _search_helpers import MIN, MIXED, loss

from nestor.search import Failure, Searcher, make_searcher

SEARCHES = {
    "pbt": ("pbt", {"population": 6, "intervals": 6, "quantile": 0.34}),
    "pb2": ("pbt", {"population": 6, "intervals": 5, "quantile": 0.34, "explore": "pb2"}),
    "asha": ("asha", {"budget": 30, "min_budget": 1, "max_budget": 9}),
    "hyperband": ("hyperband", {"min_budget": 1, "max_budget": 9, "iterations": 1}),
    "bohb": ("hyperband", {"min_budget": 1, "max_budget": 9, "iterations": 1,
                           "sampler": "tpe", "startup_trials": 3}),
}


def drive(searcher: Searcher, parallel: int, seed: int) -> tuple[set[str], set[str]]:
    """Run the search, removing after every result each told trial's checkpoint
    that neither ``continuable()`` nor a pending trial needs; every asked trial
    must continue from a checkpoint still there. Returns (removed, told)."""
    rng = random.Random(seed)
    running: list = []
    removed: set[str] = set()
    told: set[str] = set()
    while not searcher.done():
        if len(running) < parallel:
            for trial in searcher.ask(parallel - len(running)):
                assert trial.continue_from is None or trial.continue_from not in removed, (
                    f"trial {trial.id} ({trial.origin}) continues {trial.continue_from},"
                    " whose checkpoint was already removed")
                running.append(trial)
        if not running:
            break
        trial = running.pop(rng.randrange(len(running)))
        failed = rng.random() < 0.1
        searcher.tell(trial.id, Failure("crashed") if failed
                      else loss(trial.config) + 0.01 * rng.random())
        told.add(trial.id)
        keep = searcher.continuable()
        assert keep <= told, "only told trials have checkpoints to keep"
        for pending in searcher.pending:
            keep |= {pending.id, pending.continue_from or pending.id}
        removed |= told - keep
    return removed, told


@pytest.mark.parametrize("name", SEARCHES)
@pytest.mark.parametrize("parallel", [1, 3])
def test_no_trial_continues_a_checkpoint_the_search_let_go(name: str, parallel: int) -> None:
    algorithm, settings = SEARCHES[name]
    for seed in range(3):
        searcher = make_searcher(algorithm, MIXED, MIN, seed=seed, **settings)
        removed, told = drive(searcher, parallel, seed)
        continued = {t.continue_from for t in searcher.trials.values() if t.continue_from}
        assert continued, "the search continued no trial: nothing was checked"
        # What it let go is most of it: a population keeps about one model per member.
        assert len(removed) >= len(told) // 2, (len(removed), len(told))


def test_searches_that_train_from_scratch_need_no_checkpoint_back() -> None:
    searcher = make_searcher("random", MIXED, MIN, budget=5, seed=0)
    for trial in searcher.ask(5):
        searcher.tell(trial.id, loss(trial.config))
    assert searcher.continuable() == set()


def test_ranked_puts_the_longest_trained_first_then_the_best() -> None:
    searcher = make_searcher("asha", MIXED, MIN, seed=1, budget=12, min_budget=1, max_budget=9)
    drive(searcher, 2, 1)
    ranked = searcher.ranked()
    keys = [(-(o.trial.budget or 0), o.values[0]) for o in ranked]
    assert keys == sorted(keys)
    assert ranked[0].trial.id == searcher.best().trial.id
    assert all(o.values is not None for o in ranked)
