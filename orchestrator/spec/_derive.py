"""The spec's search models, built from the searchers' own declarations.

A searcher declares each setting once (``search/_settings.py``: type, default,
bounds, a line of help). :func:`search_model` turns that declaration into the
pydantic model of a ``search:`` block, on a base class that adds what only the
spec knows (checks across fields, the trials a search plans, ``fidelity``). So
a setting added to a searcher is in the spec, with its default, bounds and
help, and reports errors like any other field.
"""

from __future__ import annotations

import functools
import operator
import types
import typing
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, GetCoreSchemaHandler, create_model
from pydantic_core import core_schema

from nestor.search import BOUNDS, Declared, declared, out_of_bounds, within


@dataclass(frozen=True)
class Bounds:
    """A number's bounds in a ``search:`` block, checked as the searcher checks them
    and worded by the same function (:func:`search._settings.out_of_bounds`), so a
    broken bound reads alike from the spec and from a searcher. It shows its bounds
    as pydantic's own do (``.ge``, ``.gt``, ``.le``, ``.lt``), which is how
    `nestor sweep` gives its flags their ranges."""

    kind: type
    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    lt: float | None = None
    words: str | None = None

    @property
    def bounds(self) -> dict[str, float]:
        return {k: getattr(self, k) for k in BOUNDS if getattr(self, k) is not None}

    def __get_pydantic_core_schema__(self, source: Any,
                                     handler: GetCoreSchemaHandler) -> core_schema.CoreSchema:
        return core_schema.no_info_wrap_validator_function(self._check, handler(source))

    def _check(self, value: Any, handler: core_schema.ValidatorFunctionWrapHandler) -> Any:
        number = handler(value)  # the type's own check first ("must be an integer")
        if not within(number, self.bounds):
            raise ValueError(out_of_bounds(self.kind, self.bounds, value, self.words))
        return number


def annotation(setting: Declared) -> Any:
    """The setting's type with its bounds on each number it may be, and on each item
    of a list (``int | None`` with ``ge=1`` -> ``Annotated[int, Field(ge=1)] | None``)."""
    return _bounded(setting.annotation, setting.info.bounds, setting.info.items,
                    setting.info.words)


def _bounded(kind: Any, bounds: dict[str, float], items: dict[str, float],
             words: str | None) -> Any:
    origin = typing.get_origin(kind)
    if origin in (typing.Union, types.UnionType):
        return functools.reduce(operator.or_, (_bounded(m, bounds, items, words)
                                               for m in typing.get_args(kind)))
    if origin is list and items:
        (item,) = typing.get_args(kind)
        return list[Annotated[item, Bounds(item, **items)]]  # type: ignore[valid-type]
    if kind in (int, float) and bounds:
        return Annotated[kind, Bounds(kind, **bounds, words=words)]
    return kind


def search_model(name: str, algorithm: str, settings: type, base: type[BaseModel],
                 keys: dict[str, str] | None = None) -> Any:
    """The model of a ``search:`` block with ``algorithm``: ``base``'s fields and
    checks, then the searcher's public settings as fields (seed and budget first).
    ``keys``: a setting's spec key where it is not the searcher's own name (the
    field's alias: the spec reads and reports the key, the searcher gets its name)."""
    fields: dict[str, Any] = {}
    for setting in declared(settings, public_only=True):
        default = setting.default
        extra: dict[str, Any] = {"description": setting.info.help}
        if keys and setting.name in keys:
            extra["alias"] = keys[setting.name]
        if setting.info.min_length is not None:
            extra["min_length"] = setting.info.min_length
        if isinstance(default, list):
            field = Field(default_factory=functools.partial(list, default), **extra)
        else:
            field = Field(default, **extra)
        fields[setting.name] = (annotation(setting), field)
        if setting.name == "budget":  # where the hand-written models had it
            fields["algorithm"] = (Literal[algorithm], ...)
    fields.setdefault("algorithm", (Literal[algorithm], ...))
    return create_model(name, __base__=base, __module__=base.__module__, **fields)
