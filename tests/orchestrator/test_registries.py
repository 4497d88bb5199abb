"""Each plug-in family's names agree wherever they are listed (issue 42 item 2).

A search algorithm is named once, by its class (``@register``, search/_registry.py), and
read from there by the spec (its ``ALGORITHMS``, models, rules and ``search`` union),
``nestor sweep --algorithm`` and its help, and the README's spec table; a stage kind in
the spec's ``Stage`` union, the engine's runners and the projections' reports; a
communication backend by its ``Comm`` class (trainers/comm.py), read by the spec's
``backend`` field, ``nestor sweep --backend``, ``python -m nestor.trainers --backend``
and the README. A name added to one list and not the others fails here, not in a
user's run. tests/orchestrator/test_extending.py builds a new member of each family.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
import typing
from pathlib import Path

import click
import pytest

from nestor import search
from nestor.orchestrator.commands.cli import cli
from nestor.orchestrator.engine import kinds as engine_kinds
from nestor.orchestrator.projections import kinds as report_kinds
from nestor.orchestrator.spec import model
from nestor.search import _registry
from nestor.trainers import comm

README = Path(__file__).resolve().parents[2] / "README.md"


def _choices(command: str, option: str) -> set[str]:
    params = {p.name: p for p in cli.commands[command].params}
    kind = params[option].type
    assert isinstance(kind, click.Choice)
    return set(kind.choices)


def _readme_row(key: str) -> str:
    """The README spec table's row for ``key`` (its first cell)."""
    for line in README.read_text().splitlines():
        if line.startswith(f"| {key} |"):
            return line
    raise AssertionError(f"README.md has no spec table row for {key}")


def search_lists() -> dict[str, set[str]]:
    """Every list of search algorithms, by where it is."""
    readme = re.search(r"`algorithm: ([^`]+)`", _readme_row("hpo `search`"))
    assert readme is not None
    return {
        "registry (and auto)": {*search.ALGORITHMS, "auto"},
        "spec ALGORITHMS": set(model.ALGORITHMS),
        "spec models": set(model.SEARCH_MODELS),
        "spec rules": set(model.SEARCH_RULES),
        "spec search union": {typing.get_args(m.model_fields["algorithm"].annotation)[0]
                              for m in typing.get_args(
                                  model.HpoStage.model_fields["search"].annotation)},
        "sweep --algorithm": _choices("sweep", "algorithm"),
        "README spec table": {w.split()[0] for w in readme.group(1).split(r"\|")},
    }


def _disagreements(lists: dict[str, set[str]]) -> dict[str, set[str]]:
    every = set().union(*lists.values())
    return {where: every - names for where, names in lists.items() if names != every}


def test_search_algorithms_are_named_alike_everywhere() -> None:
    assert _disagreements(search_lists()) == {}


def test_a_name_in_one_list_only_is_found(monkeypatch: pytest.MonkeyPatch) -> None:
    """The check above fails when the lists disagree: a searcher registered after the
    spec was built (so only the registry has it) is named as missing everywhere else."""
    monkeypatch.setitem(search.ALGORITHMS, "annealing", search.RandomSearch)
    missing = _disagreements(search_lists())
    assert "registry (and auto)" not in missing
    assert missing["spec models"] == {"annealing"} == missing["README spec table"]


def test_every_searcher_class_is_registered_or_a_variant() -> None:
    """A searcher class that names an algorithm but forgot ``@register`` is not silently
    left out of every list."""
    variants = {cls for found in _registry._VARIANTS.values() for _, cls in found}
    package = importlib.import_module("nestor.search")
    for info in pkgutil.iter_modules(package.__path__):
        module = importlib.import_module(f"nestor.search.{info.name}")
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if (issubclass(cls, search.Searcher) and cls.__module__ == module.__name__
                    and cls.__dict__.get("algorithm")):
                assert search.ALGORITHMS.get(cls.algorithm) is cls or cls in variants, cls


def test_a_name_is_taken_once() -> None:
    class Another(search.RandomSearch):
        algorithm = "grid"

    with pytest.raises(ValueError, match=r"algorithm 'grid' is taken by .*GridSearch"):
        search.register(Another)
    assert search.ALGORITHMS["grid"] is search.GridSearch


def test_the_spec_rules_follow_the_classes_traits() -> None:
    """A search whose class continues trials gets the spec's ``fidelity`` and the
    trainer's checkpoints asked for; rules that extend an algorithm name a real one."""
    for name in search.ALGORITHMS:
        continuing = issubclass(model.SEARCH_RULES[name], model._ContinuingSearch)
        assert continuing == search.continues_trials(name), name
        assert ("fidelity" in model.SEARCH_MODELS[name].model_fields) == continuing
    assert set(model._SearchBase._extended) <= set(model.ALGORITHMS)


def test_stage_kinds_have_a_runner_and_a_report_each() -> None:
    kinds = set(model.STAGE_KINDS)
    assert set(engine_kinds.KINDS) == kinds
    runners = {m.name for m in pkgutil.iter_modules(engine_kinds.__path__)
               if not m.name.startswith("_")}
    reports = {m.name for m in pkgutil.iter_modules(report_kinds.__path__)
               if not m.name.startswith("_")}
    assert kinds <= runners  # the engine's package also holds helpers (combine)
    assert reports == kinds


def backend_lists() -> dict[str, set[str]]:
    from nestor.trainers.__main__ import parser

    (action,) = [a for a in parser()._actions if "--backend" in a.option_strings]
    readme = _readme_row("`stages[].backend`")
    return {
        "trainers.comm": set(comm.BACKENDS),
        "spec backend": set(typing.get_args(model.HpoStage.model_fields["backend"].annotation)),
        "sweep --backend": _choices("sweep", "backend"),
        "python -m nestor.trainers --backend": set(action.choices),
        "README spec table": set(re.findall(r"`(\w+)`", readme.split("|")[2])),
    }


def test_communication_backends_are_declared_once() -> None:
    assert _disagreements(backend_lists()) == {}
    for name, cls in comm.BACKENDS.items():
        assert cls.backend == name and cls.about and cls.rendezvous in comm.RENDEZVOUS
