"""``algorithm: auto``: what it picks, why, and that the pick runs and restores."""

from __future__ import annotations

import json

import pytest
from _search_helpers import MIN, MIXED, drive, loss

from nestor.search import AutoChoice, Objective, choose_search, make_searcher
from nestor.search.space import CategoricalParam, FloatParam, IntParam, SearchSpace


def box(dims: int) -> SearchSpace:
    return SearchSpace(tuple(FloatParam(f"c{i}", -1.0, 1.0) for i in range(dims)))


@pytest.mark.parametrize(
    ("space", "objectives", "budget", "parallel", "label", "because"),
    [
        (box(7), MIN, 130, 2, "bayesian lq-cmaes", "2 trial(s) at once: lq-CMA-ES"),
        (box(7), MIN, 20, 1, "bayesian lq-cmaes", "7 numeric parameters, one objective"),
        (box(7), MIN, 300, 8, "bayesian cmaes", "enough for CMA-ES"),
        (box(7), MIN, 130, 8, "genetic async 10", "under the 225 CMA-ES needs"),
        (box(7), MIN, 20, 5, "bayesian tpe", "too small for an evolutionary search"),
        (box(7), MIN, 8, 1, "random", "spent before a model could help"),
        (box(7), MIN, 96, 16, "bayesian lq-cmaes, async", "a population of 9 results"),
        (box(7), MIN, 1000, 63, "bayesian lq-cmaes, async", "no slot waits"),
        (MIXED, MIN, 96, 16, "genetic async 16", "the best 16 of all results"),
        (box(7), MIN, 1000, 64, "genetic async 16", "the best 16 of all results"),
        (box(7), MIN, 2000, 256, "genetic async 16, de", "differential evolution (JADE)"),
        (MIXED, MIN, 100, 2, "bayesian tpe", "1 few-valued int, 1 categorical"),
        (box(3), [Objective("a", "min"), Objective("b", "max")], 300, 2, "bayesian tpe",
         "2 objectives"),
        (box(1), MIN, 300, 1, "bayesian tpe", "one parameter"),
        (SearchSpace((CategoricalParam("a", (1, 2, 3)), CategoricalParam("b", ("x", "y")))),
         MIN, 20, 2, "grid", "6 combinations fit in the budget of 20"),
        (SearchSpace((IntParam("n", 1, 1000), FloatParam("x", 0.0, 1.0))), MIN, 300, 1,
         "bayesian lq-cmaes", "2 numeric parameters"),
        (SearchSpace((IntParam("n", 1, 1000), FloatParam("x", 0.0, 1.0))), MIN, 300, 6,
         "bayesian cmaes", "2 numeric parameters"),
    ],
)  # fmt: skip
def test_auto_picks_by_space_budget_and_parallelism(
    space: SearchSpace, objectives: list, budget: int, parallel: int, label: str, because: str
) -> None:
    choice = choose_search(space, objectives, budget=budget, parallel=parallel)
    assert isinstance(choice, AutoChoice)
    assert choice.label() == label
    assert because in choice.reason
    assert choice.describe() == f"{label}: {choice.reason}"
    assert choice.settings["budget"] == budget


def test_auto_at_16_at_once_keeps_every_slot_busy_with_lq_cmaes() -> None:
    """Rule 3a: lq-CMA-ES, asynchronous, with CMA-ES's default population (9 for 7
    numbers): the first ask fills all 16, and every slot a result frees is refilled
    at once, across its updates (a generational search answers nothing while a
    generation's last trials run)."""
    searcher = make_searcher("auto", box(7), MIN, seed=0, budget=96, parallel=16)
    assert searcher.sampler == "lq-cmaes" and searcher.schedule == "async"
    running = {t.id: t for t in searcher.ask(16)}
    assert len(running) == 16
    for _ in range(96 - 16):
        trial = running.pop(next(iter(running)))
        searcher.tell(trial.id, sum(v * v for v in trial.config.values()))
        refill = searcher.ask(1)
        assert len(refill) == 1, f"a slot idled after {len(searcher.observations)} results"
        running[refill[0].id] = refill[0]
    assert max(t.generation for t in running.values()) >= 7  # updated per 9 results


def test_auto_is_a_pure_function() -> None:
    first = choose_search(box(5), MIN, budget=200, parallel=4)
    assert first == choose_search(box(5), MIN, budget=200, parallel=4)


def test_make_searcher_builds_the_pick_and_keeps_the_reason() -> None:
    searcher = make_searcher("auto", box(7), MIN, seed=3, budget=130, parallel=8)
    assert searcher.algorithm == "genetic" and searcher.population == 10
    assert searcher.auto_choice.label() == "genetic async 10"
    assert searcher.seed == 3 and searcher.planned == 130
    plain = make_searcher("genetic", box(7), MIN, seed=3, **searcher.auto_choice.settings)
    assert plain.auto_choice is None
    assert plain.state() == searcher.state()


def test_an_auto_search_runs_and_restores() -> None:
    searcher = make_searcher("auto", MIXED, MIN, seed=1, budget=14)
    drive(searcher, loss, steps=5)
    state = json.loads(json.dumps(searcher.state()))
    resumed = make_searcher("auto", MIXED, MIN, seed=1, budget=14)
    resumed.restore(state)
    assert resumed.state() == searcher.state()
    for trial in resumed.pending:
        resumed.tell(trial.id, loss(trial.config))
    drive(resumed, loss)
    assert resumed.done() and len(resumed.observations) == 14


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"population": 8}, "auto search settings must be among seed, budget, parallel"),
        ({"parallel": 0}, "parallel must be a positive integer, but got 0"),
        ({"budget": 0}, r"budget must be a positive integer \(trials\), .* but got 0"),
        ({"budget": {"days": 2}}, "budget must be .*: one key of slot_seconds, slot_hours, epochs"),
        ({"max_fidelity": 2.5}, "max_fidelity must be a positive integer or None, but got 2.5"),
        ({"max_fidelity": 0}, "max_fidelity must be a positive integer or None, but got 0"),
        ({"prefer": "fast"}, "prefer must be one of anytime, final, but got 'fast'"),
    ],
)
def test_auto_settings_are_checked(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        make_searcher("auto", box(3), MIN, **kwargs)


# --- multi-fidelity: trials that can be trained in stretches --------------------------------

OLD_CASES = [
    (box(7), MIN, 300, 2), (box(7), MIN, 130, 2), (box(7), MIN, 20, 1), (box(7), MIN, 8, 1),
    (box(7), MIN, 1000, 64), (MIXED, MIN, 100, 2), (box(1), MIN, 300, 1),
    (box(3), [Objective("a", "min"), Objective("b", "max")], 300, 2),
]  # fmt: skip


@pytest.mark.parametrize(("space", "objectives", "budget", "parallel"), OLD_CASES)
@pytest.mark.parametrize("max_fidelity", [None, 2, 3])
def test_without_a_fidelity_that_splits_auto_picks_as_before(
    space: SearchSpace, objectives: list, budget: int, parallel: int, max_fidelity: int | None
) -> None:
    """No fidelity, or one too short for 3 whole rungs (3 epochs: 1, 3 with eta 3,
    2, 3 with eta 2): the rules without a fidelity, unchanged."""
    before = choose_search(space, objectives, budget=budget, parallel=parallel)
    assert before.algorithm not in ("asha", "hyperband")
    assert choose_search(space, objectives, budget=budget, parallel=parallel,
                         max_fidelity=max_fidelity) == before  # fmt: skip


@pytest.mark.parametrize(
    ("max_fidelity", "budget", "rungs"),
    [
        (27, 20, (1, 27, 3)),
        (100, 30, (11, 100, 3)),  # 11, 33, 100: no need for 100 = 25 x 2^2, nor 1 of 100
        (10, 30, (1, 10, 3)),  # 1, 3, 10
        (12, 15, (1, 12, 3)),  # 1, 4, 12
        (4, 40, (1, 4, 2)),  # 1, 2, 4
    ],
)
def test_a_fidelity_picks_asha_tpe_and_spends_the_whole_training(
    max_fidelity: int, budget: int, rungs: tuple
) -> None:
    """Any full length from 4 up splits into whole rungs, and the budget of full
    trainings becomes epochs that ASHA spends to the last trial that fits: less than
    one trial's worth is left (whole Hyperband iterations left 200 of 3,000)."""
    choice = choose_search(MIXED, MIN, budget=budget, parallel=4, max_fidelity=max_fidelity)
    low, high, eta = rungs
    epochs = budget * max_fidelity
    assert choice.label() == f"asha tpe, rungs {low}-{high}, eta {eta}, budget {epochs} epochs"
    assert choice.settings == {
        "budget": {"epochs": epochs}, "min_budget": low, "max_budget": high,
        "reduction_factor": eta, "sampler": "tpe",
    }  # fmt: skip
    assert f"budget of {budget} full trainings is {epochs} epochs" in choice.reason
    searcher = make_searcher("auto", MIXED, MIN, seed=1, budget=budget, parallel=4,
                             max_fidelity=max_fidelity)  # fmt: skip
    assert searcher.algorithm == "asha" and searcher.auto_choice == choice
    drive(searcher, loss, parallel=4)
    assert searcher.done() and "budget of" in searcher.stop_reason
    largest_step = max(b - a for a, b in zip([0, *searcher.rungs], searcher.rungs, strict=False))
    assert epochs - largest_step < searcher.budget_used <= epochs
    assert searcher.cost_spent == searcher.budget_used


@pytest.mark.parametrize("parallel", [1, 4, 16])
def test_prefer_final_picks_as_without_a_fidelity(parallel: int) -> None:
    """``prefer: final`` (issue 41 item 3): where the fidelity would give ASHA-TPE, the
    pick is what auto makes without one (every trial in full), under the same budget;
    ``anytime``, the default, is rule M."""
    for space in (box(4), MIXED):
        anytime = choose_search(space, MIN, budget=30, parallel=parallel, max_fidelity=100)
        assert anytime.algorithm == "asha"
        assert choose_search(space, MIN, budget=30, parallel=parallel, max_fidelity=100,
                             prefer="anytime") == anytime  # fmt: skip
        final = choose_search(space, MIN, budget=30, parallel=parallel, max_fidelity=100,
                              prefer="final")  # fmt: skip
        full = choose_search(space, MIN, budget=30, parallel=parallel)
        assert (final.algorithm, final.settings) == (full.algorithm, full.settings)
        assert "prefer: final" in final.reason
        epochs = choose_search(space, MIN, budget={"epochs": 3000}, parallel=parallel,
                               max_fidelity=100, prefer="final")  # fmt: skip
        assert epochs.algorithm == full.algorithm
        assert epochs.settings["budget"] == {"epochs": 3000}


def test_multi_fidelity_comes_before_the_parallelism_rule_but_after_tiny_budgets() -> None:
    many = choose_search(MIXED, MIN, budget=1000, parallel=64, max_fidelity=27)
    assert many.algorithm == "asha"  # asynchronous: no slot waits for a rung to fill
    assert choose_search(box(7), MIN, budget=8, parallel=1, max_fidelity=27).label() == "random"
    assert choose_search(box(7), MIN, budget=11, parallel=1, max_fidelity=27).algorithm == (
        "asha")  # 297 epochs: no whole Hyperband iteration (357) needed any more
    categorical = SearchSpace((CategoricalParam("a", (1, 2, 3)),))
    assert choose_search(categorical, MIN, budget=20, max_fidelity=27).algorithm == "grid"


@pytest.mark.parametrize("parallel", [16, 64, 1024])
def test_many_at_once_numbers_train_in_full_with_async_lq_cmaes_despite_a_fidelity(
        parallel: int) -> None:
    """Rule W: from 16 at once, a numeric space with a fidelity trains every trial in
    full with asynchronous lq-CMA-ES (on the dev multi-fidelity problems rule M's
    ASHA-TPE ranked near last there); below 16, with categoricals, or with a budget of
    under four rounds, rule M stands."""
    choice = choose_search(box(5), MIN, budget=6 * parallel, parallel=parallel,
                           max_fidelity=81)  # fmt: skip
    assert choice.label() == "bayesian lq-cmaes, async"
    assert "every trial trains its full 81" in choice.reason
    spent = choose_search(box(5), MIN, budget={"epochs": 6 * parallel * 81},
                          parallel=parallel, max_fidelity=81)  # fmt: skip
    assert spent.algorithm == "bayesian" and spent.settings["budget"] == {
        "epochs": 6 * parallel * 81}  # the cost goes to lq-CMA-ES, trial by trial
    for narrow in (dict(parallel=15), dict(parallel=parallel, budget=4 * parallel - 1)):
        settings = {"budget": 6 * parallel, "max_fidelity": 81, **narrow}
        assert choose_search(box(5), MIN, **settings).algorithm == "asha"
    assert choose_search(MIXED, MIN, budget=6 * parallel, parallel=parallel,
                         max_fidelity=81).algorithm == "asha"  # fmt: skip


def test_auto_over_a_fidelity_many_at_once_trains_each_trial_in_full() -> None:
    """The searcher auto makes at 16 at once with a fidelity asks trials with no
    budget of their own: each trains the full length."""
    searcher = make_searcher("auto", box(5), MIN, seed=0, budget=96, parallel=16,
                             max_fidelity=81)  # fmt: skip
    trials = searcher.ask(16)
    assert len(trials) == 16 and all(t.budget is None for t in trials)


def test_a_cost_budget_reaches_the_chosen_search() -> None:
    """Auto chooses as for the full trainings a cost pays for, and hands the cost on."""
    choice = choose_search(box(7), MIN, budget={"epochs": 2700}, parallel=4, max_fidelity=27)
    assert choice.settings["budget"] == {"epochs": 2700}
    timed = choose_search(box(7), MIN, budget={"hours": 3}, parallel=8)
    assert timed.settings["budget"] == {"hours": 3}
    assert "budget of 10800 slot-seconds is spent trial by trial" in timed.reason


def test_an_auto_hyperband_restores() -> None:
    settings = {"seed": 2, "budget": 20, "parallel": 2, "max_fidelity": 9}
    searcher = make_searcher("auto", MIXED, MIN, **settings)
    drive(searcher, loss, steps=30)
    resumed = make_searcher("auto", MIXED, MIN, **settings)
    resumed.restore(json.loads(json.dumps(searcher.state())))
    assert resumed.state() == searcher.state()
