"""Constraint expressions: a small, safe language over parameter names.

A spec is data, and a constraint written in one must never run arbitrary code:
the text is parsed with :mod:`ast` and only a whitelist of node types is
accepted (numbers, strings, booleans, names of parameters, arithmetic,
comparisons, ``and``/``or``/``not``, ``x if c else y``, tuples and lists for
``in``, and the functions in :data:`FUNCTIONS`). Evaluation walks the tree
itself; Python's ``eval`` is never called.

>>> e = Expression.parse("lr * batch_size <= 2 and optimizer != 'sgd'")
>>> sorted(e.names)
['batch_size', 'lr', 'optimizer']
>>> e.evaluate({"lr": 0.01, "batch_size": 64, "optimizer": "adam"})
True
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

FUNCTIONS: dict[str, Callable[..., Any]] = {
    "abs": abs, "min": min, "max": max, "round": round,
    "log": math.log, "log2": math.log2, "log10": math.log10, "exp": math.exp,
    "sqrt": math.sqrt,
}
_BINARY: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
    ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY: dict[type, Callable[[Any], Any]] = {
    ast.USub: operator.neg, ast.UAdd: operator.pos, ast.Not: operator.not_,
}
_COMPARE: dict[type, Callable[[Any, Any], bool]] = {
    ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
    ast.Gt: operator.gt, ast.GtE: operator.ge,
    ast.In: lambda a, b: a in b, ast.NotIn: lambda a, b: a not in b,
}
_MAX_POWER = 1024  # 10 ** 10 ** 9 would hang the driver: exponents stay small
_MAX_LENGTH = 2000


class ExpressionError(ValueError):
    """A constraint that cannot be parsed, or uses what the language does not allow."""


@dataclass(frozen=True)
class Expression:
    """A parsed constraint: its text, the tree and the parameter names it reads."""

    text: str
    tree: ast.Expression
    names: frozenset[str]

    @classmethod
    def parse(cls, text: Any) -> Expression:
        if not isinstance(text, str) or not text.strip():
            raise ExpressionError(f"a constraint must be a non-empty string, but got {text!r}")
        if len(text) > _MAX_LENGTH:
            raise ExpressionError(f"a constraint must be at most {_MAX_LENGTH} characters,"
                                  f" but this one has {len(text)}")
        try:
            tree = ast.parse(text.strip(), mode="eval")
        except SyntaxError as exc:
            raise ExpressionError(
                f"constraint {text!r} is not an expression ({exc.msg} at column"
                f" {exc.offset}); write e.g. \"lr * batch_size <= 2\"") from None
        names: set[str] = set()
        _check(tree.body, names, text)
        return cls(text, tree, frozenset(names))

    def evaluate(self, config: Mapping[str, Any]) -> Any:
        """The expression's value with the parameters of ``config``; a name that
        ``config`` lacks raises KeyError."""
        return _eval(self.tree.body, config)


def _refuse(node: ast.AST, text: str, what: str) -> ExpressionError:
    allowed = ("numbers, strings, parameter names, + - * / // % **, comparisons, and/or/not,"
               f" x if c else y, tuples and lists, and the functions {', '.join(FUNCTIONS)}")
    return ExpressionError(f"constraint {text!r} uses {what}, which a constraint may not"
                           f" (allowed: {allowed})")


def _check(node: ast.AST, names: set[str], text: str) -> None:
    """Refuse every node outside the whitelist; collect the names read."""
    if isinstance(node, ast.Constant):
        if not isinstance(node.value, bool | int | float | str):
            raise _refuse(node, text, f"the constant {node.value!r}")
        return
    if isinstance(node, ast.Name):
        if node.id in FUNCTIONS:
            raise _refuse(node, text, f"the function {node.id} without a call")
        names.add(node.id)
        return
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        children: list[ast.AST] = [node.left, node.right]
    elif isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        children = [node.operand]
    elif isinstance(node, ast.BoolOp):
        children = list(node.values)
    elif isinstance(node, ast.Compare) and all(type(op) in _COMPARE for op in node.ops):
        children = [node.left, *node.comparators]
    elif isinstance(node, ast.IfExp):
        children = [node.test, node.body, node.orelse]
    elif isinstance(node, ast.Tuple | ast.List):
        children = list(node.elts)
    elif isinstance(node, ast.Call):
        if not isinstance(node.func, ast.Name) or node.func.id not in FUNCTIONS:
            raise _refuse(node, text, f"a call of {ast.unparse(node.func)}")
        if node.keywords:
            raise _refuse(node, text, "keyword arguments")
        children = list(node.args)
    else:
        raise _refuse(node, text, f"{ast.unparse(node)!r} ({type(node).__name__})")
    for child in children:
        _check(child, names, text)


def _eval(node: ast.AST, config: Mapping[str, Any]) -> Any:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        return config[node.id]
    if isinstance(node, ast.BinOp):
        left, right = _eval(node.left, config), _eval(node.right, config)
        if isinstance(node.op, ast.Pow) and isinstance(right, int | float) \
                and abs(right) > _MAX_POWER:
            raise ValueError(f"an exponent must be at most {_MAX_POWER}, but got {right}")
        return _BINARY[type(node.op)](left, right)
    if isinstance(node, ast.UnaryOp):
        return _UNARY[type(node.op)](_eval(node.operand, config))
    if isinstance(node, ast.BoolOp):
        if isinstance(node.op, ast.And):
            return all(_eval(v, config) for v in node.values)
        return any(_eval(v, config) for v in node.values)
    if isinstance(node, ast.Compare):
        left = _eval(node.left, config)
        for op, right_node in zip(node.ops, node.comparators, strict=True):
            right = _eval(right_node, config)
            if not _COMPARE[type(op)](left, right):
                return False
            left = right
        return True
    if isinstance(node, ast.IfExp):
        return _eval(node.body if _eval(node.test, config) else node.orelse, config)
    if isinstance(node, ast.Tuple | ast.List):
        return tuple(_eval(e, config) for e in node.elts)
    assert isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
    return FUNCTIONS[node.func.id](*(_eval(a, config) for a in node.args))
