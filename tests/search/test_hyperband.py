"""Successive halving that continues trials: ASHA, Hyperband, BOHB-style."""

from __future__ import annotations

import itertools
import json
from collections import Counter

import pytest
from _search_helpers import MIN, MIXED, loss

from nestor.search import (
    ASHASearch,
    Failure,
    HyperbandSearch,
    Searcher,
    make_searcher,
    settings_of,
)
from nestor.search._hyperband import hyperband_brackets, rung_budgets
from nestor.search.space import FloatParam, SearchSpace

LINE = SearchSpace((FloatParam("x", 0.0, 1.0),))


def run(searcher: Searcher, parallel: int = 1, function=loss, fail=lambda trial: False) -> list:
    running: list = []
    asked: list = []
    while not searcher.done():
        new = searcher.ask(parallel - len(running)) if len(running) < parallel else []
        running += new
        asked += new
        if not running:
            break
        trial = running.pop(0)
        searcher.tell(trial.id, Failure("x") if fail(trial) else function(trial.config))
    return asked


def test_rungs_are_powers_of_the_reduction_factor() -> None:
    assert rung_budgets(1, 27, 3) == [1, 3, 9, 27]
    assert rung_budgets(2, 32, 2) == [2, 4, 8, 16, 32]
    assert rung_budgets(0.5, 4.5, 3) == [0.5, 1.5, 4.5]
    with pytest.raises(ValueError, match=r"max_budget must be at least min_budget x"
                       r" reduction_factor \(3\) for two rungs, but got 2"):  # fmt: skip
        rung_budgets(1, 2, 3)


@pytest.mark.parametrize(
    ("low", "high", "eta", "rungs"),
    [(1, 100, 3, [1, 4, 11, 33, 100]), (1, 10, 3, [1, 3, 10]),
     (1, 100, 2, [2, 3, 6, 13, 25, 50, 100]), (5, 100, 3, [11, 33, 100]),
     (1.0, 20.0, 3, [2, 7, 20])],
)
def test_rungs_from_any_range_are_whole_and_end_at_max(low, high, eta, rungs) -> None:
    """Any integer range splits into whole rungs about eta apart, the last being max
    (no fractional epochs such as 100 / 81 = 1.23), none below min."""
    budgets = rung_budgets(low, high, eta)
    assert budgets == rungs
    assert all(isinstance(b, int) for b in budgets)
    assert budgets[-1] == high and budgets[0] >= low


def test_rungs_of_a_continuous_fidelity_stay_fractional() -> None:
    budgets = rung_budgets(0.1, 1.0, 3)
    assert budgets == pytest.approx([1 / 9, 1 / 3, 1.0])
    with pytest.raises(ValueError, match="max_budget must be greater than min_budget"):
        rung_budgets(9, 3, 3)
    with pytest.raises(ValueError, match="reduction_factor must be an integer of at least 2"):
        rung_budgets(1, 27, 1)


# --- ASHA --------------------------------------------------------------------------------


def top_unpromoted(asked: list, results: dict, promoted: set, rung: int, eta: int) -> list:
    """The trials of ``rung`` in its top n // eta not promoted yet (recomputed here)."""
    told = [t for t in asked if t.generation == rung and t.id in results]
    ok = sorted(
        (t for t in told if results[t.id] is not None), key=lambda t: (results[t.id], int(t.id))
    )
    return [t for t in ok[: len(told) // eta] if t.id not in promoted]


@pytest.mark.parametrize("parallel", [1, 4])
def test_asha_promotes_exactly_the_top_fraction_of_each_rung(parallel: int) -> None:
    """At every ask: a promotion iff some rung has an unpromoted trial in its top
    1/eta (the highest such rung first, its best trial), else a new configuration."""
    asha = ASHASearch(MIXED, MIN, budget=150, seed=4)
    asked: list = []
    results: dict[str, float | None] = {}
    promoted: set[str] = set()
    running: list = []
    told = 0
    while not asha.done():
        while len(running) < parallel:
            expected = next(
                (c[0] for r in (2, 1, 0) if (c := top_unpromoted(asked, results, promoted, r, 3))),
                None,
            )
            new = asha.ask(1)
            if not new:
                break
            (trial,) = new
            if expected is None:
                assert (trial.origin, trial.generation, trial.budget) == ("random", 0, 1)
                assert trial.continue_from is None and trial.parents == ()
            else:
                assert trial.origin == "promotion"
                assert trial.continue_from == expected.id and trial.parents == (expected.id,)
                assert trial.config == expected.config
                assert (trial.generation, trial.budget) == (
                    expected.generation + 1, [1, 3, 9, 27][expected.generation + 1]
                )  # fmt: skip
                promoted.add(expected.id)
            asked.append(trial)
            running.append(trial)
        trial = running.pop(0)
        failed = told % 7 == 3
        results[trial.id] = None if failed else loss(trial.config)
        asha.tell(trial.id, Failure("x") if failed else results[trial.id])
        told += 1
    rungs = Counter(t.generation for t in asked)
    assert rungs[3] >= 1 and rungs[0] > rungs[1] > rungs[2] >= rungs[3]
    assert all(results[t.continue_from] is not None for t in asked if t.continue_from)


def test_asha_promotes_after_every_eta_results() -> None:
    asha = ASHASearch(LINE, MIN, budget=30, seed=0)
    first = asha.ask(3)
    assert [t.budget for t in first] == [1, 1, 1]
    for trial, value in zip(first, (0.3, 0.1, 0.2), strict=True):
        asha.tell(trial.id, value)
    (promotion, fresh) = asha.ask(2)
    assert (promotion.continue_from, promotion.budget, promotion.generation) == (first[1].id, 3, 1)
    assert promotion.config == first[1].config
    assert (fresh.continue_from, fresh.budget) == (None, 1)
    assert asha.promotable(0) == []
    asha.tell(fresh.id, 0.15)  # 4 results: still one promotion (4 // 3)
    assert asha.ask(1)[0].continue_from is None


def test_a_failed_trial_is_never_promoted() -> None:
    asha = ASHASearch(LINE, MIN, budget=30, seed=0)
    trials = asha.ask(3)
    for trial in trials:
        asha.tell(trial.id, Failure("oom"))
    assert asha.promotable(0) == []
    assert asha.ask(1)[0].continue_from is None


def test_asha_budget_counts_trials_and_epochs_are_counted_from_the_checkpoint() -> None:
    asha = ASHASearch(LINE, MIN, budget=20, seed=1)
    trials = run(asha, function=lambda c: c["x"])
    assert len(trials) == asha.planned == 20
    by_id = {t.id: t for t in trials}
    spent = sum(
        t.budget - (by_id[t.continue_from].budget if t.continue_from else 0) for t in trials
    )
    assert asha.budget_used == spent
    assert asha.budget_used < sum(t.budget for t in trials)  # promotions are not paid twice
    assert ASHASearch(LINE, MIN).planned == 40  # one bracket: 27 + 9 + 3 + 1
    # best() is among the trials trained the longest.
    assert asha.best().trial.budget == max(t.budget for t in trials)


# --- Hyperband ---------------------------------------------------------------------------


def test_hyperband_brackets_follow_the_textbook_schedule() -> None:
    """Li et al. (2018), R = 27, eta = 3: (n_i, r_i) per bracket s = 3, 2, 1, 0."""
    textbook = {
        0: [(27, 1), (9, 3), (3, 9), (1, 27)],
        1: [(12, 3), (4, 9), (1, 27)],
        2: [(6, 9), (2, 27)],
        3: [(4, 27)],
    }
    assert hyperband_brackets(4, 3) == [[n for n, _ in b] for b in textbook.values()]
    hyperband = HyperbandSearch(MIXED, MIN, min_budget=1, max_budget=27, reduction_factor=3)
    assert hyperband.planned == 69
    trials = run(hyperband, parallel=5)
    assert len(trials) == 69 and hyperband.done()
    for bracket, stages in textbook.items():
        mine = [t for t in trials if t.deme == bracket]
        assert sorted(Counter(t.budget for t in mine).items()) == [(r, n) for n, r in stages]
        first_budget = stages[0][1]
        for trial in mine:  # new configurations start at the bracket's budget, from scratch
            assert (trial.continue_from is None) == (trial.budget == first_budget)


def test_hyperband_promotes_the_top_of_each_complete_stage() -> None:
    hyperband = HyperbandSearch(MIXED, MIN, max_budget=27, seed=2)
    trials = run(hyperband, parallel=4)
    values = {o.trial.id: o.value for o in hyperband.observations}
    by_id = {t.id: t for t in trials}
    for bracket in range(4):
        mine = [t for t in trials if t.deme == bracket]
        budgets = sorted({t.budget for t in mine})
        for low, high in itertools.pairwise(budgets):
            stage = sorted((t for t in mine if t.budget == low), key=lambda t: values[t.id])
            promoted = [t for t in mine if t.budget == high]
            assert {t.continue_from for t in promoted} == {t.id for t in stage[: len(promoted)]}
            for t in promoted:
                assert t.config == by_id[t.continue_from].config and t.origin == "promotion"


def test_hyperband_waits_within_a_bracket_but_opens_the_next_one() -> None:
    hyperband = HyperbandSearch(LINE, MIN, max_budget=9, seed=0)  # brackets 9/3/1, 5/1, 3
    first = hyperband.ask(9)
    assert {t.deme for t in first} == {0}
    for trial in first[:8]:
        hyperband.tell(trial.id, trial.config["x"])
    more = hyperband.ask(2)  # bracket 0 waits for its 9th result: bracket 1 starts
    assert [(t.deme, t.budget, t.continue_from) for t in more] == [(1, 3, None), (1, 3, None)]
    hyperband.tell(first[8].id, 0.5)
    promotions = hyperband.ask(3)
    assert [(t.deme, t.budget) for t in promotions] == [(0, 3)] * 3
    ranked = sorted(first, key=lambda t: t.config["x"] if t is not first[8] else 0.5)
    assert [t.continue_from for t in promotions] == [t.id for t in ranked[:3]]


def test_hyperband_plans_fewer_trials_when_a_stage_has_too_few_successes() -> None:
    hyperband = HyperbandSearch(LINE, MIN, max_budget=9, seed=0)
    assert hyperband.planned == 9 + 3 + 1 + 5 + 1 + 3
    trials = run(hyperband, parallel=3, function=lambda c: c["x"],
                 fail=lambda t: t.deme == 0 and t.budget == 1 and int(t.id) % 9 != 0)  # fmt: skip
    # Bracket 0: 1 success of 9, so 1 promotion instead of 3, then 1 instead of 1.
    assert hyperband.planned == 22 - 2 and len(trials) == 20 and hyperband.done()


def test_hyperband_iterations_and_budget() -> None:
    assert HyperbandSearch(LINE, MIN, iterations=2).planned == 138
    assert HyperbandSearch(LINE, MIN, budget=100).iterations == 2
    assert HyperbandSearch(LINE, MIN, budget=100).planned == 100
    with pytest.raises(ValueError, match=r"budget must be at most 69 \(1 iteration\(s\) of 69"):
        HyperbandSearch(LINE, MIN, budget=100, iterations=1)


# --- BOHB-style proposals ----------------------------------------------------------------


@pytest.mark.parametrize("cls", [ASHASearch, HyperbandSearch])
def test_tpe_proposes_from_the_highest_rung_with_enough_results(cls: type) -> None:
    searcher = cls(MIXED, MIN, max_budget=9, sampler="tpe", startup_trials=4, seed=1)
    trials = run(searcher, parallel=2)
    fresh = [t for t in trials if t.continue_from is None]
    assert [t.origin for t in fresh[:4]] == ["random"] * 4
    assert "model" in {t.origin for t in fresh[4:]}
    assert all(MIXED.contains(t.config) for t in trials)
    same = cls(MIXED, MIN, max_budget=9, sampler="tpe", startup_trials=4, seed=1)
    assert [t.to_dict() for t in run(same, parallel=2)] == [t.to_dict() for t in trials]


PLANE = SearchSpace((FloatParam("x", 0.0, 1.0), FloatParam("y", 0.0, 1.0)))


def test_bohb_fits_the_highest_rung_as_soon_as_it_has_d_plus_3_results() -> None:
    """The BOHB paper's rule (N_min + 2 = d + 3 results, d = 2 here): the second rung's
    model takes over from the lowest one at its 5th result, not its 10th."""
    searcher = HyperbandSearch(PLANE, MIN, max_budget=27, sampler="tpe", seed=3)
    assert searcher.startup_trials == 5
    running: list = []
    while sum(o.values is not None for o in searcher._results[1]) < 5:
        running += searcher.ask(4 - len(running))
        trial = running.pop(0)
        searcher.tell(trial.id, (trial.config["x"] - 0.3) ** 2 + trial.config["y"])
        if sum(o.values is not None for o in searcher._results[1]) < 5:
            assert searcher.model_rung() in (None, 0)
    assert len(searcher._results[0]) >= 10
    assert searcher.model_rung() == 1


def test_asha_tpe_moves_its_model_up_a_rung_only_at_10_results() -> None:
    """ASHA has no random third to guard a thin model (issue 41): its TPE stays on the
    rung below while a higher rung has fewer than 10 results (Optuna's own minimum),
    where 1ca821a's d + 3 (5 here) moved it up at the 5th."""
    searcher = ASHASearch(PLANE, MIN, max_budget=27, sampler="tpe", seed=3)
    assert searcher.startup_trials == 10
    running: list = []
    thin = 0  # asks made while rung 1 held 5 to 9 results
    while sum(o.values is not None for o in searcher._results[1]) < 10:
        running += searcher.ask(4 - len(running))
        trial = running.pop(0)
        searcher.tell(trial.id, (trial.config["x"] - 0.3) ** 2 + trial.config["y"])
        on_rung_1 = sum(o.values is not None for o in searcher._results[1])
        if on_rung_1 < 10:
            assert searcher.model_rung() in (None, 0)
            thin += on_rung_1 >= 5
    assert thin > 0
    assert searcher.model_rung() == 1


def test_bohb_draws_a_third_of_new_configurations_at_random() -> None:
    """The paper's rho = 1/3 keeps a misleading low-fidelity model from narrowing the
    search; ASHA-TPE keeps proposing from its model every time."""
    space = PLANE
    bohb = HyperbandSearch(space, MIN, max_budget=9, sampler="tpe", seed=4, iterations=3)
    run(bohb, parallel=2, function=lambda c: c["x"] + c["y"])
    after = [t for t in bohb.trials.values()
             if t.continue_from is None and int(t.id) > 40]  # fmt: skip
    share = sum(t.origin == "random" for t in after) / len(after)
    assert 0.15 < share < 0.5, share
    asha = ASHASearch(space, MIN, max_budget=9, sampler="tpe", seed=4, budget=120)
    run(asha, parallel=2, function=lambda c: c["x"] + c["y"])
    late = [t for t in asha.trials.values() if t.continue_from is None and int(t.id) > 40]
    assert all(t.origin == "model" for t in late)


def test_bohb_restores_mid_search_without_changing_its_proposals() -> None:
    reference = HyperbandSearch(MIXED, MIN, max_budget=9, sampler="tpe", startup_trials=3, seed=6)
    expected = run(reference, parallel=3)
    first = HyperbandSearch(MIXED, MIN, max_budget=9, sampler="tpe", startup_trials=3, seed=6)
    running = first.ask(3)
    asked = list(running)
    for _ in range(12):
        trial = running.pop(0)
        first.tell(trial.id, loss(trial.config))
        new = first.ask(3 - len(running))
        running += new
        asked += new
    resumed = HyperbandSearch(MIXED, MIN, max_budget=9, sampler="tpe", startup_trials=3, seed=6)
    resumed.restore(json.loads(json.dumps(first.state())))
    running = resumed.pending
    while not resumed.done():
        trial = running.pop(0)
        resumed.tell(trial.id, loss(trial.config))
        new = resumed.ask(3 - len(running))
        running += new
        asked += new
    assert [t.to_dict() for t in asked] == [t.to_dict() for t in expected]


def test_restore_takes_tpe_proposals_from_the_journal() -> None:
    """Refitting TPE per replayed proposal would make restore quadratic."""
    searcher = HyperbandSearch(MIXED, MIN, max_budget=9, sampler="tpe", startup_trials=3, seed=2)
    run(searcher, parallel=2)
    assert any(t.origin == "model" for t in searcher.trials.values())
    resumed = HyperbandSearch(MIXED, MIN, max_budget=9, sampler="tpe", startup_trials=3, seed=2)

    def refit(*args: object) -> None:
        raise AssertionError("restore refitted TPE")

    resumed._tpe = refit  # type: ignore[method-assign]
    resumed.restore(searcher.state())
    assert resumed.state() == searcher.state()


# --- settings ------------------------------------------------------------------------------


@pytest.mark.parametrize("algorithm", ["asha", "hyperband"])
@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"max_budget": 2}, "max_budget must be at least min_budget x reduction_factor"),
        ({"min_budget": 0}, "min_budget must be a positive number, but got 0"),
        ({"reduction_factor": 1}, "reduction_factor must be an integer of at least 2"),
        ({"sampler": "gp"}, "sampler must be one of random, tpe, but got 'gp'"),
        ({"startup_trials": 0}, "startup_trials must be an integer of at least 1"),
    ],
)
def test_bad_settings_are_refused(algorithm: str, settings: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        make_searcher(algorithm, MIXED, MIN, **settings)


def test_hyperband_takes_ashas_settings_and_iterations() -> None:
    """One constructor holds the shared settings: Hyperband adds only its own."""
    assert settings_of("hyperband") == [*settings_of("asha"), "iterations", "random_fraction"]
    shared = {"seed": 2, "budget": 50, "min_budget": 2, "max_budget": 18,
              "reduction_factor": 3, "sampler": "random", "startup_trials": 4}  # fmt: skip
    asha, hyperband = ASHASearch(LINE, MIN, **shared), HyperbandSearch(LINE, MIN, **shared)
    for searcher in (asha, hyperband):
        assert searcher.rungs == [2, 6, 18] and searcher.startup_trials == 4
        assert {k: searcher.state()["settings"][k] for k in shared} == shared
    assert hyperband.state()["settings"]["iterations"] is None
    with pytest.raises(TypeError, match="iterations"):
        ASHASearch(LINE, MIN, iterations=2)


@pytest.mark.parametrize("algorithm", ["asha", "hyperband"])
def test_one_objective_and_known_settings_only(algorithm: str) -> None:
    with pytest.raises(ValueError, match=f"objectives must be exactly one for {algorithm}"):
        make_searcher(algorithm, MIXED, [("loss", "min"), ("time", "min")])
    with pytest.raises(ValueError, match=f"{algorithm} search settings must be among seed"):
        make_searcher(algorithm, MIXED, MIN, eta=3)


def test_asha_promotes_from_the_highest_rung_first() -> None:
    """Deeper trials are closer to a finished model: their promotion goes first."""
    asha = ASHASearch(LINE, MIN, budget=40, seed=0)
    fresh = asha.ask(12)
    for i, trial in enumerate(fresh[:9]):
        asha.tell(trial.id, 1.0 + i)
    to_three = asha.ask(3)
    assert [t.continue_from for t in to_three] == [t.id for t in fresh[:3]]
    for i, trial in enumerate(to_three):
        asha.tell(trial.id, 1.0 + i)
    for trial in fresh[9:]:  # rung 0 now has 12 results: its top 4 holds an unpromoted one
        asha.tell(trial.id, 0.0)
    assert asha.promotable(0) and asha.promotable(1)
    (first,) = asha.ask(1)
    assert (first.continue_from, first.budget) == (to_three[0].id, 9)
    (second,) = asha.ask(1)
    assert (second.continue_from, second.budget) == (fresh[9].id, 3)


def test_best_is_the_best_of_the_longest_trained() -> None:
    """A 1-epoch result that looks better is not a better model than a 3-epoch one."""
    asha = ASHASearch(LINE, MIN, budget=10, seed=0)
    trials = asha.ask(3)
    for trial, value in zip(trials, (0.5, 0.2, 0.3), strict=True):
        asha.tell(trial.id, value)
    (promotion,) = asha.ask(1)
    asha.tell(promotion.id, 0.4)
    assert asha.best().trial == promotion
