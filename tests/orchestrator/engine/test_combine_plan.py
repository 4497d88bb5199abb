"""Ensemble combination arithmetic and the fixed trial plan, without training."""

from __future__ import annotations

import numpy as np
import pytest

from nestor.orchestrator.engine.kinds.combine import (
    accuracy,
    blend,
    combine_weights,
    greedy_weights,
)
from nestor.orchestrator.engine.plan import Plan, PlannedTrial
from nestor.search import Failure, Objective


def noisy_members(seed: int, n: int = 5, samples: int = 300, classes: int = 4):
    """Members that are each right on a different random ~60-75% of samples."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, classes, samples)
    probs = rng.dirichlet(np.ones(classes), size=(n, samples))
    for m in range(n):
        right = rng.random(samples) < 0.6 + 0.03 * m
        probs[m, right, labels[right]] += 1.0
    return probs / probs.sum(axis=2, keepdims=True), labels


@pytest.mark.parametrize("seed", range(5))
def test_greedy_selection_is_never_below_its_best_member_on_validation(seed: int) -> None:
    probs, labels = noisy_members(seed)
    weights = greedy_weights(probs, labels)
    assert weights.sum() == pytest.approx(1.0) and (weights >= 0).all()
    best_member = max(accuracy(p, labels) for p in probs)
    assert accuracy(blend(probs, weights), labels) >= best_member


def test_independent_errors_make_the_mean_beat_every_member() -> None:
    probs, labels = noisy_members(7, n=7)
    mean = combine_weights("mean", probs, labels)
    assert np.allclose(mean, 1 / 7)
    assert accuracy(blend(probs, mean), labels) > max(accuracy(p, labels) for p in probs)


def test_weighted_mean_follows_validation_accuracy() -> None:
    probs, labels = noisy_members(3)
    weights = combine_weights("weighted", probs, labels)
    scores = [accuracy(p, labels) for p in probs]
    assert list(np.argsort(weights)) == list(np.argsort(scores))


def test_greedy_drops_a_useless_member() -> None:
    probs, labels = noisy_members(11, n=3)
    useless = np.full_like(probs[0], 1.0 / probs.shape[2])  # always undecided
    weights = greedy_weights(np.concatenate([probs, useless[None]]), labels)
    assert weights[-1] == 0.0


def test_an_unknown_method_is_a_clear_error() -> None:
    probs, labels = noisy_members(0)
    with pytest.raises(ValueError, match="combine must be one of mean, weighted, greedy"):
        combine_weights("vote", probs, labels)


def plan() -> Plan:
    return Plan([[PlannedTrial("a", {"x": 1}), PlannedTrial("b", {"x": 2})],
                 [PlannedTrial("c", {"x": 3}, parents=("a",))]], Objective("acc", "max"))


def test_a_phase_waits_for_the_previous_one_and_failures_count_as_told() -> None:
    p = plan()
    assert [t.id for t in p.ask(5)] == ["a", "b"]
    assert p.ask(1) == []  # c waits for a and b
    p.tell("a", 0.5)
    assert p.ask(1) == []
    p.tell("b", Failure("crashed"))
    (c,) = p.ask(3)
    assert c.id == "c" and c.generation == 1 and c.parents == ("a",)
    assert not p.done()
    p.tell("c", 0.9)
    assert p.done() and p.best().trial.id == "c" and p.best().value == 0.9
    assert p.stop_reason == "all 3 planned trials were run"


def test_plan_state_restores_and_refuses_another_plan() -> None:
    p = plan()
    p.ask(2)
    p.tell("a", 0.5)
    q = plan()
    q.restore(p.state())
    assert [t.id for t in q.pending] == ["b"] and q.best().value == 0.5
    other = Plan([[PlannedTrial("z", {})]], Objective("acc", "max"))
    with pytest.raises(ValueError, match="was the spec changed"):
        other.restore(p.state())
    with pytest.raises(ValueError, match="must be asked and not yet told"):
        q.tell("a", 0.1)
