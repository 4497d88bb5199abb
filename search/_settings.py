"""Each searcher's settings, declared once: type, default, bounds and a line of help.

A searcher declares its settings as a frozen dataclass of :func:`setting` fields
(``GeneticSearch.Settings``). Everything else is read from that declaration:
the searcher's constructor fills its keywords from it, the workflow spec's
pydantic model for the search is built from it (``orchestrator/spec/_derive.py``)
and so are the `nestor sweep` flags and their help. Adding a field here is the
whole of adding a setting to all three.

>>> from dataclasses import dataclass
>>> @dataclass(frozen=True)
... class Demo(SearchSettings):
...     width: int = setting(4, "how wide", ge=1)
>>> [s.name for s in declared(Demo)], Demo().width
(['seed', 'budget', 'width'], 4)
"""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass
from typing import Any

BOUNDS = ("ge", "gt", "le", "lt")


@dataclass(frozen=True)
class Info:
    """What a setting says besides its type and default.

    ``bounds``: pydantic-style ``ge``/``gt``/``le``/``lt`` on the number (on each
    number of a union). ``items``: the same for each item of a list setting.
    ``public``: False keeps a setting out of the spec and the flags (an
    operator's inner constant that a user has no reason to change).
    """

    help: str
    bounds: dict[str, float]
    items: dict[str, float]
    min_length: int | None = None
    public: bool = True


def setting(default: Any, help: str, *, ge: float | None = None, gt: float | None = None,
            le: float | None = None, lt: float | None = None,
            items: dict[str, float] | None = None, min_length: int | None = None,
            public: bool = True) -> Any:
    """A dataclass field for one setting (a list default is copied per instance)."""
    given = {"ge": ge, "gt": gt, "le": le, "lt": lt}
    info = Info(help, {k: v for k, v in given.items() if v is not None}, dict(items or {}),
                min_length, public)
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


BUDGET_HELP = ("most trials to run, or a cost: {slot_seconds: S}, {hours: H} (slot-hours) or"
               " {epochs: E} (fidelity units), also written 600slot-s, 30h, 300epochs")


@dataclass(frozen=True)
class SearchSettings:
    """What every search takes."""

    seed: int = setting(0, "seed for every random choice of the search")
    budget: int | dict[str, float] | None = setting(None, BUDGET_HELP, ge=1)
