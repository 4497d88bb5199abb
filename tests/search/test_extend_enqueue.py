"""Searches extended to a larger budget and given configurations to ask first
(issue 39), over every algorithm: what can be done is logged and replayed exactly
(a restored search asks what the original asked after it), and what cannot is
refused with the reason, the search unchanged."""

from __future__ import annotations

import pytest
from _search_helpers import FACTORIES, MIN, MIXED, drive

from nestor.search import Searcher

ENQUEUED = {"lr": 0.01, "momentum": 0.9, "layers": 3, "batch": 64, "act": "relu"}


def build(name: str) -> Searcher:
    return FACTORIES[name](MIXED, MIN, seed=2)


def extendable(searcher: Searcher) -> bool:
    try:
        searcher.extend(searcher.planned + 4)
    except ValueError:
        return False
    return True


@pytest.mark.parametrize("name", list(FACTORIES))
def test_enqueued_first_then_extended_replays_exactly(name: str) -> None:
    searcher = build(name)
    try:
        searcher.enqueue([ENQUEUED])
    except ValueError as exc:  # grid and lq-CMA-ES: refused, with the reason, before any ask
        assert name in ("grid", "lq-cmaes") and "cannot take enqueued configurations" in str(exc)
        assert searcher.n_asked == 0 and not searcher.log_since(0)
        return
    first = searcher.ask(1)[0]
    expected = {**ENQUEUED, "epochs": 3}  # a genetic search's genes hold lr as its log
    assert first.config.keys() == expected.keys()
    assert all(first.config[k] == pytest.approx(v, rel=1e-12) if type(v) is float
               else first.config[k] == v for k, v in expected.items()), first.config
    assert first.origin == "enqueued"
    searcher.tell(first.id, 1.0)
    drive(searcher)
    planned, asked = searcher.planned, searcher.n_asked
    assert searcher.done()
    if not extendable(searcher):
        assert searcher.planned == planned and searcher.done(), "a refusal changed the search"
        return
    assert not searcher.done() and searcher.planned == planned + 4
    drive(searcher)
    assert searcher.n_asked == asked + 4 and searcher.done()

    again = build(name)
    again.restore(searcher.state())
    assert again.trials == searcher.trials and again.planned == searcher.planned
    snapshot = searcher.snapshot()
    if snapshot is not None:
        resumed = build(name)
        assert resumed.restore(searcher.state(), snapshot) > 0
        assert resumed.trials == searcher.trials


def test_enqueue_refuses_a_configuration_outside_the_space() -> None:
    searcher = build("random")
    with pytest.raises(ValueError, match=r"configuration #1 .* \(missing: \[.act.\]\)"):
        searcher.enqueue([{k: v for k, v in ENQUEUED.items() if k != "act"}])
    with pytest.raises(ValueError, match="configuration #2"):
        searcher.enqueue([ENQUEUED, {**ENQUEUED, "layers": 99}])
