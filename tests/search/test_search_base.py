"""The shared records: objectives, results, Pareto fronts, the journal format."""

from __future__ import annotations

import pytest

from nestor.search import Failure, Objective, RandomSearch, as_objectives
from nestor.search._base import Observation, Trial, pareto_front, parse_result
from nestor.search.space import FloatParam, SearchSpace

SPACE = SearchSpace((FloatParam("x", 0.0, 1.0),))


class SpecLike:
    metric, mode, threshold = "acc", "max", 0.9


def test_objectives_come_in_several_shapes() -> None:
    assert as_objectives(Objective("loss", "min")) == (Objective("loss", "min"),)
    assert as_objectives(("loss", "min")) == (Objective("loss", "min"),)
    assert as_objectives([("a", "min", 1.0), {"metric": "b", "mode": "max"}]) == (
        Objective("a", "min", 1.0),
        Objective("b", "max"),
    )
    assert as_objectives([SpecLike()]) == (Objective("acc", "max", 0.9),)
    with pytest.raises(ValueError, match="mode must be one of min, max, but got 'up'"):
        Objective("loss", "up")
    with pytest.raises(ValueError, match="objective metrics must be distinct"):
        as_objectives([("a", "min"), ("a", "max")])
    with pytest.raises(ValueError, match="objectives must list at least one"):
        as_objectives([])


def test_threshold_direction() -> None:
    assert Objective("loss", "min", 0.1).reached(0.05)
    assert not Objective("loss", "min", 0.1).reached(0.2)
    assert Objective("acc", "max", 0.9).reached(0.95)
    assert not Objective("acc").reached(1.0)


def test_parse_result() -> None:
    two = [Objective("acc", "max"), Objective("time", "min")]
    assert parse_result(two, [0.9, 12]) == ((0.9, 12.0), None)
    assert parse_result(two, {"time": 3, "acc": 0.5, "loss": 1}) == ((0.5, 3.0), None)
    assert parse_result(two, Failure("oom")) == (None, "oom")
    assert parse_result(two, [float("inf"), 1.0]) == (None, "acc is inf")
    with pytest.raises(ValueError, match="time must be a number"):
        parse_result(two, [0.5, "fast"])
    with pytest.raises(ValueError, match="result must be a number"):
        parse_result(two, True)


def test_pareto_front_with_mixed_directions() -> None:
    objectives = [Objective("acc", "max"), Objective("time", "min")]

    def obs(i: int, values: tuple | None) -> Observation:
        return Observation(Trial(str(i), {"x": 0.0}), values, None if values else "x")

    observations = [obs(0, (0.9, 10.0)), obs(1, (0.8, 5.0)), obs(2, (0.7, 20.0)), obs(3, None)]
    assert [o.trial.id for o in pareto_front(observations, objectives)] == ["0", "1"]


def test_state_is_a_json_journal() -> None:
    searcher = RandomSearch(SPACE, [("y", "min")], budget=3, seed=0)
    trial = searcher.ask(2)[0]
    searcher.tell(trial.id, Failure("timeout"))
    state = searcher.state()
    assert state["algorithm"] == "random" and state["format"] == 1
    assert [e["event"] for e in state["events"]] == ["ask", "tell"]
    assert state["events"][1]["result"] == {"failure": "timeout"}
    with pytest.raises(ValueError, match="state format must be 1"):
        RandomSearch(SPACE, [("y", "min")], budget=3).restore({**state, "format": 0})


def test_restore_detects_a_diverging_replay() -> None:
    searcher = RandomSearch(SPACE, [("y", "min")], budget=3, seed=0)
    searcher.ask(1)
    state = searcher.state()
    state["events"][0]["trials"][0]["config"]["x"] = 0.123
    with pytest.raises(ValueError, match="restore must replay the recorded search"):
        RandomSearch(SPACE, [("y", "min")], budget=3, seed=0).restore(state)


def test_constructor_arguments_are_checked() -> None:
    with pytest.raises(ValueError, match=r"budget must be a positive integer \(trials\)"):
        RandomSearch(SPACE, [("y", "min")], budget=0)
    with pytest.raises(ValueError, match="seed must be an integer"):
        RandomSearch(SPACE, [("y", "min")], seed=1.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="space must be a SearchSpace"):
        RandomSearch({"x": (0, 1)}, [("y", "min")])  # type: ignore[arg-type]
