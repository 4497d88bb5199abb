"""Turn validation failures into messages a person can act on.

Each problem names the file, the line and column, the field path
(``stages[0].search.population``), what was found and what is allowed. The
CLI prints them and exits with status 2; nothing here raises anything but
SpecError.
"""

from __future__ import annotations

import difflib
import types
import typing
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ValidationError

from ._yaml import LocatedDict, LocatedList, Mark

if TYPE_CHECKING:
    from nestor.trainers.catalog import Option

Loc = tuple[Any, ...]


@dataclass(frozen=True)
class Problem:
    file: str
    mark: Mark | None
    path: str
    message: str

    def __str__(self) -> str:
        where = self.file
        if self.mark is not None:
            where += f":{self.mark.line}:{self.mark.column}"
        return f"{where}: {self.path}: {self.message}" if self.path else f"{where}: {self.message}"


class SpecError(Exception):
    """A spec that cannot be used, with every problem found in it."""

    def __init__(self, problems: Sequence[Problem]) -> None:
        self.problems = list(problems)
        super().__init__("\n".join(str(p) for p in self.problems))


def did_you_mean(word: object, choices: Iterable[object]) -> str:
    options = [str(c) for c in choices]
    close = difflib.get_close_matches(str(word), options, n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


def allowed(choices: Iterable[object]) -> str:
    return "allowed: " + ", ".join(str(c) for c in choices)


def short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def option_mismatch(option: Option, value: Any) -> str | None:
    """What is wrong with ``value`` for a trainer's option, or None when it fits."""
    if option.type is float and isinstance(value, int | float) and not isinstance(value, bool):
        return None
    if option.type is list and isinstance(value, list):
        return None
    if not isinstance(value, option.type) or (option.type is int and isinstance(value, bool)):
        return f"must be {option.type.__name__}, but got {short(value)}"
    if option.choices and value not in option.choices:
        return (
            f"must be one of {', '.join(map(str, option.choices))}, but got {short(value)}"
            + did_you_mean(value, option.choices)
        )
    return None


def locate(data: Any, loc: Loc, missing: bool = False) -> tuple[Mark | None, str]:
    """Follow a validation location through the loaded YAML.

    Returns the position of the deepest part of ``loc`` present in the file
    and a dotted path for people. Parts that are not in the data (the tags
    pydantic adds for union members) are skipped; with ``missing`` the last
    part is a key absent from the file, named at its parent's position.
    """
    mark: Mark | None = getattr(data, "mark", None)
    path = ""
    node = data
    for index, part in enumerate(loc):
        if isinstance(node, LocatedDict) and part in node:
            mark = node.key_marks[part]
            path += f".{part}" if path else str(part)
            node = node[part]
        elif isinstance(node, LocatedList) and isinstance(part, int) and 0 <= part < len(node):
            mark = node.item_marks[part]
            path += f"[{part}]"
            node = node[part]
        elif missing and index == len(loc) - 1:
            path += f".{part}" if path else str(part)
    return mark, path


def _number(value: Any) -> Any:
    return int(value) if isinstance(value, float) and value.is_integer() else value


def kind_of(value: Any) -> str:
    """How a YAML value reads to a person: 'a list', 'a mapping', 'the number 3'."""
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, str):
        return f"the string {short(value)}"
    return f"{short(value)}"


def _model_at(root: type[BaseModel], loc: Loc) -> type[BaseModel] | None:
    """The pydantic model class that validates the value at ``loc``, if any."""
    annotation: Any = root
    for part in loc:
        annotation = _unwrap(annotation, part)
        if annotation is None:
            return None
    model = _unwrap(annotation, None)
    return model if isinstance(model, type) and issubclass(model, BaseModel) else None


def _unwrap(annotation: Any, part: Any) -> Any:
    """One step down ``annotation`` along ``part`` (None: stay, if possible)."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _unwrap(typing.get_args(annotation)[0], part)
    if origin in (typing.Union, types.UnionType):
        members = [a for a in typing.get_args(annotation) if a is not type(None)]
        if isinstance(part, str):  # a discriminator tag picks the member
            for member in members:
                model = _unwrap(member, None)
                if isinstance(model, type) and issubclass(model, BaseModel):
                    for field in model.model_fields.values():
                        if typing.get_origin(field.annotation) is typing.Literal and part in (
                            typing.get_args(field.annotation)
                        ):
                            return model
        models = [m for m in (_unwrap(a, None) for a in members) if m is not None]
        if part is None:
            return models[0] if len(models) == 1 else None
        for model in models:
            found = _unwrap(model, part)
            if found is not None:
                return found
        return None
    if part is None:
        return annotation
    if origin in (list, tuple) and isinstance(part, int):
        return typing.get_args(annotation)[0]
    if origin is dict and isinstance(part, str):
        return typing.get_args(annotation)[1]
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        for name, field in annotation.model_fields.items():
            if part in (name, field.alias):
                return field.annotation
        return None
    return None


def _field_names(model: type[BaseModel]) -> list[str]:
    return [field.alias or name for name, field in model.model_fields.items()]


def describe_pydantic_error(root: type[BaseModel], error: dict[str, Any],
                            discriminators: Mapping[str, Sequence[str]] | None = None,
                            ) -> tuple[Loc, str]:
    """Rephrase one pydantic error as (location, 'X must be ..., but got ...').
    ``discriminators``: each tagged union's tag field and the values it allows (the
    model's, handed in, so that this module does not import the model)."""
    loc: Loc = tuple(error["loc"])
    kind = error["type"]
    ctx = error.get("ctx") or {}
    got = error.get("input")
    if kind == "extra_forbidden":
        key = loc[-1]
        model = _model_at(root, loc[:-1])
        names = _field_names(model) if model else []
        hint = did_you_mean(key, names)
        if not names:
            return loc, f"unknown field {key!r}"
        return loc, f"unknown field {key!r}{hint} ({allowed(names)})"
    if kind == "missing":
        return loc, f"missing required field {loc[-1]!r}"
    if kind == "union_tag_invalid":
        tags = ctx.get("expected_tags", "")
        disc = ctx.get("discriminator", "").strip("'")
        choices = [t.strip().strip("'") for t in str(tags).split(",")]
        return (*loc, disc), (
            f"must be one of {', '.join(choices)}, but got {short(ctx.get('tag'))}"
            f"{did_you_mean(ctx.get('tag'), choices)}"
        )
    if kind == "union_tag_not_found":
        disc = str(ctx.get("discriminator", "")).strip("'")
        choices = allowed((discriminators or {}).get(disc, ()))
        if isinstance(got, dict):
            return (*loc, disc), f"missing required field {disc!r} ({choices})"
        return loc, f"must be a mapping with a {disc!r} field ({choices}), but got {short(got)}"
    if kind == "literal_error":
        expected = str(ctx.get("expected", ""))
        choices = [c.strip().strip("'") for c in expected.replace(" or ", ", ").split(",")]
        return loc, f"must be one of {', '.join(choices)}, but got {short(got)}" + did_you_mean(
            got, choices
        )
    if kind in ("greater_than_equal", "greater_than", "less_than_equal", "less_than"):
        words = {
            "greater_than_equal": ("at least", "ge"),
            "greater_than": ("greater than", "gt"),
            "less_than_equal": ("at most", "le"),
            "less_than": ("less than", "lt"),
        }[kind]
        return loc, f"must be {words[0]} {_number(ctx.get(words[1]))}, but got {short(got)}"
    if kind == "too_short":
        return loc, f"must have at least {ctx.get('min_length')} item(s), but got {short(got)}"
    if kind == "string_pattern_mismatch":
        return loc, (
            f"must be a name of letters, digits, '_', '.' or '-' starting with a letter,"
            f" but got {short(got)}"
        )
    if kind in ("model_type", "model_attributes_type", "dict_type"):
        return loc, f"must be a mapping, but got {short(got)}"
    if kind == "value_error":
        message = str(ctx.get("error", error["msg"]))
        return loc, message
    if kind == "finite_number":
        return loc, f"must be a finite number, but got {short(got)}"
    type_words = {
        "int": "an integer", "float": "a number", "bool": "true or false",
        "string": "a string", "list": "a list",
    }
    for prefix, words in type_words.items():
        if kind.startswith(prefix + "_"):
            return loc, f"must be {words}, but got {short(got)}"
    return loc, f"{error['msg'][0].lower()}{error['msg'][1:]}, but got {short(got)}"


def problems_from_validation(
    file: str, data: Any, root: type[BaseModel], exc: ValidationError,
    discriminators: Mapping[str, Sequence[str]] | None = None,
) -> list[Problem]:
    # Errors at one place come from the members of a union (str | list, ...):
    # report them as one problem listing each form that was tried.
    found: dict[str, tuple[Mark | None, list[str]]] = {}
    for error in exc.errors(include_url=False):
        loc, message = describe_pydantic_error(root, error, discriminators)
        is_missing = error["type"] in ("missing", "union_tag_not_found")
        mark, path = locate(data, loc, missing=is_missing)
        messages = found.setdefault(path, (mark, []))[1]
        if message not in messages:
            messages.append(message)
    return [
        Problem(file, mark, path, messages[0] if len(messages) == 1 else "; or ".join(messages))
        for path, (mark, messages) in found.items()
    ]
