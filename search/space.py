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
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from nestor.search._expression import Expression, ExpressionError

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
class Constraint:
    """A rule every configuration must satisfy: an expression over parameter names
    (:mod:`search._expression`, parsed, never ``eval``-ed) or, from Python only, a
    callable given the configuration (its active parameters) that returns a truth value.

    An expression that names a parameter a configuration does not have (it is
    inactive there) holds for that configuration: ``momentum < 0.9`` says nothing
    of a configuration with ``optimizer: adam`` and no momentum."""

    text: str
    expression: Expression | None = field(default=None, compare=False, repr=False)
    function: Callable[[dict[str, Any]], Any] | None = field(default=None, compare=False,
                                                              repr=False)

    @classmethod
    def of(cls, rule: Any) -> Constraint:
        """A Constraint from itself, an expression string or a callable."""
        if isinstance(rule, Constraint):
            return rule
        if callable(rule):
            name = getattr(rule, "__qualname__", None) or type(rule).__name__
            return cls(f"{getattr(rule, '__module__', '?')}:{name}", function=rule)
        return cls(rule if isinstance(rule, str) else repr(rule),
                   expression=Expression.parse(rule))

    @property
    def names(self) -> frozenset[str]:
        """The parameters an expression reads (a callable's are unknown: empty)."""
        return self.expression.names if self.expression is not None else frozenset()

    def holds(self, config: Mapping[str, Any]) -> bool:
        if self.function is not None:
            return bool(self.function(dict(config)))
        assert self.expression is not None
        if not self.names <= set(config):
            return True  # it reads a parameter this configuration does not have
        try:
            return bool(self.expression.evaluate(config))
        except (ArithmeticError, TypeError, ValueError) as exc:
            raise ValueError(f"constraint {self.text!r} cannot be evaluated on"
                             f" {dict(config)}: {exc}") from None


Condition = tuple[tuple[str, tuple[Scalar, ...]], ...]
"""When a parameter exists: (parent, allowed values) pairs, all of which must hold."""


def _same(a: Any, b: Any) -> bool:
    return type(a) is type(b) and a == b


def default_value(param: Param) -> Scalar:
    """A parameter's value where an algorithm needs one for a parameter a
    configuration lacks (inactive there): the middle of its range (geometric where
    ``log``), its first choice, its constant."""
    if isinstance(param, FloatParam):
        return math.sqrt(param.low * param.high) if param.log else (param.low + param.high) / 2
    if isinstance(param, IntParam):
        mid = math.sqrt(param.low * param.high) if param.log else (param.low + param.high) / 2
        return int(min(max(round(mid), param.low), param.high))
    if isinstance(param, CategoricalParam):
        return param.values[0]
    return param.value


@dataclass(frozen=True)
class SearchSpace:
    """An ordered collection of named parameters, some conditional, and constraints.

    Order is kept because it fixes how algorithms encode a configuration as a
    vector (the genome in the genetic search), which makes seeded runs repeatable.

    ``conditions`` maps a parameter's name to when it exists: ``{"momentum":
    {"optimizer": ["sgd"]}}`` (a parent's value or list of values; several parents
    must all hold). A parent is a categorical or int parameter, itself possibly
    conditional (to any depth): a parameter whose parent is inactive is inactive.
    A configuration holds exactly its active parameters (:meth:`project`).
    ``constraints`` are :class:`Constraint` rules (expression strings or callables)
    that every configuration must satisfy; searches never ask one that does not.

    >>> s = SearchSpace([CategoricalParam("opt", ("adam", "sgd")),
    ...                  FloatParam("momentum", 0.0, 0.99)],
    ...                 conditions={"momentum": {"opt": "sgd"}})
    >>> s.project({"opt": "adam", "momentum": 0.5})
    {'opt': 'adam'}
    """

    params: tuple[Param, ...]
    conditions: Any = ()
    constraints: tuple[Constraint, ...] = ()

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
        object.__setattr__(self, "conditions", self._normal_conditions(self.conditions))
        rules = self.constraints
        if isinstance(rules, str) or callable(rules):
            rules = (rules,)
        try:
            rules = tuple(Constraint.of(r) for r in rules)
        except ExpressionError as exc:
            raise ValueError(str(exc)) from None
        for rule in rules:
            unknown = sorted(rule.names - set(names))
            if unknown:
                raise ValueError(
                    f"constraint {rule.text!r} names {', '.join(map(repr, unknown))}, which"
                    f" is no parameter of the space (parameters: {', '.join(names)})")
        object.__setattr__(self, "constraints", rules)
        object.__setattr__(self, "_order", self._topological())

    def _normal_conditions(self, raw: Any) -> Condition | tuple[()]:
        """``{child: {parent: value or values}}`` (or its tuple form) checked and frozen."""
        items = raw.items() if isinstance(raw, Mapping) else raw
        by_name = {p.name: p for p in self.params}
        result = []
        for child, parents in items:
            if child not in by_name:
                raise ValueError(f"a condition is set on {child!r}, which is no parameter of"
                                 f" the space (parameters: {', '.join(by_name)})")
            pairs = parents.items() if isinstance(parents, Mapping) else parents
            frozen = []
            for parent, values in pairs:
                where = f"{child}.when.{parent}"
                if parent == child:
                    raise ValueError(f"{where}: a parameter cannot depend on itself")
                if parent not in by_name:
                    raise ValueError(f"{where}: names {parent!r}, which is no parameter of the"
                                     f" space (parameters: {', '.join(by_name)})")
                owner = by_name[parent]
                if not isinstance(owner, CategoricalParam | IntParam | ConstantParam):
                    raise ValueError(f"{where}: a condition must name a categorical or int"
                                     f" parameter, but {parent!r} is a float")
                values = tuple(values) if isinstance(values, list | tuple) else (values,)
                if not values:
                    raise ValueError(f"{where}: must list at least one value of {parent!r}")
                for value in values:
                    if not owner.contains(value):
                        raise ValueError(f"{where}: {value!r} is not a value {parent!r} takes"
                                         f" ({_takes(owner)})")
                frozen.append((parent, values))
            if not frozen:
                raise ValueError(f"{child}.when: must name at least one parameter")
            result.append((child, tuple(frozen)))
        return tuple(result)

    def _topological(self) -> tuple[str, ...]:
        """Parameter names, parents before children (declared order otherwise); a
        cycle of conditions is refused, naming it."""
        parents = {child: [p for p, _ in pairs] for child, pairs in self.conditions}
        order: list[str] = []
        state: dict[str, int] = {}

        def visit(name: str, path: list[str]) -> None:
            if state.get(name) == 2:
                return
            if state.get(name) == 1:
                cycle = [*path[path.index(name):], name]
                raise ValueError("conditions depend on each other in a cycle: "
                                 + " -> ".join(cycle) + " (each 'when' names the next)")
            state[name] = 1
            for parent in parents.get(name, []):
                visit(parent, [*path, name])
            state[name] = 2
            order.append(name)

        for param in self.params:
            visit(param.name, [])
        return tuple(order)

    def __repr__(self) -> str:
        # A flat space's repr is what it always was: journals compare it on restore.
        text = f"SearchSpace(params={self.params!r}"
        if self.conditions:
            text += f", conditions={self.conditions!r}"
        if self.constraints:
            text += f", constraints={tuple(c.text for c in self.constraints)!r}"
        return text + ")"

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
    def conditional(self) -> bool:
        """True where some parameter exists only for some values of another."""
        return bool(self.conditions)

    @property
    def constrained(self) -> bool:
        return bool(self.constraints)

    @property
    def order(self) -> tuple[str, ...]:
        """The names with every parent before its children (define-by-run order)."""
        return self._order  # type: ignore[attr-defined,no-any-return]

    def condition(self, name: str) -> Condition:
        """When ``name`` exists: its (parent, allowed values) pairs (empty: always)."""
        for child, pairs in self.conditions:
            if child == name:
                return pairs  # type: ignore[no-any-return]
        return ()

    @property
    def searched(self) -> list[Param]:
        """The parameters an algorithm varies (everything but constants)."""
        return [p for p in self.params if not isinstance(p, ConstantParam)]

    def constants(self) -> dict[str, Scalar]:
        return {p.name: p.value for p in self.params if isinstance(p, ConstantParam)}

    def is_active(self, name: str, config: Mapping[str, Any], active: set[str]) -> bool:
        """Whether ``name`` exists given ``config`` and the parameters already found
        active (its parents: walk :attr:`order`)."""
        return all(parent in active and parent in config
                   and any(_same(config[parent], v) for v in values)
                   for parent, values in self.condition(name))

    def active(self, config: Mapping[str, Any]) -> set[str]:
        """The parameters that exist given the values in ``config``."""
        found: set[str] = set()
        for name in self.order:
            if self.is_active(name, config, found):
                found.add(name)
        return found

    def project(self, config: Mapping[str, Any]) -> dict[str, Any]:
        """``config`` with its inactive parameters dropped, in the space's order."""
        active = self.active(config)
        return {name: config[name] for name in self.names if name in active and name in config}

    def fill(self, config: Mapping[str, Any]) -> dict[str, Scalar]:
        """Every parameter's value: ``config``'s, and :func:`default_value` for those it
        lacks (inactive ones), so that algorithms that keep a whole vector have one."""
        return {p.name: config[p.name] if p.name in config else default_value(p)
                for p in self.params}

    def satisfies(self, config: Mapping[str, Any]) -> bool:
        """True if ``config`` (a projected one) meets every constraint."""
        return all(rule.holds(config) for rule in self.constraints)

    def contains(self, config: Mapping[str, Any]) -> bool:
        """True if ``config`` sets exactly this space's active parameters, each in
        range, and meets the constraints."""
        if set(config) != self.active(config) or set(config) - set(self.names):
            return False
        return all(self[n].contains(v) for n, v in config.items()) and self.satisfies(config)


def _takes(param: Param) -> str:
    if isinstance(param, CategoricalParam):
        return "one of " + ", ".join(repr(v) for v in param.values)
    if isinstance(param, IntParam):
        return f"an integer from {param.low} to {param.high}"
    return repr(getattr(param, "value", None))


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
