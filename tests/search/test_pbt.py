"""Population-based training: exploit/explore, lineage, restore, settings."""

from __future__ import annotations

import itertools
import json
import math
import random

import pytest
from _search_helpers import MIN, MIXED, loss

from nestor.search import Failure, PBTSearch, make_searcher, schedules_from_state
from nestor.search.space import CategoricalParam, FloatParam, IntParam, SearchSpace

SPACE = SearchSpace(
    (
        FloatParam("lr", 1e-4, 1.0, log=True),
        FloatParam("momentum", 0.0, 0.99),
        IntParam("width", 8, 512),
        CategoricalParam("act", ("relu", "tanh")),
    )
)


def first_interval(searcher: PBTSearch, values: dict[int, float]) -> dict[int, str]:
    """Ask every member's first trial and tell ``values`` (member -> value) in
    that dict's order; returns member -> trial id."""
    trials = {t.member: t for t in searcher.ask(searcher.population)}
    for member, value in values.items():
        searcher.tell(trials[member].id, value)
    return {m: t.id for m, t in trials.items()}


# Members 5, 4, ..., 0 report first, each the best so far (so each continues);
# then 6 and 7 report the two worst results of all eight: the bottom 25 %.
ORDER = {5: 5.0, 4: 4.0, 3: 3.0, 2: 2.0, 1: 1.0, 0: 0.0, 6: 6.0, 7: 7.0}


def test_the_bottom_quantile_copies_a_top_member_and_perturbs_its_config() -> None:
    pbt = PBTSearch(SPACE, MIN, population=8, intervals=3, resample_probability=0.0, seed=3)
    ids = first_interval(pbt, ORDER)
    first = {o.trial.member: o.trial for o in pbt.observations}
    second = {t.member: t for t in pbt.ask(8)}
    assert sorted(second) == list(range(8))
    for member in range(6):  # the top three quarters continue as they were
        trial = second[member]
        assert (trial.origin, trial.continue_from, trial.parents) == (
            "continue", ids[member], (ids[member],)
        )
        assert trial.config == first[member].config
    for member in (6, 7):  # the bottom quarter exploits the top quarter (members 0, 1)
        trial = second[member]
        assert trial.origin == "exploit"
        assert trial.continue_from in (ids[0], ids[1])
        assert trial.parents == (trial.continue_from,)
        donor = pbt.trials[trial.continue_from].config
        assert SPACE.contains(trial.config)
        assert trial.config != donor
        for name in ("lr", "momentum"):
            low, high = SPACE[name].low, SPACE[name].high
            allowed = {min(max(donor[name] * f, low), high) for f in (0.8, 1.2)}
            assert trial.config[name] in allowed, (name, donor[name], trial.config[name])
        width = donor["width"]
        assert trial.config["width"] in {
            min(max(round(width * f), 8), 512) for f in (0.8, 1.2)
        } | {width - 1, width + 1}
        assert trial.config["act"] == donor["act"]  # kept unless resampled
    for member, trial in second.items():  # all of them train the second interval
        assert (trial.generation, trial.budget, trial.member) == (1, 2, member)


def test_resampling_draws_anew_inside_the_space() -> None:
    pbt = PBTSearch(SPACE, MIN, population=8, intervals=3, resample_probability=1.0, seed=5)
    ids = first_interval(pbt, ORDER)
    second = {t.member: t for t in pbt.ask(8)}
    for member in (6, 7):
        trial = second[member]
        donor = pbt.trials[trial.continue_from].config
        assert trial.continue_from in (ids[0], ids[1])
        assert SPACE.contains(trial.config)
        for name in ("lr", "momentum"):  # a redraw, not a factor of 0.8 or 1.2
            ratio = trial.config[name] / donor[name] if donor[name] else math.inf
            assert not any(math.isclose(ratio, f) for f in (0.8, 1.0, 1.2))


def test_perturbed_values_stay_inside_the_space_at_its_edges() -> None:
    space = SearchSpace(
        (FloatParam("a", 0.5, 0.55), IntParam("n", 1, 2), FloatParam("b", 1e-3, 1e-2, log=True))
    )
    pbt = PBTSearch(space, MIN, population=6, intervals=30, resample_probability=0.1, seed=1)
    noise = random.Random(0)
    running: list = []
    while not pbt.done():
        running += pbt.ask(6 - len(running))
        trial = running.pop(0)
        pbt.tell(trial.id, noise.random())  # any member may be bottom or top
    exploits = [t for t in pbt.trials.values() if t.origin == "exploit"]
    assert len(exploits) > 20
    assert all(space.contains(t.config) for t in pbt.trials.values())
    # An integer that rounding would leave where it was moves a step instead.
    moved = [t for t in exploits if t.config["n"] != pbt.trials[t.continue_from].config["n"]]
    assert moved


def test_a_member_that_reports_is_asked_again_at_once() -> None:
    """Asynchronous: no barrier at the end of an interval."""
    pbt = PBTSearch(SPACE, MIN, population=4, intervals=3, seed=0)
    trials = pbt.ask(4)
    assert pbt.ask(1) == []  # everyone is training
    pbt.tell(trials[2].id, 1.0)
    (again,) = pbt.ask(4)
    assert (again.member, again.generation, again.continue_from) == (2, 1, trials[2].id)


def test_a_failed_member_copies_the_best_or_retries_from_its_last_checkpoint() -> None:
    pbt = PBTSearch(SPACE, MIN, population=4, intervals=3, seed=2)
    trials = pbt.ask(4)
    pbt.tell(trials[0].id, Failure("oom"))  # nobody else has reported: retry from scratch
    (retry,) = pbt.ask(1)
    assert (retry.origin, retry.continue_from, retry.budget) == ("retry", None, 2)
    assert retry.config != trials[0].config  # explored: the old config may be what failed
    pbt.tell(trials[1].id, 0.5)
    pbt.tell(trials[2].id, Failure("nan"))  # member 1 reported: copy it
    copy = {t.member: t for t in pbt.ask(2)}[2]
    assert (copy.member, copy.origin, copy.continue_from) == (2, "exploit", trials[1].id)
    assert pbt.lineage(retry.id)[0].start == 0.0  # two intervals in one trial
    assert pbt.lineage(retry.id)[0].until == 2


def test_lineage_follows_the_copied_checkpoints() -> None:
    pbt = PBTSearch(SPACE, MIN, population=8, intervals=3, seed=3)
    ids = first_interval(pbt, ORDER)
    second = {t.member: t for t in pbt.ask(8)}
    donor = next(m for m in (0, 1) if ids[m] == second[7].continue_from)
    pbt.tell(second[7].id, -1.0)  # the copy is now the best trial
    schedule = pbt.lineage(second[7].id)
    assert [(s.trial_id, s.member, s.interval) for s in schedule] == [
        (ids[donor], donor, 0),
        (second[7].id, 7, 1),
    ]
    assert [(s.start, s.until) for s in schedule] == [(0.0, 1.0), (1.0, 2.0)]
    assert [s.copied_from for s in schedule] == [None, donor]
    assert [s.value for s in schedule] == [float(donor), -1.0]
    assert schedule[1].config == second[7].config
    assert pbt.best_schedule() == schedule
    # A member's own history is its trials, with where each one came from.
    history = pbt.history(7)
    assert [(s.interval, s.copied_from, s.value) for s in history] == [
        (0, None, 7.0),
        (1, donor, -1.0),
    ]
    with pytest.raises(ValueError, match="member must be an integer from 0 to 7"):
        pbt.history(8)


def run_population(pbt: PBTSearch, parallel: int, steps: int | None = None) -> list:
    """A driver with ``parallel`` slots; a member's value depends on its lineage's
    configs (as trained weights would), so exploiting pays."""
    running: list = []
    asked: list = []
    told = 0
    while not pbt.done() and (steps is None or told < steps):
        new = pbt.ask(parallel - len(running)) if len(running) < parallel else []
        running += new
        asked += new
        trial = running.pop(0)
        value = sum(loss(s.config) for s in pbt.lineage(trial.id)) / (trial.generation + 1)
        pbt.tell(trial.id, Failure("x") if told % 11 == 4 else value)
        told += 1
    return asked


def test_the_lineage_is_rebuilt_from_the_journal_alone() -> None:
    pbt = PBTSearch(MIXED, MIN, population=6, intervals=5, seed=4)
    run_population(pbt, parallel=4)
    assert pbt.done() and len(pbt.observations) == 30
    assert any(t.origin == "exploit" for t in pbt.trials.values())
    best = pbt.best_schedule()
    assert best[-1].trial_id == pbt.best().trial.id
    assert [s.interval for s in best] == list(range(5))
    assert all(a.until == b.start for a, b in itertools.pairwise(best))
    state = json.loads(json.dumps(pbt.state()))
    read = schedules_from_state(state)
    assert read["best"] == best
    assert read["members"] == {m: pbt.history(m) for m in range(6)}
    restored = PBTSearch(MIXED, MIN, population=6, intervals=5, seed=4)
    restored.restore(state)
    assert restored.best_schedule() == best
    with pytest.raises(ValueError, match="state must come from a pbt search"):
        schedules_from_state({**state, "algorithm": "asha"})


def test_restore_mid_population_continues_identically() -> None:
    """Killed with members training and decisions made but not yet asked."""
    reference = PBTSearch(MIXED, MIN, population=8, intervals=4, seed=8)
    expected = run_population(reference, parallel=6)

    first = PBTSearch(MIXED, MIN, population=8, intervals=4, seed=8)
    asked = run_population(first, parallel=6, steps=13)
    assert first.pending and first._ready  # trials running, members waiting for a slot
    resumed = PBTSearch(MIXED, MIN, population=8, intervals=4, seed=8)
    resumed.restore(json.loads(json.dumps(first.state())))
    assert resumed.state() == first.state()
    running = resumed.pending
    told = len(resumed.observations)
    while not resumed.done():
        new = resumed.ask(6 - len(running)) if len(running) < 6 else []
        running += new
        asked += new
        trial = running.pop(0)
        value = sum(loss(s.config) for s in resumed.lineage(trial.id)) / (trial.generation + 1)
        resumed.tell(trial.id, Failure("x") if told % 11 == 4 else value)
        told += 1
    assert [t.to_dict() for t in asked] == [t.to_dict() for t in expected]
    assert resumed.best_schedule() == reference.best_schedule()


def test_planned_trials_and_budget() -> None:
    assert PBTSearch(SPACE, MIN, population=4, intervals=5).planned == 20
    assert PBTSearch(SPACE, MIN, population=4, budget=18).intervals == 5
    assert PBTSearch(SPACE, MIN, population=4, budget=18).planned == 18
    assert PBTSearch(SPACE, MIN, population=8).planned == 80
    pbt = PBTSearch(SPACE, MIN, population=4, intervals=2, interval=3)
    trials = []
    while not pbt.done():
        trials += pbt.ask(4)
        for t in pbt.pending:
            pbt.tell(t.id, 1.0)
    assert [t.budget for t in trials] == [3] * 4 + [6] * 4
    assert pbt.budget_used == 24.0  # 4 members x 2 intervals x 3 epochs


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"population": 1}, "population must be an integer of at least 2, but got 1"),
        ({"interval": 0}, "interval must be a positive number, but got 0"),
        ({"intervals": 0}, "intervals must be an integer of at least 1, but got 0"),
        ({"quantile": 0.6}, "quantile must be greater than 0 and at most 0.5, but got 0.6"),
        ({"resample_probability": 2}, "resample_probability must be between 0 and 1"),
        ({"perturbation_factors": []}, "perturbation_factors must list at least one factor"),
        ({"perturbation_factors": [0.8, -1]}, "perturbation_factors must be a positive number"),
        ({"budget": 3}, r"budget must be at least population \(8\)"),
        (
            {"budget": 100, "intervals": 10},
            r"budget must be at most 80 \(population 8 x 10 intervals\), but got 100:"
            " set intervals to 13",
        ),
    ],
)
def test_bad_settings_are_refused(settings: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        PBTSearch(SPACE, MIN, **settings)


def test_one_objective_only() -> None:
    with pytest.raises(ValueError, match="objectives must be exactly one for pbt search"):
        PBTSearch(SPACE, [("loss", "min"), ("time", "min")])


def test_made_by_name() -> None:
    pbt = make_searcher("pbt", SPACE, MIN, population=4, intervals=2, seed=1)
    assert isinstance(pbt, PBTSearch) and pbt.planned == 8
    with pytest.raises(ValueError, match="pbt search settings must be among seed, budget,"):
        make_searcher("pbt", SPACE, MIN, populaton=4)


def test_a_member_that_reported_first_is_judged_again_while_it_waits() -> None:
    """The member whose trial starts first reports first, against no peers: it
    must not escape the bottom quantile for that, as long as its next trial
    has not started when the others report."""
    pbt = PBTSearch(SPACE, MIN, population=4, intervals=2, resample_probability=0.0, seed=1)
    ids = first_interval(pbt, {0: 9.0, 1: 1.0, 2: 2.0, 3: 3.0})  # 0 first, and worst
    second = {t.member: t for t in pbt.ask(4)}
    assert second[0].origin == "exploit"
    assert second[0].continue_from == ids[1]  # the top quarter: member 1
    assert all(second[m].origin == "continue" for m in (1, 2, 3))
    # A decision flips only with its verdict: once started, it stands.
    started = PBTSearch(SPACE, MIN, population=4, intervals=2, seed=1)
    first = {t.member: t for t in started.ask(4)}
    started.tell(first[0].id, 9.0)
    early = started.ask(1)[0]
    assert (early.member, early.origin) == (0, "continue")
    for member, value in ((1, 1.0), (2, 2.0), (3, 3.0)):
        started.tell(first[member].id, value)
    later = {t.member: t for t in started.ask(3)}
    assert sorted(later) == [1, 2, 3] and early.id not in {t.id for t in later.values()}


def test_a_free_slot_runs_the_member_starting_from_the_best_checkpoint() -> None:
    """Members with no checkpoint start first (the whole population is sampled),
    then the ready trial whose starting checkpoint ranks best in its interval runs
    first, not the one decided first: the leading lineage advances sooner."""
    pbt = PBTSearch(SPACE, MIN, population=8, intervals=3, seed=0)
    first = {t.member: t for t in pbt.ask(5)}
    for member, value in ((0, 3.0), (1, 4.0), (2, 5.0), (3, 2.0), (4, 1.0)):  # 4 best, told last
        pbt.tell(first[member].id, value)
    fresh = pbt.ask(3)
    assert sorted(t.member for t in fresh) == [5, 6, 7]
    assert all(t.continue_from is None for t in fresh)
    (lead,) = pbt.ask(1)
    assert lead.continue_from == first[4].id  # member 4's own continuation or a copy of it


def test_too_few_results_to_rank_leave_the_order_decided() -> None:
    """Below 1 / quantile results an interval's ranking is too noisy to race on."""
    pbt = PBTSearch(SPACE, MIN, population=4, intervals=3, seed=0)
    first = {t.member: t for t in pbt.ask(3)}
    for member, value in ((1, 2.0), (2, 1.0), (0, 3.0)):  # 3 results: fewer than 1 / 0.25
        pbt.tell(first[member].id, value)
    assert pbt.ask(1)[0].member == 3  # no checkpoint yet: first
    (next_,) = pbt.ask(1)
    assert (next_.member, next_.continue_from) == (1, first[1].id)  # decided first


def test_pb2_runs_ready_members_in_the_order_decided() -> None:
    pbt = PBTSearch(SPACE, MIN, population=4, intervals=3, seed=0, explore="pb2")
    first = {t.member: t for t in pbt.ask(4)}
    for member, value in ((0, 3.0), (1, 2.5), (2, 2.0), (3, 1.0)):
        pbt.tell(first[member].id, value)
    assert [t.member for t in pbt.ask(4)] == [0, 1, 2, 3]
