"""The statistics behind bench/REPORT.md: thresholds, speed-ups, utilization."""

from __future__ import annotations

import math
import random
import sys
from dataclasses import asdict
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench import stats


def test_threshold_is_what_only_the_top_one_percent_reach():
    values = random.Random(3).sample(range(10_000), 1_000)
    threshold = stats.top_fraction_threshold(values, 0.01)
    assert sum(v >= threshold for v in values) == 10
    assert threshold == sorted(values)[-10]


def test_threshold_of_a_hundred_is_the_best_and_rounds_up():
    values = [i / 100 for i in range(100)]
    assert stats.top_fraction_threshold(values, 0.01) == 0.99
    # 150 values: 1 % is 1.5 configurations; at least 2 must reach it.
    values = list(range(150))
    assert stats.top_fraction_threshold(values, 0.01) == 148


def test_threshold_counts_failed_configurations_against_the_search():
    values = [0.5, 0.6, None, float("nan"), 0.9, 0.8, 0.7, 0.4, 0.3, 0.2]
    # 10 configurations, top 20 % = 2 of them: the second best succeeded value.
    assert stats.top_fraction_threshold(values, 0.2) == 0.8
    with pytest.raises(ValueError, match="only 1 of 3"):
        stats.top_fraction_threshold([None, 0.5, None], 0.9)


def test_threshold_for_minimized_metrics_and_bad_input():
    assert stats.top_fraction_threshold([3.0, 1.0, 2.0, 5.0], 0.5, mode="min") == 2.0
    with pytest.raises(ValueError, match="fraction must be"):
        stats.top_fraction_threshold([1.0], 0)
    with pytest.raises(ValueError, match="at least one finite"):
        stats.top_fraction_threshold([None, float("nan")], 0.5)


def test_runs_to_threshold_counts_failed_runs():
    assert stats.runs_to_threshold([0.5, None, 0.97, 0.99], 0.97) == 3
    assert stats.runs_to_threshold([0.5, None], 0.97) is None
    assert stats.runs_to_threshold([3.0, 0.5], 1.0, mode="min") == 2


def test_speedup_and_scaling_efficiency():
    # The seed's data parallelism: 1,090 s to 1,090 / 3.5 s on 4 nodes.
    assert stats.speedup(1090.0, 1090.0 / 3.5) == pytest.approx(3.5)
    assert stats.scaling_efficiency(3.5, 4) == pytest.approx(0.875)
    assert stats.throughput_efficiency(1800.0, 1000.0, 2) == pytest.approx(0.9)
    with pytest.raises(ValueError, match="time_s must be a positive"):
        stats.speedup(10.0, 0.0)
    with pytest.raises(ValueError, match="ranks must be a positive integer"):
        stats.scaling_efficiency(2.0, 0)


def test_product_of_speedups_is_the_seed_estimate():
    # The seed's combined table: 1x, then HPO, +DP, +MP multiplied up.
    assert stats.cumulative_products([1.0, 4.0, 3.5, 4.0]) == pytest.approx([1, 4, 14, 56])
    with pytest.raises(ValueError, match="positive"):
        stats.cumulative_products([2.0, -1.0])


def test_utilization_from_a_trial_timeline():
    # Two slots for 10 s. One trial holds one slot for 10 s; a 2-slot trial runs
    # 4 s to 6 s; a trial that started before the window counts only inside it.
    timeline = [(0.0, 10.0, 1), (4.0, 6.0, 2), (-5.0, 1.0, 1)]
    assert stats.busy_slot_seconds(timeline, 0.0, 10.0) == pytest.approx(10 + 4 + 1)
    assert stats.utilization(timeline, slots=2, start=0.0, end=10.0) == pytest.approx(15 / 20)
    assert stats.occupancy(timeline, [0.5, 3.0, 4.0, 5.9, 6.0]) == [2, 1, 3, 3, 1]
    with pytest.raises(ValueError, match="end after it starts"):
        stats.busy_slot_seconds([(2.0, 1.0, 1)], 0.0, 3.0)


def test_generational_barrier_idles_slots_in_the_timeline():
    # Generation 1: durations 1 and 3 on 2 slots; generation 2 starts at the
    # barrier (3 s). Async refill starts the next trial at 1 s instead.
    generational = [(0, 1, 1), (0, 3, 1), (3, 4, 1), (3, 6, 1)]
    refill = [(0, 1, 1), (0, 3, 1), (1, 2, 1), (2, 5, 1)]
    assert stats.utilization(generational, 2, 0, 6) == pytest.approx(8 / 12)
    assert stats.utilization(refill, 2, 0, 5) == pytest.approx(8 / 10)


def test_a_seed_that_never_reached_counts_at_its_whole_budget_as_a_lower_bound():
    # Seed 2 spent 40 runs without reaching the threshold: it counts as >= 40.
    summary = stats.summarize_seeds([12, None, 30, 18], budgets=[12, 40, 30, 18])
    assert (summary.reached, summary.seeds) == (3, 4)
    assert summary.median == 24 and not summary.median_is_lower_bound  # (18 + 30) / 2
    assert (summary.low, summary.high, summary.high_is_lower_bound) == (12, 40, True)
    assert summary.cell() == "24 [12–≥ 40], 3/4 reached"


def test_the_median_is_a_lower_bound_when_an_unreached_seed_decides_it():
    summary = stats.summarize_seeds([10, None, None], budgets=[10, 20, 25])
    assert (summary.median, summary.median_is_lower_bound) == (20, True)
    assert summary.cell() == "≥ 20 [10–≥ 25], 1/3 reached"
    # A seed that gave up early (small budget) is below the middle: still a bound.
    early = stats.summarize_seeds([30, None, 40], budgets=[30, 5, 40])
    assert (early.median, early.median_is_lower_bound) == (30, True)
    assert (early.low, early.low_is_lower_bound) == (5, True)
    # One above the middle does not move it.
    late = stats.summarize_seeds([30, None, 40], budgets=[30, 90, 40])
    assert (late.median, late.median_is_lower_bound) == (40, False)
    assert stats.summarize_seeds([None, math.nan], budgets=[7, 9]).cell() == \
        "≥ 8 [≥ 7–≥ 9], 0/2 reached"


def test_a_search_that_failed_half_its_seeds_does_not_rank_fastest():
    # The old median (over the seeds that reached) made "lucky" look fastest: 3.5 runs.
    lucky = stats.summarize_seeds([3, None, 4, None], budgets=[3, 12, 4, 12])
    steady = stats.summarize_seeds([6, 7, 8, 6], budgets=[6, 7, 8, 6])
    assert lucky.median == 8 and lucky.median_is_lower_bound
    assert steady.median == 6.5
    ranked = sorted({"lucky": lucky, "steady": steady}.items(),
                    key=lambda item: stats.rank_key(item[1]))
    assert [name for name, _ in ranked] == ["steady", "lucky"]
    # At equal medians the exact one goes first.
    bound = stats.summarize_seeds([None], budgets=[6.5])
    assert stats.rank_key(steady) < stats.rank_key(bound)


def test_an_unreached_seed_without_its_budget_is_refused():
    with pytest.raises(ValueError, match="must have its budget"):
        stats.summarize_seeds([12, None])
    with pytest.raises(ValueError, match="one budget per seed"):
        stats.summarize_seeds([12, None], budgets=[12])


def test_hpo_summaries_count_unreached_seeds_at_their_runs_time_and_generations():
    from bench.tables import summary_of

    reached = {"runs": 6, "time_to_threshold_s": 30.0, "wall_s": 31.0,
               "generation_reached": 1, "generations_run": 2}
    never = {"runs": 12, "time_to_threshold_s": None, "wall_s": 90.0,
             "generation_reached": None, "generations_run": 3}
    out = summary_of([reached, never, never])
    assert (out["runs"]["median"], out["runs"]["median_is_lower_bound"]) == (12, True)
    assert (out["time_s"]["median"], out["time_s"]["low"]) == (90.0, 30.0)
    assert out["generations"]["median"] == 3 and out["generations"]["reached"] == 1


def test_time_to_accuracy_sums_epochs_until_the_target():
    from bench.tables import time_to_accuracy

    history = [{"epoch": 1, "epoch_time": 2.0, "val_accuracy": 0.6},
               {"epoch": 2, "epoch_time": 1.5, "val_accuracy": 0.8},
               {"epoch": 3, "epoch_time": 1.5, "val_accuracy": 0.9}]
    assert time_to_accuracy(history, 0.8) == (3.5, 2)
    assert time_to_accuracy(history, 0.95) == (None, 3)


def test_combined_rows_get_measured_speedups_and_the_product_estimate():
    from bench.tables import combined_estimate, default_k

    assert [default_k(c) for c in (1, 2, 6, 16)] == [2, 2, 4, 8]

    def row(seconds, bound=False):
        return {"time_s": {"median": seconds, "median_is_lower_bound": bound}}

    tables = {
        "k": 2,
        "hpo": {"random": {"time_s": {"median": 80.0}},
                "bayesian": {"time_s": {"median": 20.0}}},
        "single": {"rows": {"dp=2": {"speedup": 1.5}, "mp=2": {"speedup": 0.5}}},
        "combined": {"r": row(60.0), "h": row(30.0), "d": row(20.0), "m": row(40.0)},
    }
    combined_estimate(tables, "bayesian")
    rows = list(tables["combined"].values())
    assert [r["measured_speedup"] for r in rows] == pytest.approx([1.0, 2.0, 3.0, 1.5])
    assert [r["estimated_speedup"] for r in rows] == pytest.approx([1.0, 4.0, 6.0, 3.0])
    assert not any(r["speedup_bound"] or r["estimated_bound"] for r in rows)
    # Random search's median is a lower bound (seeds that never got there, at their whole
    # wall time): speed-ups over it are lower bounds; a bounded row's is an upper bound.
    tables["combined"]["r"] = row(90.0, bound=True)
    tables["combined"]["m"] = row(40.0, bound=True)
    tables["hpo"]["random"]["time_s"]["median_is_lower_bound"] = True
    combined_estimate(tables, "bayesian")
    rows = list(tables["combined"].values())
    assert rows[1]["measured_speedup"] == pytest.approx(3.0)
    assert [r["speedup_bound"] for r in rows] == [None, "lower", "lower", "unknown"]
    assert [r["estimated_bound"] for r in rows] == [None, "lower", "lower", "lower"]


def test_the_report_marks_lower_bounds_and_ranks_on_them(tmp_path):
    from bench.report import _hpo_headline, _ranked

    def search(values, budgets):
        summary = asdict(stats.summarize_seeds(values, budgets=budgets))
        return {"runs": summary, "time_s": summary}

    hpo = {"genetic": search([3, None, 4, None], [3, 12, 4, 12]),
           "random": search([6, 7, 8, 6], [6, 7, 8, 6])}
    assert [name for name, _ in _ranked(hpo)] == ["random", "genetic"]
    assert _hpo_headline("genetic", hpo["genetic"]) == \
        "genetic ≥ 8 runs / ≥ 8 s (2/4 seeds reached)"
