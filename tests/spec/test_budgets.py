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
    with pytest.raises(SpecError,
                       match=r"stages\[0\].search.budget.*\(minutes: not one of trials"):
        stage("{algorithm: random, budget: {minutes: 3}}")


@pytest.mark.parametrize(
    ("search", "budget", "wall_s"),
    [("{algorithm: random, budget: {wall: 2h}}", None, 7200.0),
     ("{algorithm: random, budget: {trials: 50, wall: 30m}}", 50, 1800.0),
     ("{algorithm: genetic, budget: {slot_hours: 3, wall: 90s}}", {"slot_hours": 3}, 90.0),
     ("{algorithm: random, budget: {trials: 7}}", 7, None)],
)
def test_a_wall_clock_limit_is_the_stages_and_never_reaches_the_searcher(
        search: str, budget: object, wall_s: float | None) -> None:
    """budget: {wall: ...} beside a count or a cost: the wall clock goes to the stage
    (the engine stops on it), the rest to the searcher, which never sees a wall."""
    tune = stage(search)
    assert (tune.search.budget, tune.search.wall_s) == (budget, wall_s)
    settings = tune.search_settings()
    assert "wall_s" not in settings and "wall" not in str(settings)
    searcher = make_searcher(tune.search.algorithm, tune.search_space(), [("val", "max")],
                             **settings)
    if budget is None:  # the wall clock alone: the search asks until it ends the stage
        assert searcher.planned >= 1_000_000
    elif isinstance(budget, int):
        assert searcher.planned == budget


def test_slot_hours_have_their_own_name_and_hours_still_work_saying_so(
        caplog: pytest.LogCaptureFixture) -> None:
    """{slot_hours: H} and 30slot-h are slot-hours, silently; {hours: H} and 30h, the older
    spellings, mean the same and say once which spelling to use instead."""
    with caplog.at_level("WARNING"):
        assert stage("{algorithm: random, budget: {slot_hours: 2}}").search.budget == {
            "slot_hours": 2}
        assert stage("{algorithm: random, budget: 2slot-h}").search.budget == {
            "slot_hours": 2.0}
        assert not caplog.records
        old = stage("{algorithm: random, budget: {hours: 7}}")
    same = make_searcher("random", old.search_space(), [("v", "max")], **old.search_settings())
    assert same.cost_budget.limit == 7 * 3600.0
    notices = [r.getMessage() for r in caplog.records]
    assert len(notices) == 1 and "{slot_hours: 7}" in notices[0] and "7slot-h" in notices[0]


def test_validate_shows_a_wall_limit_in_place_of_a_trial_count(tmp_path) -> None:
    from click.testing import CliRunner

    from nestor.orchestrator.commands.cli import cli

    path = tmp_path / "wall.yaml"
    path.write_text(SPEC.format(search="{algorithm: random, budget: {wall: 2h}}"))
    result = CliRunner().invoke(cli, ["validate", str(path)])
    assert result.exit_code == 0 and "until 2h" in result.output, result.output
