"""Pieces the benchmarks' test problems are built from, shared so that two benches
that rotate a problem do it the same way."""

from __future__ import annotations

import math
import random


def rotation(n: int, seed: int) -> list[list[float]]:
    """A fixed random orthonormal basis of n dimensions (Gram-Schmidt on seeded
    Gaussian vectors): rotating a separable problem by it couples its variables."""
    rng = random.Random(seed)
    basis: list[list[float]] = []
    while len(basis) < n:
        v = [rng.gauss(0.0, 1.0) for _ in range(n)]
        for b in basis:
            dot = sum(x * y for x, y in zip(v, b, strict=True))
            v = [x - dot * y for x, y in zip(v, b, strict=True)]
        norm = math.sqrt(sum(x * x for x in v))
        basis.append([x / norm for x in v])
    return basis
