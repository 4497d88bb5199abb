"""Budgets in a spec: trials, or a cost the search spends; auto when no algorithm."""

from __future__ import annotations

import pytest

from nestor.orchestrator.spec import SpecError, load_spec_text
from nestor.search import make_searcher

SPEC = """
name: demo
stages:
  - name: tune
    kind: hpo
    trainer: {{name: mlp, settings: {{dataset: digits, epochs: 9}}}}
    search: {search}
    space:
      lr: {{type: float, low: 0.001, high: 0.1}}
      momentum: {{type: float, low: 0, high: 0.9}}
"""


def stage(search: str):
    return load_spec_text(SPEC.format(search=search)).stage("tune")


@pytest.mark.parametrize(
    ("search", "budget"),
    [("{algorithm: random, budget: {slot_seconds: 600}}", {"slot_seconds": 600}),
     ("{algorithm: genetic, budget: 30h}", {"hours": 30.0}),
     ("{algorithm: asha, max_budget: 100, budget: 300epochs}", {"epochs": 300.0}),
     ("{algorithm: pbt, budget: {epochs: 40}}", {"epochs": 40}),
     ("{algorithm: hyperband, budget: {hours: 0.5}, iterations: 1}", {"hours": 0.5})],
)
def test_a_cost_budget_reaches_the_searcher(search: str, budget: dict) -> None:
    tune = stage(search)
    assert tune.search.budget == budget
    searcher = make_searcher(tune.search.algorithm, tune.search_space(), [("val", "max")],
                             **tune.search_settings())  # fmt: skip
    assert searcher.cost_budget is not None
    assert searcher.state()["settings"]["budget"] == budget


def test_a_search_block_without_an_algorithm_is_auto() -> None:
    """auto is the default: it says what it picked and why."""
    tune = stage("{budget: 40}")
    assert tune.search.algorithm == "auto"
    assert tune.auto_choice() is not None and tune.auto_choice().reason
    assert tune.search_label().startswith("auto: ")


def test_a_genetic_budget_above_its_generations_is_honoured() -> None:
    tune = stage("{algorithm: genetic, population: 16, generations: 7, budget: 200}")
    assert tune.planned_trials() == 200


def test_a_bad_budget_names_the_field() -> None:
    with pytest.raises(SpecError, match=r"stages\[0\].search.budget.*one key of slot_seconds"):
        stage("{algorithm: random, budget: {minutes: 3}}")
