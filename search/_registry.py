"""The search algorithms, each named once: by its class, where it is implemented.

A searcher class names itself (``algorithm = "grid"``) and registers with one line,
``@register``; an engine that runs an algorithm for some of its settings
(``bayesian`` with ``sampler: lq-cmaes`` runs on pycma, not Optuna) registers with
``@variant("bayesian", sampler="lq-cmaes")``. Everything that lists the algorithms
reads them from here: :func:`make_searcher`, the workflow spec's ``search:`` models
and their ``algorithm`` discriminator, `nestor sweep --algorithm` and its help, the
docs check and the tests' parametrisations. So a new algorithm is its own module
(and its tests): :func:`discover` imports every module of this package, and the
modules other packages declare under the ``nestor.search`` entry-point group (a
search that lives outside nestor), so the decorator is all the wiring there is.

What the spec adds to an algorithm it reads from traits the class declares
(``continues_trials``: its trials continue earlier trials' checkpoints;
``renamed_settings``: old spellings of its settings), never from a list of names.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from nestor.search._base import Searcher

AUTO = "auto"
"""Not an algorithm of its own: it picks a registered one (``search/_auto.py``)."""

ENTRY_POINTS = "nestor.search"
"""The entry-point group whose modules :func:`discover` imports too (each registers its
searchers as the built-in ones do)."""

ALGORITHMS: dict[str, type[Searcher]] = {}
"""Name -> the class that runs it, in the order registered (kept sorted by name)."""

_VARIANTS: dict[str, list[tuple[dict[str, Any], type[Searcher]]]] = {}
_discovered = False

S = TypeVar("S", bound="type[Searcher]")


def register(cls: S) -> S:
    """Class decorator: ``cls`` runs the algorithm its ``algorithm`` attribute names.

    A name taken by another class, or none, is an error when the module loads, so two
    searchers never answer to one name."""
    name = getattr(cls, "algorithm", "")
    if not name or not isinstance(name, str):
        raise TypeError(f"{cls.__qualname__} must name its algorithm (algorithm = 'name')"
                        " to be registered")
    if name == AUTO:
        raise ValueError(f"{cls.__qualname__}: {AUTO!r} is the spec's own pick, not a name"
                         " an algorithm may take")
    known = ALGORITHMS.get(name)
    same = known is not None and (known.__module__, known.__qualname__) == (
        cls.__module__, cls.__qualname__)  # its module loaded again
    if known is not None and not same:
        raise ValueError(f"algorithm {name!r} is taken by {known.__module__}."
                         f"{known.__qualname__}; {cls.__module__}.{cls.__qualname__}"
                         " must take another name")
    ALGORITHMS[name] = cls
    for key in sorted(ALGORITHMS):  # a stable order, whatever order modules load in
        ALGORITHMS[key] = ALGORITHMS.pop(key)
    return cls


def variant(of: str, **when: Any) -> Callable[[S], S]:
    """Class decorator: ``cls`` runs algorithm ``of`` where its settings say ``when``
    (``@variant("bayesian", sampler="lq-cmaes")``); same settings, same state's
    ``algorithm``, another engine."""

    def add(cls: S) -> S:
        _VARIANTS.setdefault(of, []).append((dict(when), cls))
        return cls

    return add


def discover() -> None:
    """Import every module of this package once, and each module registered under the
    ``nestor.search`` entry-point group, so every ``@register`` has run."""
    global _discovered
    if _discovered:
        return
    _discovered = True
    package = importlib.import_module("nestor.search")
    for module in pkgutil.iter_modules(package.__path__):
        importlib.import_module(f"nestor.search.{module.name}")
    from importlib.metadata import entry_points

    for point in entry_points(group=ENTRY_POINTS):
        point.load()


def algorithm_names() -> tuple[str, ...]:
    """Every name ``search.algorithm`` may take: ``auto``, then the registered ones."""
    return (AUTO, *ALGORITHMS)


def searcher_class(algorithm: str, settings: Mapping[str, Any] | None = None) -> type[Searcher]:
    """The class that runs ``algorithm`` with these settings (a variant where its
    settings match, else the registered class)."""
    if algorithm not in ALGORITHMS:
        raise ValueError(f"algorithm must be one of {', '.join(algorithm_names())},"
                         f" but got {algorithm!r}")
    for when, cls in _VARIANTS.get(algorithm, ()):
        if settings and all(settings.get(k) == v for k, v in when.items()):
            return cls
    return ALGORITHMS[algorithm]


def continues_trials(algorithm: str) -> bool:
    """Whether the algorithm's trials continue earlier trials' checkpoints (PBT, ASHA,
    Hyperband): the stage must then give it a fidelity and a trainer that continues."""
    return algorithm != AUTO and bool(ALGORITHMS[algorithm].continues_trials)


def renamed_settings(algorithm: str) -> dict[str, str]:
    """The algorithm's settings' old names -> their names now."""
    if algorithm == AUTO or algorithm not in ALGORITHMS:
        return {}
    return dict(ALGORITHMS[algorithm].renamed_settings)


def title(algorithm: str, settings: Mapping[str, Any]) -> str:
    """How messages name the algorithm with these settings (``PB2``, ``BOHB``): its
    class's ``title(settings)`` where it has one, else its name."""
    cls = searcher_class(algorithm, settings)
    named = getattr(cls, "title", None)
    return str(named(settings)) if callable(named) else algorithm
