"""Typed search-space parameters, shared by every search algorithm.

The workflow spec (``orchestrator.spec``) validates user input and builds these
objects; algorithms only read them. Constructors check their arguments so that
a space built in Python gets the same errors as one written in YAML:

>>> FloatParam("lr", low=1e-4, high=0.3, log=True).contains(0.01)
True
"""

from __future__ import annotations

import math
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

Scalar = bool | int | float | str


INT_LIMIT = 2**53  # integers a float holds exactly: samplers compute in floats


def name_problem(name: Any) -> str | None:
    """Why ``name`` cannot name a parameter (None: it can). A command trainer gets a
    parameter as one argument ``--NAME=VALUE``: an ``=`` in the name moves the split,
    a NUL cannot be passed at all, and a newline or other control character breaks
    the lines of logs and tables."""
    if not isinstance(name, str) or not name:
        return "must be a non-empty string"
    if "=" in name:
        return "must not hold '=' (a command gets --NAME=VALUE)"
    if any(ord(c) < 32 or ord(c) == 127 for c in name):
        return "must not hold a NUL, newline or other control character"
    return None


def value_problem(value: Any) -> str | None:
    """Why ``value`` cannot be a parameter's value (None: it can): a NUL cannot be
    passed in a command's argument."""
    if isinstance(value, str) and "\x00" in value:
        return f"must not hold a NUL character, but {value!r} does"
    return None


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


@dataclass(frozen=True)
class FloatParam:
    """A real number in [low, high]; ``log`` samples and mutates in log space."""

    name: str
    low: float
    high: float
    log: bool = False

    def __post_init__(self) -> None:
        for bound in ("low", "high"):
            value = getattr(self, bound)
            if not _is_number(value) or not math.isfinite(value):
                raise ValueError(f"{bound} must be a finite number, but got {value!r}")
        if not self.low < self.high:
            raise ValueError(
                f"low must be less than high, but got low={self.low}, high={self.high}"
                " (use type: constant for a fixed value)"
            )
        if not math.isfinite(self.high - self.low):  # samplers scale by the width
            raise ValueError(
                f"high - low must be a finite number, but low={self.low}, high={self.high}"
                f" are {self.high - self.low} apart (at most {sys.float_info.max:.4g})")
        if self.log and self.low <= 0:
            raise ValueError(f"low must be greater than 0 when log is true, but got {self.low}")

    def contains(self, value: Any) -> bool:
        return _is_number(value) and self.low <= value <= self.high


@dataclass(frozen=True)
class IntParam:
    """An integer in [low, high], both included; ``log`` for ranges like batch sizes."""

    name: str
    low: int
    high: int
    log: bool = False

    def __post_init__(self) -> None:
        for bound in ("low", "high"):
            value = getattr(self, bound)
            if not _is_int(value):
                raise ValueError(f"{bound} must be an integer, but got {value!r}")
            if abs(value) > INT_LIMIT:
                raise ValueError(f"{bound} must be between -2**53 and 2**53 (integers the"
                                 f" searchers' floats hold exactly), but got {value}")
        if not self.low < self.high:
            raise ValueError(
                f"low must be less than high, but got low={self.low}, high={self.high}"
                " (use type: constant for a fixed value)"
            )
        if self.log and self.low <= 0:
            raise ValueError(f"low must be at least 1 when log is true, but got {self.low}")

    def contains(self, value: Any) -> bool:
        return _is_int(value) and self.low <= value <= self.high


@dataclass(frozen=True)
class CategoricalParam:
    """One of a fixed, unordered set of values (mutation redraws)."""

    name: str
    values: tuple[Scalar, ...]

    def __post_init__(self) -> None:
        if not isinstance(self.values, tuple):
            object.__setattr__(self, "values", tuple(self.values))
        if not self.values:
            raise ValueError("values must list at least one choice, but got none")
        seen: list[Scalar] = []
        for value in self.values:
            if not isinstance(value, Scalar):
                raise ValueError(
                    f"values must be numbers, strings or booleans, but got {value!r}"
                )
            problem = value_problem(value)
            if problem:
                raise ValueError(f"values {problem}")
            # 1 == True in Python; keep them distinct choices by comparing types too.
            if any(type(value) is type(other) and value == other for other in seen):
                raise ValueError(f"values must be distinct, but {value!r} is listed twice")
            seen.append(value)

    def contains(self, value: Any) -> bool:
        return any(type(value) is type(v) and value == v for v in self.values)


@dataclass(frozen=True)
class ConstantParam:
    """A fixed value passed to every trial, recorded with it but never searched."""

    name: str
    value: Scalar

    def __post_init__(self) -> None:
        if not isinstance(self.value, Scalar):
            raise ValueError(f"value must be a number, string or boolean, but got {self.value!r}")
        problem = value_problem(self.value)
        if problem:
            raise ValueError(f"value {problem}")

    def contains(self, value: Any) -> bool:
        return type(value) is type(self.value) and value == self.value


Param = FloatParam | IntParam | CategoricalParam | ConstantParam


@dataclass(frozen=True)
class SearchSpace:
    """An ordered collection of named parameters.

    Order is kept because it fixes how algorithms encode a configuration as a
    vector (the genome in the genetic search), which makes seeded runs repeatable.
    """

    params: tuple[Param, ...]

    def __post_init__(self) -> None:
        if not isinstance(self.params, tuple):
            object.__setattr__(self, "params", tuple(self.params))
        names = [p.name for p in self.params]
        for name in names:
            problem = name_problem(name)
            if problem:
                raise ValueError(f"a parameter's name {problem}, but got {name!r}")
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"parameter names must be unique, but got {duplicates} twice")

    def __iter__(self) -> Iterator[Param]:
        return iter(self.params)

    def __len__(self) -> int:
        return len(self.params)

    def __getitem__(self, name: str) -> Param:
        for param in self.params:
            if param.name == name:
                return param
        raise KeyError(name)

    @property
    def names(self) -> list[str]:
        return [p.name for p in self.params]

    @property
    def searched(self) -> list[Param]:
        """The parameters an algorithm varies (everything but constants)."""
        return [p for p in self.params if not isinstance(p, ConstantParam)]

    def constants(self) -> dict[str, Scalar]:
        return {p.name: p.value for p in self.params if isinstance(p, ConstantParam)}

    def contains(self, config: Mapping[str, Any]) -> bool:
        """True if ``config`` sets exactly this space's parameters, each in range."""
        return set(config) == set(self.names) and all(
            p.contains(config[p.name]) for p in self.params
        )


def to_unit(param: FloatParam | IntParam, value: Any) -> float:
    """``value`` scaled to [0, 1] over the parameter's range (its log where ``log``)."""
    low, high, x = float(param.low), float(param.high), float(value)
    if param.log:
        low, high, x = math.log(low), math.log(high), math.log(x)
    return 0.0 if high == low else min(max((x - low) / (high - low), 0.0), 1.0)


def from_unit(param: FloatParam | IntParam, unit: float) -> Scalar:
    """The value at ``unit`` of the parameter's range (log where ``log``), clipped to it;
    integers rounded. Searches that work in [0, 1] (PB2's GP, lq-CMA-ES) share these."""
    low, high = float(param.low), float(param.high)
    if param.log:
        value = math.exp(math.log(low) + unit * (math.log(high) - math.log(low)))
    else:
        value = low + unit * (high - low)
    if isinstance(param, IntParam):
        return int(min(max(round(value), param.low), param.high))
    return float(min(max(value, param.low), param.high))
