"""CMA-ES with trials pending at once: no trial is asked that its update would drop."""

from __future__ import annotations

import json
import math
from collections import Counter
from typing import Any

import pytest
from _search_helpers import MIN

from nestor.search import BayesianSearch, Failure
from nestor.search.space import FloatParam, SearchSpace

SPACE = SearchSpace(tuple(FloatParam(f"c{i}", -1.0, 1.0) for i in range(5)))
POPULATION = 4 + math.floor(3 * math.log(5))  # CMA-ES's default for 5 parameters: 8


def bowl(config: dict[str, Any]) -> float:
    return sum((i + 1) * (v - 0.3) ** 2 for i, v in enumerate(config.values()))


def generations(searcher: BayesianSearch) -> dict[str, int]:
    """Each CMA-ES trial's generation, from the journalled sampler notes."""
    found = {}
    for event in searcher.state()["events"]:
        for trial_id, notes in event.get("notes", {}).items():
            if "cma:generation" in notes:
                found[trial_id] = notes["cma:generation"]
    return found


def drive(searcher: BayesianSearch, parallel: int, fail: set[int] = frozenset()) -> list[int]:
    """Oldest result first, as from equal-length trials; how many each ask returned."""
    running, returned = [], []
    while not searcher.done():
        if len(running) < parallel:
            asked = searcher.ask(parallel - len(running))
            returned.append(len(asked))
            running += asked
        assert running, "nothing running and nothing asked: the search is stuck"
        trial = running.pop(0)
        told = len(searcher.observations)
        searcher.tell(trial.id, Failure("crash") if told in fail else bowl(trial.config))
    return returned


@pytest.mark.parametrize("parallel", [2, 3, 5])
def test_no_generation_gets_more_trials_than_its_population(parallel: int) -> None:
    """Optuna's CMA-ES updates from one population of results; a trial asked while
    the last members of its generation run is drawn from the old distribution
    and dropped by the update. nestor waits instead (the slot stays free)."""
    searcher = BayesianSearch(SPACE, MIN, seed=3, budget=60, sampler="cmaes", startup_trials=4)
    returned = drive(searcher, parallel)
    sizes = Counter(generations(searcher).values())
    assert len(sizes) >= 5
    assert max(sizes.values()) == POPULATION, sizes
    newest = max(sizes)
    assert all(sizes[g] == POPULATION for g in sizes if g != newest), sizes
    assert 0 in returned  # it did wait at a generation's end
    assert len(searcher.observations) == 60  # and still ran its whole budget


def test_a_failed_member_is_replaced_not_waited_for() -> None:
    """A failure leaves its generation short: the next ask refills it."""
    searcher = BayesianSearch(SPACE, MIN, seed=0, budget=40, sampler="cmaes", startup_trials=4)
    drive(searcher, 2, fail={6, 7, 20})
    told = {o.trial.id: o.values is not None for o in searcher.observations}
    assert len(told) == 40
    complete = Counter(g for t, g in generations(searcher).items() if told[t])
    newest = max(complete)
    assert all(complete[g] == POPULATION for g in complete if g != newest), complete


def test_a_search_restored_at_a_generation_end_asks_what_the_original_would() -> None:
    original = BayesianSearch(SPACE, MIN, seed=5, budget=40, sampler="cmaes", startup_trials=4)
    for trial in original.ask(4):
        original.tell(trial.id, bowl(trial.config))
    generation = original.ask(POPULATION + 3)
    assert len(generation) == POPULATION  # one population, then the barrier
    assert original.ask(1) == []
    state = json.loads(json.dumps(original.state()))
    resumed = BayesianSearch(SPACE, MIN, seed=5, budget=40, sampler="cmaes", startup_trials=4)
    resumed.restore(state)
    assert resumed.ask(1) == []
    for trial in generation:
        original.tell(trial.id, bowl(trial.config))
        resumed.tell(trial.id, bowl(trial.config))
    assert [t.config for t in resumed.ask(3)] == [t.config for t in original.ask(3)]


@pytest.mark.parametrize("seed", range(5))
def test_without_startup_trials_cmaes_starts_at_the_centre(seed: int) -> None:
    """startup_trials=0 spends no trial on random draws before CMA-ES: it starts
    at the centre, as Optuna's does, not at the one random draw Optuna makes
    before its first result (nor anywhere its own first results point)."""
    space = SearchSpace(tuple(FloatParam(f"c{i}", -1.0, 1.0) for i in range(7)))
    searcher = BayesianSearch(space, MIN, seed=seed, budget=40, sampler="cmaes", startup_trials=0)
    first = searcher.ask(1)[0]
    assert first.origin == "random"  # Optuna needs a result to know the space
    searcher.tell(first.id, bowl(first.config))
    generation = searcher.ask(3)
    for trial in generation:
        searcher.tell(trial.id, bowl(trial.config))
    generation += searcher.ask(20)  # the rest of generation 0, then the barrier
    assert len(generation) == 4 + math.floor(3 * math.log(7))
    assert all(t.origin == "model" for t in generation)
    mean = [sum(t.config[k] for t in generation) / len(generation) for k in space.names]
    drawn = [first.config[k] for k in space.names]
    assert math.dist(mean, [0.0] * 7) < 0.6 < math.dist(mean, drawn), (mean, drawn)


def test_auto_cmaes_spends_no_trial_on_random_startup_draws() -> None:
    """Auto's CMA-ES proposes from the first result on (Optuna's one draw before
    it excepted): over 12 problems, 10 random startup trials cost more than
    their better half gained as a start (see search/_auto.py, rule 5)."""
    from nestor.search import make_searcher

    space = SearchSpace(tuple(FloatParam(f"c{i}", -1.0, 1.0) for i in range(7)))
    searcher = make_searcher("auto", space, MIN, seed=0, budget=300, parallel=8)
    assert searcher.auto_choice.label() == "bayesian cmaes"
    running, origins = [], []
    while len(origins) < 40:
        running += searcher.ask(8 - len(running))
        trial = running.pop(0)
        origins.append(trial.origin)
        searcher.tell(trial.id, bowl(trial.config))
    assert "random" not in origins[8:], origins  # only those asked before the first result


def test_cmaes_by_hand_defaults_to_no_random_startup_and_tpe_keeps_ten() -> None:
    """The default follows the sampler: CMA-ES's own first generation explores (it starts
    at the centre), TPE and GP need their random draws to fit anything."""
    from nestor.search import Objective, make_searcher

    objective = [Objective("f", "min")]
    assert make_searcher("bayesian", SPACE, objective, sampler="cmaes").startup_trials == 0
    assert make_searcher("bayesian", SPACE, objective, sampler="tpe").startup_trials == 10
    assert make_searcher("bayesian", SPACE, objective, sampler="cmaes",
                         startup_trials=4).startup_trials == 4


def busy_slots(searcher: BayesianSearch, parallel: int) -> list[int]:
    """Trials running after each ask, oldest result first (as ``drive``)."""
    running, busy = [], []
    while not searcher.done():
        running += searcher.ask(parallel - len(running))
        busy.append(len(running))
        trial = running.pop(0)
        searcher.tell(trial.id, bowl(trial.config))
    return busy


def test_a_population_as_wide_as_the_slots_keeps_every_slot_busy() -> None:
    """With 12 trials at once and the default population of 8, four slots idle through
    every generation once the first random wave is done; population: 12 fills them
    all, and each generation still gets exactly its population."""
    narrow = BayesianSearch(SPACE, MIN, seed=2, budget=96, sampler="cmaes")
    wide = BayesianSearch(SPACE, MIN, seed=2, budget=96, sampler="cmaes", population=12)
    assert max(busy_slots(narrow, 12)[48:]) == POPULATION
    assert max(busy_slots(wide, 12)[48:]) == 12
    sizes = Counter(generations(wide).values())
    newest = max(sizes)
    assert all(sizes[g] == 12 for g in sizes if g != newest) and len(sizes) >= 6, sizes
    with pytest.raises(ValueError, match="population applies to samplers cmaes and lq-cmaes"
                                         " only, but sampler is tpe"):
        BayesianSearch(SPACE, MIN, sampler="tpe", population=12)


def test_auto_gives_cmaes_a_generation_per_trial_at_once() -> None:
    from nestor.search import make_searcher

    space = SearchSpace(tuple(FloatParam(f"c{i}", -1.0, 1.0) for i in range(3)))
    searcher = make_searcher("auto", space, MIN, seed=0, budget=400, parallel=12)
    assert searcher.auto_choice.label() == "bayesian cmaes"
    assert searcher.auto_choice.settings["population"] == 12
    assert "no slot idles" in searcher.auto_choice.reason
    few = make_searcher("auto", space, MIN, seed=0, budget=400, parallel=2)
    assert "population" not in few.auto_choice.settings
