"""Each plug-in family's names agree wherever they are listed (issue 42 item 2).

A search algorithm is named in ``search.ALGORITHMS`` (its class), the spec's
``ALGORITHMS`` and its per-algorithm rules and models, and ``nestor sweep
--algorithm``; a stage kind in the spec's ``Stage`` union, the engine's runners and the
projections' reports; a communication backend in ``trainers.comm``, the spec's
``backend`` field and ``nestor sweep --backend``. A name added to one list and not the
others fails here, not in a user's run.
"""

from __future__ import annotations

import pkgutil
import typing

import click

from nestor import search
from nestor.orchestrator.backends import shape
from nestor.orchestrator.commands.cli import cli
from nestor.orchestrator.engine import kinds as engine_kinds
from nestor.orchestrator.projections import kinds as report_kinds
from nestor.orchestrator.spec import model
from nestor.trainers import comm


def _choices(command: str, option: str) -> set[str]:
    params = {p.name: p for p in cli.commands[command].params}
    kind = params[option].type
    assert isinstance(kind, click.Choice)
    return set(kind.choices)


def test_search_algorithms_are_named_alike_everywhere() -> None:
    names = set(search.ALGORITHMS) | {"auto"}  # auto picks one of the others
    assert set(model.ALGORITHMS) == names
    assert set(model.SEARCH_MODELS) == names
    assert set(model.SEARCH_RULES) == names
    assert _choices("sweep", "algorithm") == names


def test_stage_kinds_have_a_runner_and_a_report_each() -> None:
    kinds = set(model.STAGE_KINDS)
    assert set(engine_kinds.KINDS) == kinds
    runners = {m.name for m in pkgutil.iter_modules(engine_kinds.__path__)
               if not m.name.startswith("_")}
    reports = {m.name for m in pkgutil.iter_modules(report_kinds.__path__)
               if not m.name.startswith("_")}
    assert kinds <= runners  # the engine's package also holds helpers (combine)
    assert reports == kinds


def test_communication_backends_are_declared_once() -> None:
    assert shape.BACKENDS is comm.BACKENDS
    spec_field = model.HpoStage.model_fields["backend"].annotation
    assert set(typing.get_args(spec_field)) == set(comm.BACKENDS)
    assert _choices("sweep", "backend") == set(comm.BACKENDS)
