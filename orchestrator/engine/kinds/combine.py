"""Combining ensemble members' class probabilities: mean, validation-weighted
mean, and Caruana et al.'s greedy forward selection with replacement (2004).

Pure numpy on arrays of shape (members, samples, classes), so it is tested
without training anything.
"""

from __future__ import annotations

import numpy as np

METHODS = ("mean", "weighted", "greedy")


def accuracy(probs: np.ndarray, labels: np.ndarray) -> float:
    return float((probs.argmax(axis=1) == labels).mean()) if len(labels) else float("nan")


def log_loss(probs: np.ndarray, labels: np.ndarray) -> float:
    return float(-np.log(np.clip(probs[np.arange(len(labels)), labels], 1e-12, 1.0)).mean())


def blend(probs: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """The weighted mean of the members' probabilities."""
    return np.tensordot(np.asarray(weights, dtype=np.float64), probs, axes=1)


def greedy_weights(probs: np.ndarray, labels: np.ndarray, rounds: int | None = None) -> np.ndarray:
    """Caruana's ensemble selection on validation data.

    Each round adds (with replacement) the member that makes the running mean
    most accurate, ties broken by the lower log loss; the best ensemble over
    all rounds is kept, so its validation accuracy is never below the best
    single member's (round one picks that member). Weights are how often a
    member was picked.
    """
    n = len(probs)
    rounds = rounds or max(2 * n, 10)
    counts = np.zeros(n)
    total = np.zeros_like(probs[0], dtype=np.float64)
    best_key: tuple[float, float] | None = None
    best_counts = counts.copy()
    for step in range(1, rounds + 1):
        keys = []
        for i in range(n):
            candidate = (total + probs[i]) / step
            keys.append((accuracy(candidate, labels), -log_loss(candidate, labels)))
        pick = max(range(n), key=lambda i: keys[i])
        counts[pick] += 1
        total += probs[pick]
        if best_key is None or keys[pick] > best_key:
            best_key, best_counts = keys[pick], counts.copy()
    return best_counts / best_counts.sum()


def combine_weights(method: str, probs: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Member weights by ``method`` from validation probabilities and labels."""
    n = len(probs)
    if method == "mean":
        return np.full(n, 1.0 / n)
    if method == "weighted":
        scores = np.array([accuracy(p, labels) for p in probs])
        return scores / scores.sum() if scores.sum() > 0 else np.full(n, 1.0 / n)
    if method == "greedy":
        return greedy_weights(probs, labels)
    raise ValueError(f"combine must be one of {', '.join(METHODS)}, but got {method!r}")
