"""Search spaces and ask/tell search algorithms.

Pure decision logic: no Ray, Horovod, MLflow or torch import here, so the
orchestrator can drive it from anywhere and tests run in milliseconds.
Optuna is imported only when a Bayesian search is built.

>>> from nestor.search import Objective, make_searcher
>>> from nestor.search.space import FloatParam, SearchSpace
>>> space = SearchSpace([FloatParam("x", -1.0, 1.0)])
>>> searcher = make_searcher("random", space, [Objective("loss", "min")], seed=0, budget=4)
>>> while not searcher.done():
...     for trial in searcher.ask(2):
...         _ = searcher.tell(trial.id, trial.config["x"] ** 2)
>>> len(searcher.observations)
4
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Any

from nestor.search import _registry
from nestor.search._auto import AutoChoice, AutoSettings, choose_search
from nestor.search._base import (
    Failure,
    Objective,
    Observation,
    Searcher,
    Trial,
    as_objectives,
    non_dominated,
    observations_from_state,
)
from nestor.search._bayesian import BayesianSearch
from nestor.search._budget import UNITS, UNLIMITED_TRIALS, parse_budget, parse_budget_text
from nestor.search._expression import Expression
from nestor.search._genetic import GeneticSearch, plan_generations
from nestor.search._grid import GridSearch
from nestor.search._hyperband import ASHASearch, HyperbandSearch, rung_budgets
from nestor.search._lq_cmaes import LQCMAESSearch, one_dimension
from nestor.search._pbt import PBTSearch, ScheduleStep, schedules_from_state
from nestor.search._random import RandomSearch
from nestor.search._registry import (
    ALGORITHMS,
    AUTO,
    algorithm_names,
    continues_trials,
    register,
    renamed_settings,
    title,
    variant,
)
from nestor.search._settings import (
    BOUNDS,
    Declared,
    SearchSettings,
    declared,
    out_of_bounds,
    setting,
    within,
)
from nestor.search.space import SearchSpace

_registry.discover()  # every module here (and the entry points'): each @register has run


def settings_class(algorithm: str) -> type[SearchSettings]:
    """The declaration of ``algorithm``'s settings (search/_settings.py)."""
    if algorithm == AUTO:
        return AutoSettings
    return _registry.searcher_class(algorithm).Settings


def settings_of(algorithm: str) -> list[str]:
    """The keyword settings ``make_searcher(algorithm, ...)`` accepts, in declared order
    (a subclass's after its base's)."""
    return [s.name for s in declared(settings_class(algorithm))]


def check_settings(algorithm: str, settings: Mapping[str, Any]) -> None:
    """Refuse settings the algorithm does not have, naming the ones it does.

    Without this a misspelt setting (``populaton=8``) surfaces as Python's bare
    ``TypeError: __init__() got an unexpected keyword argument``, which names
    neither the search nor what it would have accepted.
    """
    allowed = settings_of(algorithm)
    unknown = [name for name in settings if name not in allowed]
    if unknown:
        hints = []
        for name in unknown:
            close = difflib.get_close_matches(name, allowed, n=1)
            if close:
                hints.append(f"{name!r}: did you mean {close[0]!r}?")
        hint = f" ({'; '.join(hints)})" if hints else ""
        raise ValueError(
            f"{algorithm} search settings must be among {', '.join(allowed)},"
            f" but got {', '.join(repr(n) for n in unknown)}{hint}"
        )


def searcher_class(algorithm: str, settings: Mapping[str, Any]) -> type[Searcher]:
    """The class that runs ``algorithm`` with these settings: ``bayesian`` with
    ``sampler: lq-cmaes`` is pycma's surrogate-assisted CMA-ES, not Optuna's
    (same settings, same state's ``algorithm``, another engine: a ``@variant``)."""
    return _registry.searcher_class(algorithm, settings)


def one_objective_only(algorithm: str, settings: Mapping[str, Any]) -> str | None:
    """Why ``algorithm`` with these settings takes exactly one objective (None: it takes
    several; ``auto`` picks a search that does)."""
    if algorithm == AUTO:
        return None
    return searcher_class(algorithm, settings).one_objective(settings)


def make_searcher(algorithm: str, space: SearchSpace, objectives: Any, **settings: Any) -> Searcher:
    """Build a searcher by name with the spec's settings as keyword arguments.

    ``make_searcher(spec.search.algorithm, space, objectives,
    **spec.search.model_dump(exclude={"algorithm"}))``

    ``"auto"`` takes ``seed``, ``budget``, ``parallel`` (trials pending at
    once; 1 where None: the orchestrator passes the trials the stage's slots run at
    once where the spec sets none) and ``max_fidelity`` (a trial's full length where it can
    be trained in stretches; default None), builds what :func:`choose_search` picks and keeps the
    choice, with its reason, in the searcher's ``auto_choice``. The state is
    the chosen searcher's, and the same arguments choose the same again, so
    an auto search restores like any other.
    """
    check_settings(algorithm, settings)
    if algorithm != AUTO:
        return searcher_class(algorithm, settings)(space, objectives, **settings)
    parallel = settings.get("parallel")
    parallel = 1 if parallel is None else parallel  # the spec's default is None
    choice = choose_search(
        space,
        objectives,
        budget=settings.get("budget"),
        parallel=parallel,
        max_fidelity=settings.get("max_fidelity"),
        prefer=settings.get("prefer") or "anytime",
    )
    searcher = searcher_class(choice.algorithm, choice.settings)(
        space, objectives, seed=settings.get("seed", 0), **choice.settings
    )
    searcher.auto_choice = choice
    return searcher


__all__ = [
    "ALGORITHMS",
    "AUTO",
    "BOUNDS",
    "UNITS",
    "UNLIMITED_TRIALS",
    "ASHASearch",
    "AutoChoice",
    "BayesianSearch",
    "Declared",
    "Expression",
    "Failure",
    "GeneticSearch",
    "GridSearch",
    "HyperbandSearch",
    "LQCMAESSearch",
    "Objective",
    "Observation",
    "PBTSearch",
    "RandomSearch",
    "ScheduleStep",
    "SearchSettings",
    "Searcher",
    "Trial",
    "algorithm_names",
    "as_objectives",
    "check_settings",
    "choose_search",
    "continues_trials",
    "declared",
    "make_searcher",
    "non_dominated",
    "observations_from_state",
    "one_dimension",
    "one_objective_only",
    "out_of_bounds",
    "parse_budget",
    "parse_budget_text",
    "plan_generations",
    "register",
    "renamed_settings",
    "rung_budgets",
    "schedules_from_state",
    "searcher_class",
    "setting",
    "settings_class",
    "settings_of",
    "title",
    "variant",
    "within",
]
