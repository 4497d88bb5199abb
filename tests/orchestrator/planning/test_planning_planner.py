"""The planner: never past the cap, the memory or the slots; deterministic; wider in
the tail; a re-plan keeps running trials and warm gangs unless the gain is large."""

from __future__ import annotations

import pytest
from _planning_helpers import synthetic_model
from hypothesis import given, settings
from hypothesis import strategies as st

from nestor.orchestrator.planning import (
    Goal,
    Limits,
    NoFeasibleShape,
    Shape,
    choose,
    evaluate,
    replan,
)

models = st.builds(
    synthetic_model,
    width=st.sampled_from([3, 64, 512]),
    per_sample=st.floats(1e-5, 1e-2),
    split_share=st.floats(0.0, 1.0),
    alpha=st.floats(1e-6, 1e-2),
    beta=st.floats(1e-11, 1e-7),
    skew=st.floats(0.0, 1e-2),
    contention=st.floats(0.0, 1.0),
    cores=st.integers(1, 64),
)
limits_st = st.builds(
    Limits,
    slots=st.integers(1, 24),
    per_rank_batch=st.integers(1, 256),
    global_batch_max=st.one_of(st.none(), st.integers(1, 4096)),
    memory_per_slot=st.one_of(st.none(), st.integers(1, 2**32)),
    data=st.one_of(st.none(), st.integers(1, 4)),
    model=st.one_of(st.none(), st.integers(1, 4)),
)
goals = st.builds(Goal, runs=st.integers(1, 300), epochs=st.integers(1, 5),
                  generation=st.one_of(st.none(), st.integers(1, 40)))


@settings(max_examples=300, deadline=None)
@given(model=models, limits=limits_st, goal=goals)
def test_plan_stays_within_cap_memory_and_slots(model, limits, goal) -> None:
    try:
        plan = choose(model, limits, goal)
    except NoFeasibleShape as exc:
        assert "would fit" in str(exc)
        feasible, _ = evaluate(model, limits, goal)
        assert feasible == []
        return
    c = plan.chosen
    assert c.slots_used <= limits.slots
    assert c.at_once >= 1 and c.shape.ranks <= limits.slots
    assert c.global_batch == limits.per_rank_batch * c.shape.dp
    if limits.global_batch_max is not None:
        assert c.global_batch <= limits.global_batch_max
    if limits.memory_per_slot is not None:
        assert model.memory(c.shape.mp, limits.per_rank_batch) <= limits.memory_per_slot
    if limits.data is not None:
        assert c.shape.dp == limits.data
    if limits.model is not None:
        assert c.shape.mp == limits.model
    assert c.shape.mp <= model.size.max_model_parallel()
    # The least expected time of every shape that fits, each priced here from the cost
    # model itself (not from the planner's own list): up to the documented tie tolerance.
    times = brute_force_times(model, limits, goal)
    assert {o.shape for o in plan.feasible} == set(times)
    assert c.total_s == pytest.approx(times[c.shape], rel=1e-9)
    assert times[c.shape] <= min(times.values()) * (1 + 1e-5), (c, min(times.items(),
                                                                       key=lambda kv: kv[1]))


def brute_force_times(model, limits: Limits, goal: Goal) -> dict[Shape, float]:
    """Every dp x mp within the slots that meets the limits, with its expected time:
    as many trials at once as the slots (and the runs, and a generation) allow, waves
    of them one after another, each run epochs x the model's epoch time."""
    times = {}
    b = limits.per_rank_batch
    for dp in range(1, limits.slots + 1):
        for mp in range(1, limits.slots // dp + 1):
            if (limits.data not in (None, dp) or limits.model not in (None, mp)
                    or (limits.global_batch_max is not None and b * dp > limits.global_batch_max)
                    or mp > model.size.max_model_parallel()
                    or (limits.memory_per_slot is not None
                    and model.memory(mp, b) > limits.memory_per_slot)):
                continue
            at_once = min(limits.slots // (dp * mp), max(goal.runs, 1), goal.generation or 10**9)
            times[Shape(dp, mp)] = (goal.waves(at_once) * goal.epochs
                                    * model.epoch(dp, mp, b, at_once * dp * mp))
    return times


@settings(max_examples=100, deadline=None)
@given(model=models, limits=limits_st, goal=goals)
def test_plan_is_deterministic(model, limits, goal) -> None:
    try:
        first = choose(model, limits, goal)
    except NoFeasibleShape:
        return
    again = choose(model, limits, goal)
    assert first.to_record() == again.to_record()


def test_with_fewer_runs_left_each_gets_wider() -> None:
    # Cheap communication, no contention: a wide trial is nearly linear in its ranks,
    # so the slots go to as many trials as there are left, each as wide as the rest allows.
    model = synthetic_model(alpha=1e-6, beta=1e-12)
    limits = Limits(slots=8, per_rank_batch=32, global_batch_max=1024)
    widths = {runs: choose(model, limits, Goal(runs=runs, epochs=1)).chosen
              for runs in (64, 8, 4, 2, 1)}
    assert [(c.shape.ranks, c.at_once) for c in widths.values()] == [
        (1, 8), (1, 8), (2, 4), (4, 2), (8, 1)]


def test_the_cap_holds_back_data_parallelism_and_mp_takes_over() -> None:
    model = synthetic_model(alpha=1e-6, beta=1e-12, split_share=0.9)
    limits = Limits(slots=8, per_rank_batch=64, global_batch_max=128)
    plan = choose(model, limits, Goal(runs=1, epochs=1))
    assert plan.shape.dp <= 2 and plan.shape.mp >= 2
    assert any("above the cap 128" in why for _, why in plan.rejected)


def test_infeasible_cap_says_what_would_fit() -> None:
    model = synthetic_model()
    limits = Limits(slots=4, per_rank_batch=64, global_batch_max=100, data=4)
    with pytest.raises(NoFeasibleShape, match="data at most 1, or global_max at least 256"):
        choose(model, limits, Goal(runs=4, epochs=1))


def test_replan_keeps_running_trials_and_never_overbooks() -> None:
    model = synthetic_model(alpha=1e-6, beta=1e-12)
    limits = Limits(slots=8, per_rank_batch=32, global_batch_max=1024)
    # Tail of a search: 6 trials of 1x1 still running, 1 not started.
    decision = replan(model, limits, Goal(runs=1, epochs=1), current=Shape(1, 1), running=6,
                      warm=[Shape(1, 1)])
    assert decision.keep_running == 6
    assert 6 * 1 + decision.start_now * decision.shape.ranks <= 8
    with pytest.raises(ValueError, match="at most 8 slots"):
        replan(model, limits, Goal(runs=1, epochs=1), current=Shape(2, 1), running=5)


def test_replan_keeps_warm_gangs_for_small_gains_and_switches_for_large() -> None:
    model = synthetic_model(alpha=1e-6, beta=1e-12)
    limits = Limits(slots=8, per_rank_batch=32, global_batch_max=1024)
    goal = Goal(runs=8, epochs=1)
    best = choose(model, limits, goal)
    assert best.shape == Shape(1, 1)
    # Warm 2x1 gangs: within 10 % of the best (1x1) -> kept.
    warm = next(c for c in best.feasible if c.shape == Shape(2, 1))
    assert warm.total_s < best.chosen.total_s * 1.10 + 2.0
    kept = replan(model, limits, goal, current=Shape(2, 1), warm=[Shape(2, 1)])
    assert kept.shape == Shape(2, 1) and not kept.switched
    # Warm 1x8 gangs, far slower: replaced.
    far = replan(model, limits, goal, current=Shape(1, 8), warm=[Shape(1, 8)])
    assert far.shape == Shape(1, 1) and far.switched
    # With no hysteresis and free start-up the best shape always wins.
    eager = replan(model, limits, goal, current=Shape(2, 1), hysteresis=0.0, gang_start_s=0.0)
    assert eager.shape == Shape(1, 1)


def test_generational_barrier_counts_waves_per_generation() -> None:
    assert Goal(runs=20, epochs=1, generation=10).waves(4) == 6  # 3 waves x 2 generations
    assert Goal(runs=20, epochs=1).waves(4) == 5


@settings(max_examples=50, deadline=None)
@given(slots=st.integers(1, 60), data=st.one_of(st.none(), st.integers(1, 8)),
       model_=st.one_of(st.none(), st.integers(1, 8)))
def test_every_shape_within_the_slots_is_priced_or_ruled_out_once(slots, data, model_) -> None:
    limits = Limits(slots=slots, per_rank_batch=8, data=data, model=model_)
    feasible, rejected = evaluate(synthetic_model(), limits, Goal(runs=10, epochs=1))
    seen = [c.shape for c in feasible] + [s for s, _ in rejected]
    expected = {Shape(r // m, m) for r in range(1, slots + 1) for m in range(1, r + 1)
                if r % m == 0 and data in (None, r // m) and model_ in (None, m)}
    assert sorted(seen) == sorted(expected)


def test_a_shape_with_more_data_ranks_than_samples_is_ruled_out_not_free() -> None:
    # 4,000 samples on 4,001 data-parallel ranks: a rank gets none, so the model
    # priced the trial at 0 s and would have chosen it.
    model = synthetic_model(train_samples=4000)
    feasible, rejected = evaluate(model, Limits(slots=5000, per_rank_batch=1, model=1),
                                  Goal(runs=1, epochs=1))
    assert all(c.shape.dp <= 4000 and c.total_s > 0 for c in feasible)
    assert (Shape(4001, 1), "dp 4001 above the 4000 training samples: a rank would get none"
            ) in rejected
