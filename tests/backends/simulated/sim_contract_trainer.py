"""The trivial trainer both backends run in the contract test of test_simulated.py.

A module of its own, not the test file, so that Ray's workers (which get the
driver's current directory on their path) import it without pytest.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

FAILING_X = 0.8  # a configuration above this fails in every attempt


def value(config: Mapping[str, Any]) -> float:
    return 1.0 / (1.0 + (float(config["x"]) - 0.3) ** 2)


def quadratic(config: Mapping[str, Any], ctx: Any) -> dict[str, float]:
    if float(config["x"]) > FAILING_X:
        raise ValueError(f"x above {FAILING_X} fails on purpose")
    return {"val_accuracy": value(config)}
