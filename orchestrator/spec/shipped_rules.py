"""Constraints given to the Python API as functions no module imports by name (a
lambda, a function of a script's ``__main__`` or a notebook): the spec names them
``__main__:NAME`` and the run directory keeps them pickled, as it keeps such
trainers (``orchestrator.engine.shipped``). The search calls them on the driver;
this registry is where the driver puts them once it has read them (or where
``nestor.tune`` puts them as it is given them), so the spec layer never unpickles."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

MAIN = "__main__:"
_FUNCTIONS: dict[str, Callable[[dict[str, Any]], Any]] = {}


def register(name: str, function: Callable[[dict[str, Any]], Any]) -> None:
    """``function`` is the constraint the spec names ``name`` (``__main__:NAME``)."""
    _FUNCTIONS[name] = function


class ShippedRule:
    """A ``__main__:NAME`` constraint, looked up when first called (the driver
    registers it from the run directory before its search asks anything)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.__module__, _, self.__qualname__ = name.partition(":")  # Constraint.of's text

    def __call__(self, config: dict[str, Any]) -> Any:
        function = _FUNCTIONS.get(self.name)
        if function is None:
            raise ValueError(
                f"constraint function {self.name!r} was defined in a script's __main__ or"
                " a notebook and is not in the run directory's functions/: give the"
                " function itself to nestor.tune (it is shipped by value), or name an"
                " importable module ('package.module:function')")
        return function(config)
