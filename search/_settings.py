"""Each searcher's settings, declared once: type, default, bounds and a line of help.

A searcher declares its settings as a frozen dataclass of :func:`setting` fields
(``GeneticSearch.Settings``). Everything else is read from that declaration:
the searcher's constructor fills its keywords from it, the workflow spec's
pydantic model for the search is built from it (``orchestrator/spec/_derive.py``)
and so are the `nestor sweep` flags and their help. Adding a field here is the
whole of adding a setting to all three.

Its type and bounds are also the searcher's check: a Settings refuses, when it is
made, a value its declaration rules out (:func:`check`), in the words of the
searchers' older hand-written checks ("population must be an integer of at least
2, but got 1"). The spec enforces the same bounds in the same words
(:func:`out_of_bounds`), so a bound lives in one place, the ``setting()`` call.

>>> from dataclasses import dataclass
>>> @dataclass(frozen=True)
... class Demo(SearchSettings):
...     width: int = setting(4, "how wide", ge=1)
>>> [s.name for s in declared(Demo)], Demo().width
(['seed', 'budget', 'width'], 4)
>>> Demo(width=0)
Traceback (most recent call last):
ValueError: width must be an integer of at least 1, but got 0
"""

from __future__ import annotations

import dataclasses
import math
import operator
import types
import typing
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from nestor.search._budget import parse_budget

BOUNDS = ("ge", "gt", "le", "lt")


@dataclass(frozen=True)
class Info:
    """What a setting says besides its type and default.

    ``bounds``: pydantic-style ``ge``/``gt``/``le``/``lt`` on the number (on each
    number of a union). ``items``: the same for each item of a list setting.
    ``public``: False keeps a setting out of the spec and the flags (an
    operator's inner constant that a user has no reason to change).
    ``words``: how the check says the range where an older message said it
    otherwise than :func:`must_be` does ("at least 0").
    ``check``: a function that checks the value itself instead (raising
    ValueError), for a setting whose forms the generic check cannot say (a budget).
    """

    help: str
    bounds: dict[str, float]
    items: dict[str, float]
    min_length: int | None = None
    public: bool = True
    words: str | None = None
    check: Callable[[Any], Any] | None = None


def setting(default: Any, help: str, *, ge: float | None = None, gt: float | None = None,
            le: float | None = None, lt: float | None = None,
            items: dict[str, float] | None = None, min_length: int | None = None,
            public: bool = True, words: str | None = None,
            check: Callable[[Any], Any] | None = None) -> Any:
    """A dataclass field for one setting (a list default is copied per instance)."""
    given = {"ge": ge, "gt": gt, "le": le, "lt": lt}
    info = Info(help, {k: v for k, v in given.items() if v is not None}, dict(items or {}),
                min_length, public, words, check)
    metadata = {"nestor": info}
    if isinstance(default, list):
        return dataclasses.field(default_factory=lambda: list(default), metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


@dataclass(frozen=True)
class Declared:
    """One declared setting, its annotation resolved."""

    name: str
    annotation: Any
    default: Any
    info: Info


def declared(cls: type, public_only: bool = False) -> list[Declared]:
    """The settings ``cls`` declares, base class first (dataclass field order)."""
    hints = typing.get_type_hints(cls)
    found = []
    for item in dataclasses.fields(cls):
        info = item.metadata.get("nestor")
        if info is None:
            raise TypeError(f"{cls.__name__}.{item.name} must be declared with setting()")
        if public_only and not info.public:
            continue
        default = item.default if item.default is not dataclasses.MISSING \
            else item.default_factory()  # type: ignore[misc]
        found.append(Declared(item.name, hints[item.name], default, info))
    return found


BUDGET_HELP = ("most trials to run, or a cost: {slot_seconds: S}, {slot_hours: H} or"
               " {epochs: E} (fidelity units), also written 600slot-s, 30slot-h, 300epochs;"
               " in a spec, with a wall-clock limit too: {trials: N, wall: 2h}")


def budget_setting(default: int | None) -> Any:
    """The ``budget`` setting with ``default`` (searches differ only in that)."""
    return setting(default, BUDGET_HELP, ge=1, check=parse_budget)


# --- the check every Settings runs on itself ------------------------------------------

_WORDS = {"ge": "at least", "gt": "greater than", "le": "at most", "lt": "below"}
_COMPARE = {"ge": operator.ge, "gt": operator.gt, "le": operator.le, "lt": operator.lt}


def _number(bound: float) -> str:
    return f"{bound:g}"


def _range(bounds: dict[str, float]) -> str:
    """'between 0 and 1', 'greater than 0 and at most 0.5', 'at least 0 and below 1'."""
    if set(bounds) == {"ge", "le"}:
        return f"between {_number(bounds['ge'])} and {_number(bounds['le'])}"
    return " and ".join(f"{_WORDS[k]} {_number(bounds[k])}" for k in BOUNDS if k in bounds)


def must_be(kind: type, bounds: dict[str, float]) -> str:
    """What a value of ``kind`` within ``bounds`` is, in words: 'an integer of at least
    2', 'a positive number', 'between 0 and 1'."""
    if kind is int:
        return f"an integer of {_range(bounds)}" if bounds else "an integer"
    if bounds == {"gt": 0}:
        return "a positive number"
    return _range(bounds) if bounds else "a number"


def _plural(kind: type, bounds: dict[str, float]) -> str:
    """'positive numbers', 'integers at least 2'."""
    noun = "integers" if kind is int else "numbers"
    if bounds == {"gt": 0}:
        return f"positive {noun}"
    return f"{noun} {_range(bounds)}" if bounds else noun


def within(value: float, bounds: dict[str, float]) -> bool:
    """Whether the number ``value`` keeps within ``bounds`` (``{"ge": 2}``)."""
    return all(_COMPARE[k](value, bound) for k, bound in bounds.items())


def out_of_bounds(kind: type, bounds: dict[str, float], value: Any,
                  words: str | None = None) -> str:
    """The one wording of a value its bounds rule out, for the searcher's check and
    the spec's (``orchestrator/spec/_derive.py``) alike: "must be an integer of at
    least 2, but got 1" (``words`` in place of :func:`must_be`'s, if given)."""
    return f"must be {words or must_be(kind, bounds)}, but got {value!r}"


def _is(kind: type, value: Any) -> bool:
    if isinstance(value, bool):
        return False
    if kind is int:
        return isinstance(value, int)
    return isinstance(value, int | float) and math.isfinite(value)


def _check_number(name: str, kind: type, value: Any, bounds: dict[str, float],
                  words: str | None) -> None:
    if not _is(kind, value) or not within(value, bounds):
        raise ValueError(f"{name} {out_of_bounds(kind, bounds, value, words)}")


def _check_list(name: str, kind: Any, value: Any, info: Info) -> None:
    (item,) = typing.get_args(kind)
    if isinstance(value, str | bytes) or not isinstance(value, Sequence):
        raise ValueError(f"{name} must be a list of {_plural(item, info.items)},"
                         f" but got {value!r}")
    if info.min_length is not None and len(value) < info.min_length:
        noun = name.split("_")[-1].removesuffix("s")
        count = "one" if info.min_length == 1 else str(info.min_length)
        got = "none" if not value else f"{len(value)}"
        raise ValueError(f"{name} must list at least {count} {noun}"
                         f"{'' if info.min_length == 1 else 's'}, but got {got}")
    if item in (int, float):
        for each in value:
            _check_number(name, item, each, info.items, None)


def check_value(setting: Declared, value: Any) -> None:
    """Refuse ``value`` for ``setting`` if its declared type or bounds rule it out."""
    info, kind, name = setting.info, setting.annotation, setting.name
    if info.check is not None:
        info.check(value)
        return
    if typing.get_origin(kind) in (typing.Union, types.UnionType):
        members = typing.get_args(kind)
        if value is None and type(None) in members:
            return
        kinds = [m for m in members if m is not type(None)]
        if isinstance(value, dict) and any(typing.get_origin(m) is dict for m in kinds):
            return  # a mapping form: the searcher reads it (grid points by name)
        kind = next((m for m in kinds if m in (int, float)), kinds[0])
    if typing.get_origin(kind) is Literal:
        choices = typing.get_args(kind)
        if value not in choices:
            raise ValueError(f"{name} must be one of {', '.join(map(str, choices))},"
                             f" but got {value!r}")
    elif typing.get_origin(kind) is list:
        _check_list(name, kind, value, info)
    elif kind in (int, float):
        _check_number(name, kind, value, info.bounds, info.words)


def check(settings: Any) -> None:
    """Check each declared setting of ``settings``, in declaration order (so the first
    setting declared is the one a message names when several are wrong)."""
    for item in declared(type(settings)):
        check_value(item, getattr(settings, item.name))


@dataclass(frozen=True)
class SearchSettings:
    """What every search takes; made, it has checked its values (:func:`check`)."""

    seed: int = setting(0, "seed for every random choice of the search")
    budget: int | dict[str, float] | None = budget_setting(None)

    def __post_init__(self) -> None:
        check(self)
        self.check()

    def check(self) -> None:
        """Rules across settings (``elitism`` below ``population``), after each value's
        own. Written here once: the spec's model for the search calls this too, on
        itself (it has the same fields), so its error names the same rule in the same
        words."""
