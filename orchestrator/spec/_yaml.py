"""Safe YAML loading that remembers where every value came from.

Validation errors must name the file and line of the offending field, so the
loader returns mappings and sequences that carry the source position of each
of their items. It also refuses inputs meant to exhaust memory or time:
oversized files, alias "billion laughs" bombs (measured by the size the
document would have once aliases are expanded, without expanding it), and
nesting deep enough to overflow the parser's recursion.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import yaml

MAX_FILE_BYTES = 1 << 20  # 1 MiB: a workflow spec is a page or two
MAX_EXPANDED_NODES = 100_000  # values after expanding aliases
MAX_DEPTH = 64
TOO_LARGE = f"the file is larger than {MAX_FILE_BYTES // 1024} KiB; refusing to read it"


@dataclass(frozen=True)
class Mark:
    """A 1-based line and column in the spec file."""

    line: int
    column: int


class YamlProblem(Exception):
    """The text is not YAML we are willing to read; carries where, when known."""

    def __init__(self, message: str, mark: Mark | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.mark = mark


class LocatedDict(dict):
    """A dict that knows the position of itself and of each of its keys."""

    mark: Mark
    key_marks: dict[Any, Mark]
    value_marks: dict[Any, Mark]


class LocatedList(list):
    """A list that knows the position of itself and of each item."""

    mark: Mark
    item_marks: list[Mark]


def _mark(node: yaml.Node) -> Mark:
    return Mark(node.start_mark.line + 1, node.start_mark.column + 1)


class _Loader(yaml.SafeLoader):
    """SafeLoader (no arbitrary objects) that builds Located containers."""


def _construct_mapping(loader: _Loader, node: yaml.MappingNode) -> LocatedDict:
    loader.flatten_mapping(node)  # applies YAML merge keys (<<: *base)
    result = LocatedDict()
    result.mark = _mark(node)
    result.key_marks = {}
    result.value_marks = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        try:
            hash(key)
        except TypeError:
            raise YamlProblem("a mapping key must be a plain value", _mark(key_node)) from None
        if key in result.key_marks:
            first = result.key_marks[key]
            raise YamlProblem(
                f"duplicate key {key!r} (first given on line {first.line})", _mark(key_node)
            )
        result[key] = loader.construct_object(value_node, deep=True)
        result.key_marks[key] = _mark(key_node)
        result.value_marks[key] = _mark(value_node)
    return result


def _construct_sequence(loader: _Loader, node: yaml.SequenceNode) -> LocatedList:
    result = LocatedList(loader.construct_object(child, deep=True) for child in node.value)
    result.mark = _mark(node)
    result.item_marks = [_mark(child) for child in node.value]
    return result


# YAML 1.1 reads 1e-4 as a string (it wants 1.0e-4); users of a tuning tool
# write learning rates as 1e-4, so accept the exponent form as a float too.
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)
_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)
_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_SEQUENCE_TAG, _construct_sequence)


def _check_size(root: yaml.Node) -> None:
    """Refuse documents too deep or too large once aliases are expanded.

    Aliases make the node graph a DAG that may be exponentially larger when
    expanded; sizes are memoised per node so this check itself stays linear.
    """
    sizes: dict[int, int] = {}

    def size(node: yaml.Node, depth: int) -> int:
        if depth > MAX_DEPTH:
            raise YamlProblem(f"nesting is deeper than {MAX_DEPTH} levels", _mark(node))
        known = sizes.get(id(node))
        if known is not None:
            return known
        total = 1
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                total += size(key, depth + 1) + size(value, depth + 1)
        elif isinstance(node, yaml.SequenceNode):
            for child in node.value:
                total += size(child, depth + 1)
        if total > MAX_EXPANDED_NODES:
            raise YamlProblem(
                f"the document expands to more than {MAX_EXPANDED_NODES:,} values"
                " (an alias bomb?); refusing to read it",
                _mark(node),
            )
        sizes[id(node)] = total
        return total

    size(root, 0)


def _problem(exc: yaml.YAMLError, text: str) -> YamlProblem:
    if isinstance(exc, yaml.reader.ReaderError):
        line = text.count("\n", 0, exc.position) + 1
        column = exc.position - (text.rfind("\n", 0, exc.position) + 1) + 1
        return YamlProblem(
            f"invalid YAML: character {exc.character!r} is not allowed", Mark(line, column)
        )
    if isinstance(exc, yaml.MarkedYAMLError):
        mark = exc.problem_mark or exc.context_mark
        where = Mark(mark.line + 1, mark.column + 1) if mark else None
        if isinstance(exc, yaml.constructor.ConstructorError):
            return YamlProblem(f"unsupported YAML: {exc.problem}", where)
        return YamlProblem(f"invalid YAML: {exc.problem or exc.context}", where)
    return YamlProblem(f"invalid YAML: {exc}")


def load_yaml(text: str) -> Any:
    """Parse one YAML document safely; raise YamlProblem with a position if not."""
    if len(text.encode("utf-8", "surrogatepass")) > MAX_FILE_BYTES:
        raise YamlProblem(TOO_LARGE)
    loader = None
    try:
        loader = _Loader(text)
        node = loader.get_single_node()
        if node is None:
            return None
        _check_size(node)
        return loader.construct_document(node)
    except yaml.YAMLError as exc:
        raise _problem(exc, text) from None
    except RecursionError:
        raise YamlProblem(f"nesting is deeper than {MAX_DEPTH} levels") from None
    finally:
        if loader is not None:
            loader.dispose()
