"""PB2: PBT whose explore step is a GP bandit (``PBTSearch(explore="pb2")``)."""

from __future__ import annotations

import functools
import json
import math
import random
import statistics
from collections.abc import Callable

import numpy as np
import pytest
from _search_helpers import MIN, MIXED

from nestor.search import Failure, PBTSearch, make_searcher, schedules_from_state
from nestor.search._pb2 import TimeVaryingGP, select
from nestor.search.space import CategoricalParam, FloatParam, IntParam, SearchSpace

MAX = [("score", "max")]
NARROW = SearchSpace((FloatParam("lr", 1e-4, 1e-1, log=True),))
WIDE = SearchSpace((FloatParam("lr", 1e-6, 1.0, log=True),))


def decades(lr: float, best: float) -> float:
    return abs(math.log10(lr) - best)


def train(
    searcher: PBTSearch,
    growth: Callable[[float, int], float],
    *,
    seed: int,
    parallel: int = 4,
    steps: int | None = None,
    fail: Callable[[int], bool] = lambda told: False,
) -> dict[str, float]:
    """Simulated training: a trial adds growth(lr, interval) + noise to the score of
    the checkpoint it continues (0 from scratch). Returns each trial's score."""
    noise = random.Random(1000 + seed)
    scores: dict[str, float] = {}
    running: list = []
    told = 0
    while not searcher.done() and (steps is None or told < steps):
        running += searcher.ask(parallel - len(running)) if len(running) < parallel else []
        if not running:
            break
        trial = running.pop(0)
        if fail(told):
            searcher.tell(trial.id, Failure("injected"))
        else:
            before = scores[trial.continue_from] if trial.continue_from else 0.0
            scores[trial.id] = before + growth(trial.config["lr"], trial.generation)
            scores[trial.id] += noise.gauss(0.0, 0.1)
            searcher.tell(trial.id, scores[trial.id])
        told += 1
    return scores


def fixed(best: float, width: float) -> Callable[[float, int], float]:
    return lambda lr, interval: math.exp(-((decades(lr, best) / width) ** 2))


def drifting(lr: float, interval: int) -> float:
    """The best lr falls from 10^-1.5 to 10^-3 over 12 intervals (a decay schedule)."""
    return math.exp(-((decades(lr, -1.5 - 1.5 * interval / 11) / 0.7) ** 2))


def chosen_distance(searcher: PBTSearch, best: Callable[[int], float]) -> float:
    """Mean distance (decades of lr) from the best lr of the values explored at
    exploits from the 3rd interval on (PB2's GP is fitted from then on)."""
    return statistics.mean(
        decades(t.config["lr"], best(t.generation))
        for t in searcher.trials.values()
        if t.origin == "exploit" and t.generation >= 2
    )


def pbt(space: SearchSpace, explore: str, seed: int) -> PBTSearch:
    return PBTSearch(space, MAX, population=8, intervals=12, seed=seed, explore=explore)


PROBLEMS = {  # space, growth(lr, interval), the best log10 lr at an interval
    "fixed-narrow": (NARROW, fixed(-2.0, 0.5), lambda k: -2.0),
    "fixed-wide": (WIDE, fixed(-2.0, 1.0), lambda k: -2.0),
    "drifting": (WIDE, drifting, lambda k: -1.5 - 1.5 * k / 11),
}
SEEDS = range(6)


@functools.cache
def outcome(problem: str, explore: str, seed: int) -> tuple[float, float]:
    """(distance of the explored values from the best lr, best final score)."""
    space, growth, best = PROBLEMS[problem]
    searcher = pbt(space, explore, seed)
    if explore == "perturb":  # like for like: PB2 runs ready members in the order decided
        searcher._next_index = lambda: 0  # type: ignore[method-assign]
    train(searcher, growth, seed=seed)
    return chosen_distance(searcher, best), searcher.best().value


@pytest.mark.parametrize("problem", list(PROBLEMS))
def test_pb2_explores_closer_to_the_good_lr_than_random_perturbation(problem: str) -> None:
    """Reward growth depends smoothly on lr: over seeds, the GP bandit's picks land
    nearer the best lr than PBT's perturbations, and its worst seed is far better
    (a population that random steps leave stuck far away is brought back)."""
    perturb = [outcome(problem, "perturb", seed)[0] for seed in SEEDS]
    pb2 = [outcome(problem, "pb2", seed)[0] for seed in SEEDS]
    assert statistics.mean(pb2) < statistics.mean(perturb)
    assert max(pb2) < max(perturb)


def test_pb2_tracks_a_drifting_best_lr_and_ends_with_a_better_model() -> None:
    """Where the best lr moves during training (a decay schedule), PB2 is closer on
    most seeds and its final models are better on average."""
    perturb = [outcome("drifting", "perturb", seed) for seed in SEEDS]
    pb2 = [outcome("drifting", "pb2", seed) for seed in SEEDS]
    closer = sum(b[0] < a[0] for a, b in zip(perturb, pb2, strict=True))
    assert closer > len(SEEDS) // 2
    assert statistics.mean(b[1] for b in pb2) > statistics.mean(a[1] for a in perturb) + 1.0


def test_the_gp_chooses_once_there_are_intervals_to_fit() -> None:
    searcher = pbt(NARROW, "pb2", 0)
    train(searcher, fixed(-2.0, 0.5), seed=0)
    by = {entry["trial"]: entry["chosen_by"] for entry in searcher.pb2_log}
    exploits = [t for t in searcher.trials.values() if t.origin == "exploit"]
    assert {by[t.id] for t in exploits if t.generation == 1} == {"perturb"}  # nothing to fit
    assert {by[t.id] for t in exploits if t.generation >= 3} == {"gp"}
    assert set(by) == {t.id for t in exploits}  # PB2 touches only explored trials
    # The lineage machinery is PBT's: exploits continue a donor's checkpoint.
    for trial in exploits:
        donor = searcher.trials[trial.continue_from]
        assert donor.member != trial.member and donor.generation == trial.generation - 1


def test_categoricals_are_kept_or_resampled_and_numbers_stay_in_the_space() -> None:
    space = SearchSpace((
        FloatParam("lr", 1e-4, 1e-1, log=True),
        IntParam("width", 8, 512, log=True),
        CategoricalParam("act", ("relu", "tanh", "gelu")),
    ))  # fmt: skip
    searcher = PBTSearch(space, MAX, population=6, intervals=8, seed=3, explore="pb2",
                         resample_probability=0.5)  # fmt: skip
    train(searcher, lambda lr, k: fixed(-2.0, 0.5)(lr, k), seed=3)
    gp = {e["trial"] for e in searcher.pb2_log if e["chosen_by"] == "gp"}
    assert len(gp) >= 5
    changed = 0
    for trial_id in gp:
        trial = searcher.trials[trial_id]
        donor = searcher.trials[trial.continue_from]
        assert space.contains(trial.config)
        assert isinstance(trial.config["width"], int)
        changed += trial.config["act"] != donor.config["act"]
    assert 0 < changed < len(gp)  # resampled sometimes (a redraw may also land on the same)


def test_restore_mid_search_continues_identically_without_refitting() -> None:
    """A killed driver resumes PB2 exactly; the GP's picks come from the journal."""
    growth = fixed(-2.0, 0.5)
    reference = pbt(NARROW, "pb2", 5)
    expected = train(reference, growth, seed=5)

    first = pbt(NARROW, "pb2", 5)
    train(first, growth, seed=5, steps=50)
    assert first.pending and any(e["chosen_by"] == "gp" for e in first.pb2_log)
    state = json.loads(json.dumps(first.state()))
    resumed = pbt(NARROW, "pb2", 5)
    resumed.restore(state)
    assert resumed.state() == first.state()
    assert "gp" not in {e["chosen_by"] for e in resumed.pb2_log}  # no refit on replay
    assert "journal" in {e["chosen_by"] for e in resumed.pb2_log}
    # Finish both: the resumed search asks exactly what the uninterrupted one asked.
    noise = random.Random(1005)
    for _ in range(50):
        noise.gauss(0.0, 0.1)
    scores = {t: expected[t] for t in expected if int(t) < first.n_asked and t not in
              {p.id for p in first.pending}}  # fmt: skip
    running = resumed.pending
    while not resumed.done():
        running += resumed.ask(4 - len(running)) if len(running) < 4 else []
        trial = running.pop(0)
        before = scores[trial.continue_from] if trial.continue_from else 0.0
        scores[trial.id] = before + growth(trial.config["lr"], trial.generation)
        scores[trial.id] += noise.gauss(0.0, 0.1)
        resumed.tell(trial.id, scores[trial.id])
    assert resumed.trials == reference.trials
    assert resumed.state() == reference.state()
    assert schedules_from_state(resumed.state())["best"] == reference.best_schedule()


def test_a_journal_from_perturb_does_not_restore_as_pb2() -> None:
    perturb = pbt(NARROW, "perturb", 1)
    train(perturb, fixed(-2.0, 0.5), seed=1, steps=20)
    with pytest.raises(ValueError, match="same settings"):
        pbt(NARROW, "pb2", 1).restore(perturb.state())


def test_pb2_survives_failures() -> None:
    searcher = pbt(NARROW, "pb2", 2)
    train(searcher, fixed(-2.0, 0.5), seed=2, fail=lambda told: told % 7 == 3)
    assert searcher.done() and len(searcher.trials) == 8 * 12
    assert any(e["chosen_by"] == "gp" for e in searcher.pb2_log)
    assert {t.origin for t in searcher.trials.values()} >= {"exploit", "continue"}


@pytest.mark.parametrize(
    ("space", "settings", "message"),
    [
        (NARROW, {"explore": "gp"}, "explore must be one of perturb, pb2, but got 'gp'"),
        (SearchSpace((CategoricalParam("act", ("relu", "tanh")),)), {"explore": "pb2"},
         r"explore pb2 needs at least one float or int parameter .* only categorical ones"
         r" \(act\): use explore perturb"),
    ],
)  # fmt: skip
def test_bad_settings_are_refused(space: SearchSpace, settings: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        make_searcher("pbt", space, MIN, population=4, **settings)


def test_made_by_name_with_its_settings() -> None:
    searcher = make_searcher("pbt", MIXED, MIN, population=4, intervals=3, explore="pb2")
    assert searcher.explore == "pb2" and searcher.state()["settings"]["explore"] == "pb2"
    assert searcher.planned == 12


# --- the GP itself --------------------------------------------------------------------------


def test_the_gp_fits_a_smooth_function_and_is_unsure_away_from_data() -> None:
    rng = np.random.default_rng(0)
    h = rng.random(40)
    x = np.column_stack([np.zeros(40), np.zeros(40), h])
    y = np.sin(6 * h)
    gp = TimeVaryingGP(x, (y - y.mean()) / y.std())
    grid = np.linspace(0.05, 0.95, 19)
    mean, std = gp.predict(np.column_stack([np.zeros(19), np.zeros(19), grid]))
    truth = (np.sin(6 * grid) - y.mean()) / y.std()
    assert np.max(np.abs(mean - truth)) < 0.15
    # All the data from one interval: nothing says the function moves, so the fit
    # keeps it (epsilon 0) and five intervals later it is as sure as now.
    assert gp.fit.epsilon == 0.0
    _, later = gp.predict(np.array([[5.0, 0.0, 0.5]]))
    assert later[0] <= 2 * std.max()


def test_the_gp_forgets_old_intervals_when_the_function_moves_with_time() -> None:
    """Ten intervals of a function that drifts (sin(6 h + 0.2 t)): the fit decays
    old intervals (epsilon > 0), so five intervals past the data it is nearly as
    unsure as with no data, and far less sure than at the last interval.

    Measured at seeds 0-4: epsilon 0.2 each time; the standard deviation five
    intervals on is 6.5 to 15.5 times the mean one at the last interval. Margin:
    at least 3 times (half the smallest measured ratio)."""
    rng = np.random.default_rng(0)
    t = np.repeat(np.arange(10.0), 8)
    h = rng.random(80)
    y = np.sin(6 * h + 0.2 * t)
    gp = TimeVaryingGP(np.column_stack([t, np.zeros(80), h]), (y - y.mean()) / y.std())
    assert gp.fit.epsilon > 0, gp.fit
    grid = np.linspace(0.05, 0.95, 19)
    _, now = gp.predict(np.column_stack([np.full(19, 9.0), np.zeros(19), grid]))
    _, far = gp.predict(np.array([[14.0, 0.0, 0.5]]))
    assert far[0] > 3 * now.mean(), (far, now.mean())


def test_the_time_kernel_forgets_when_the_best_value_moves() -> None:
    """Data whose best h moves with t: the fit decays old intervals (epsilon > 0), and
    the bandit's pick follows the latest intervals, not the average over all of them."""
    rng = np.random.default_rng(1)
    t = np.repeat(np.arange(10.0), 8)
    h = rng.random(80)
    best = 0.2 + 0.6 * t / 9
    change = np.exp(-(((h - best) / 0.15) ** 2)) + rng.normal(0, 0.05, 80)
    pick, info = select(t, np.zeros(80), h[:, None], change, time=9.0, reward_before=0.0,
                        pending=np.zeros((0, 1)), rng=np.random.default_rng(0))  # fmt: skip
    assert info["epsilon"] > 0
    assert abs(pick[0] - 0.8) < 0.1
    early, _ = select(t, np.zeros(80), h[:, None], change, time=0.0, reward_before=0.0,
                      pending=np.zeros((0, 1)), rng=np.random.default_rng(0))  # fmt: skip
    assert abs(early[0] - 0.2) < 0.1


def test_pending_choices_push_the_next_pick_away() -> None:
    """With the data saying little (equal changes at both ends), the bandit picks the
    most uncertain point; a batch already exploring there sends the next pick elsewhere."""
    h = np.array([0.0, 0.05, 0.1, 0.9, 0.95, 1.0] * 2)
    change = np.random.default_rng(2).normal(0, 0.01, len(h))
    args = (np.ones(len(h)), np.zeros(len(h)), h[:, None], change)
    first, _ = select(*args, time=1.0, reward_before=0.0, pending=np.zeros((0, 1)),
                      rng=np.random.default_rng(0))  # fmt: skip
    second, _ = select(*args, time=1.0, reward_before=0.0, pending=first[None, :],
                       rng=np.random.default_rng(0))  # fmt: skip
    assert 0.2 < first[0] < 0.8
    assert abs(second[0] - first[0]) > 0.1
