"""Contract tests every search algorithm must pass (parametrized over all of them)."""

from __future__ import annotations

import json

import pytest
from _search_helpers import FACTORIES, MIN, MIXED, MULTI_OBJECTIVE, drive, loss

from nestor.search import (
    Failure,
    Objective,
    Searcher,
    algorithm_names,
    make_searcher,
    observations_from_state,
)
from nestor.search.space import FloatParam, SearchSpace

ALL = list(FACTORIES)


def build(name: str, space: SearchSpace = MIXED, objectives=MIN, **kw) -> Searcher:
    return FACTORIES[name](space, objectives, **kw)


@pytest.mark.parametrize("name", ALL)
def test_asks_lie_in_the_space_and_ids_are_unique(name: str) -> None:
    searcher = build(name, seed=3)
    trials = drive(searcher)
    assert trials
    for trial in trials:
        assert MIXED.contains(trial.config), trial.config
        assert type(trial.config["lr"]) is float and type(trial.config["layers"]) is int
        assert trial.config["epochs"] == 3
    ids = [t.id for t in trials]
    assert len(set(ids)) == len(ids)
    assert ids == [str(i) for i in range(len(ids))]


@pytest.mark.parametrize("name", ALL)
def test_done_after_the_planned_trials(name: str) -> None:
    searcher = build(name, seed=1)
    trials = drive(searcher)
    assert searcher.done()
    assert len(trials) == searcher.planned == searcher.n_asked
    assert len(searcher.observations) == searcher.planned
    assert searcher.ask(5) == []
    assert searcher.pending == []
    assert "planned trials" in (searcher.stop_reason or "")


@pytest.mark.parametrize("name", ALL)
def test_same_seed_same_search(name: str) -> None:
    first = [t.config for t in drive(build(name, seed=7))]
    again = [t.config for t in drive(build(name, seed=7))]
    assert first == again
    other = [t.config for t in drive(build(name, seed=8))]
    assert other != first


@pytest.mark.parametrize("name", ALL)
def test_tell_checks_its_arguments(name: str) -> None:
    searcher = build(name)
    trial = searcher.ask(1)[0]
    with pytest.raises(ValueError, match="trial_id must be the id of an asked trial"):
        searcher.tell("nope", 1.0)
    with pytest.raises(ValueError, match="result must be a number"):
        searcher.tell(trial.id, "bad")
    with pytest.raises(ValueError, match="result must have 1 value"):
        searcher.tell(trial.id, [1.0, 2.0])
    with pytest.raises(ValueError, match="result must report the metrics"):
        searcher.tell(trial.id, {"accuracy": 1.0})
    searcher.tell(trial.id, {"loss": 1.0, "accuracy": 0.5})  # extra metrics are ignored
    with pytest.raises(ValueError, match="already told"):
        searcher.tell(trial.id, 1.0)
    with pytest.raises(ValueError, match="n must be a positive integer"):
        searcher.ask(0)


@pytest.mark.parametrize("name", ALL)
def test_state_round_trip_continues_identically(name: str) -> None:
    """Stop half way with trials still running, journal, restore, go on: same asks."""
    uninterrupted = build(name, seed=11)
    reference = drive(uninterrupted, fail=lambda i: i == 2)

    first = build(name, seed=11)
    # Same driver, interrupted after 5 results (with trials still running).
    running = drive(first, fail=lambda i: i == 2, steps=5)
    state = json.loads(json.dumps(first.state()))  # what the journal keeps
    resumed = build(name, seed=11)
    resumed.restore(state)
    assert resumed.state() == first.state()
    assert [t.id for t in resumed.pending] == [t.id for t in first.pending]
    # Finish as the uninterrupted driver would: the still-running trials first.
    told = len(resumed.observations)
    pending = resumed.pending
    assert running[: len(running)] == reference[: len(running)]
    rest = _continue(resumed, pending, told)
    assert [t.to_dict() for t in running + rest] == [t.to_dict() for t in reference]
    assert resumed.best() == uninterrupted.best()
    assert resumed.state() == uninterrupted.state()


def _continue(searcher: Searcher, running: list, told: int) -> list:
    """The rest of ``drive`` (parallel=3, fail on the 3rd result) from a restored state."""
    asked = []
    running = list(running)
    while not searcher.done():
        new = searcher.ask(3 - len(running)) if len(running) < 3 else []
        running += new
        asked += new
        if not running:
            break
        trial = running.pop(0)
        searcher.tell(trial.id, Failure("injected") if told == 2 else loss(trial.config))
        told += 1
    return asked


@pytest.mark.parametrize("name", ALL)
def test_an_empty_ask_leaves_no_trace(name: str) -> None:
    """A driver polls ask() whenever a slot is free; asks that return nothing
    (barrier, budget spent, search over) must not grow the state it journals."""
    searcher = build(name, seed=2)
    drive(searcher)
    assert searcher.done()
    before = searcher.state()
    for _ in range(50):
        assert searcher.ask(3) == []
    assert searcher.state() == before
    resumed = build(name, seed=2)
    resumed.restore(before)
    assert resumed.state() == before


@pytest.mark.parametrize("name", ALL)
def test_restore_refuses_other_settings(name: str) -> None:
    searcher = build(name, seed=1)
    drive(searcher, steps=3)
    other = build(name, seed=2)
    with pytest.raises(ValueError, match="state must come from a search with the same settings"):
        other.restore(searcher.state())
    used = build(name, seed=1)
    used.ask(1)
    with pytest.raises(ValueError, match="restore must be called on a fresh searcher"):
        used.restore(searcher.state())


@pytest.mark.parametrize("name", ALL)
def test_failures_are_recorded_and_the_search_goes_on(name: str) -> None:
    searcher = build(name, seed=5)
    drive(searcher, fail=lambda i: i % 3 == 1)
    assert searcher.done()
    failed = [o for o in searcher.observations if o.failed]
    assert failed and all(o.failure == "injected" for o in failed)
    assert len(searcher.observations) == searcher.planned
    best = searcher.best()
    assert best is not None and not best.failed
    assert best.value == min(o.value for o in longest_trained(searcher.observations))


def longest_trained(observations: list) -> list:
    """The successful observations that compete for best(): all of them, or where
    trials carry a training budget, those trained the longest."""
    done = [o for o in observations if not o.failed]
    budgets = [o.trial.budget for o in done if o.trial.budget is not None]
    return [o for o in done if not budgets or o.trial.budget == max(budgets)]


@pytest.mark.parametrize("name", ALL)
def test_nan_is_a_failure(name: str) -> None:
    searcher = build(name)
    trial = searcher.ask(1)[0]
    observation = searcher.tell(trial.id, float("nan"))
    assert observation.failed and "nan" in observation.failure
    assert searcher.best() is None


@pytest.mark.parametrize("name", ALL)
def test_maximize(name: str) -> None:
    searcher = build(name, objectives=[Objective("score", "max")], seed=2)
    drive(searcher, function=lambda c: -loss(c))
    values = [o.value for o in longest_trained(searcher.observations)]
    assert searcher.best().value == max(values)


@pytest.mark.parametrize("name", ALL)
def test_threshold_stops_the_search(name: str) -> None:
    searcher = build(name, objectives=[Objective("loss", "min", threshold=1e9)], seed=2)
    drive(searcher)
    assert searcher.done()
    assert len(searcher.observations) == 1
    assert "reached the threshold" in searcher.stop_reason
    assert searcher.ask(3) == []


@pytest.mark.parametrize("name", MULTI_OBJECTIVE)
def test_multi_objective_pareto_front(name: str) -> None:
    space = SearchSpace((FloatParam("x", -1.0, 3.0), FloatParam("y", 0.0, 1.0)))
    objectives = [Objective("a", "min"), Objective("b", "min")]
    searcher = build(name, space, objectives, seed=4)
    drive(searcher, function=lambda c: {"a": c["x"] ** 2 + c["y"], "b": (c["x"] - 2) ** 2 + c["y"]})
    front = searcher.pareto_front()
    assert front
    for p in front:
        for o in searcher.observations:
            assert not (
                o.values[0] <= p.values[0] and o.values[1] <= p.values[1] and o.values != p.values
            )
    assert searcher.best() in front
    assert searcher.best().values[0] == min(p.values[0] for p in front)


@pytest.mark.parametrize(
    "name",
    [pytest.param(n, marks=pytest.mark.slow) if n == "gp" else n for n in ALL if n != "grid"],
)
def test_warm_start_from_a_journal(name: str) -> None:
    previous = build(name, seed=1)
    drive(previous, fail=lambda i: i == 0)
    history = observations_from_state(previous.state())
    assert [o.trial.id for o in history] == [o.trial.id for o in previous.observations]
    searcher = build(name, seed=2)
    used = searcher.warm_start([*history, ({"lr": 99.0}, 1.0)])  # outside the space: skipped
    assert used == len(history)
    trials = drive(searcher)
    assert searcher.done()
    assert all(MIXED.contains(t.config) for t in trials)
    assert {o.trial.id for o in searcher.observations} == {t.id for t in trials}
    with pytest.raises(ValueError, match="warm_start must be called once"):
        searcher.warm_start(history)
    # The warm start is part of the state.
    resumed = build(name, seed=2)
    resumed.restore(searcher.state())
    assert resumed.state() == searcher.state()


def test_grid_cannot_be_warm_started() -> None:
    with pytest.raises(ValueError, match="grid search cannot be warm-started"):
        build("grid").warm_start([])


@pytest.mark.parametrize("algorithm", algorithm_names())  # every registered one, and auto
def test_make_searcher_takes_the_spec_field_names(algorithm: str) -> None:
    from nestor.orchestrator.spec import model

    spec_class = model.SEARCH_MODELS[algorithm]
    spec = spec_class(algorithm=algorithm, budget=8)
    # settings(): the spec's fields less those that are the stage's business (a fidelity)
    assert set(spec.settings()) <= set(spec.model_dump()) - {"algorithm"}
    searcher = make_searcher(algorithm, MIXED, MIN, **spec.settings())
    picked = searcher.auto_choice.algorithm if searcher.auto_choice else algorithm
    assert searcher.algorithm == picked
    assert searcher.planned == spec.planned_trials(MIXED)


@pytest.mark.parametrize("algorithm", algorithm_names())
def test_an_unknown_setting_is_named_with_the_allowed_ones(algorithm: str) -> None:
    message = f"{algorithm} search settings must be among seed, budget"
    with pytest.raises(ValueError, match=message) as info:
        make_searcher(algorithm, MIXED, MIN, budget=4, sede=1)
    assert "but got 'sede'" in str(info.value)
    assert "did you mean 'seed'?" in str(info.value)


def test_make_searcher_names_the_algorithms() -> None:
    names = ", ".join(algorithm_names())  # auto, then each registered one
    with pytest.raises(ValueError, match=f"algorithm must be one of {names}, but got"):
        make_searcher("annealing", MIXED, MIN)
