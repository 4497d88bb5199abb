"""The figures of the mnist5k search benchmark, read from journals: every run
counted, cut trials' seconds spent, a seed that never reaches the threshold
counted at its whole budget; the budget watcher; the specs it runs; the report."""

from __future__ import annotations

import json
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml

from bench import report, stats
from bench import search_fidelity_bench as bench
from nestor.orchestrator.backends import stopping
from nestor.orchestrator.spec import load_spec_text


def started(trial: str, t: float, attempt: int = 1, shape: str = "1x1") -> dict[str, Any]:
    return {"event": "trial_started", "stage": "tune", "trial": {"id": trial},
            "attempt": attempt, "shape": shape, "time": t}


def finished(trial: str, t: float, value: float | None, test: float | None = None,
             status: str = "completed", epochs: int = 1) -> dict[str, Any]:
    return {"event": "trial_finished", "stage": "tune",
            "trial": {"id": trial, "config": {"lr": value}}, "attempt": 1, "status": status,
            "value": value, "metrics": {} if test is None else {"test_accuracy": test},
            "history": [{}] * epochs, "time": t}


JOURNAL = [
    {"event": "stage_started", "stage": "tune", "time": 100.0},
    started("a", 101.0), started("b", 101.0),
    finished("a", 105.0, 0.80, 0.79, epochs=2),
    started("c", 105.0),
    {"event": "trial_attempt_failed", "stage": "tune", "trial": {"id": "b"}, "attempt": 1,
     "time": 106.0},
    started("b", 106.0, attempt=2, shape="2x1"),
    finished("c", 109.0, 0.95, 0.93, epochs=3),  # reaches 0.9: the first to
    {"event": "trial_finished", "stage": "tune", "trial": {"id": "b", "config": {}},
     "attempt": 2, "status": "completed", "value": 0.97, "metrics": {"test_accuracy": 0.94},
     "history": [{}], "time": 110.0},
    started("d", 110.0),
    {"event": "trial_interrupted", "stage": "tune", "trial": {"id": "d"}, "attempt": 1,
     "reason": bench.STOP_REASON, "time": 112.0},
    {"event": "workflow_interrupted", "reason": bench.STOP_REASON, "time": 112.5},
]


def test_every_attempt_is_an_interval_cut_ones_included() -> None:
    intervals = sorted(bench.attempt_intervals(JOURNAL, "tune", end=112.5))
    assert intervals == [(101.0, 105.0, 1), (101.0, 106.0, 1), (105.0, 109.0, 1),
                         (106.0, 110.0, 2), (110.0, 112.0, 1)]
    # an attempt the journal never saw end (a killed driver) runs to the end
    open_ = [*JOURNAL[:3]]
    assert sorted(bench.attempt_intervals(open_, "tune", end=103.0)) == [
        (101.0, 103.0, 1), (101.0, 103.0, 1)]


def test_figures_count_every_run_and_the_time_to_the_first_that_reached() -> None:
    f = bench.figures(JOURNAL, threshold=0.9)
    assert (f["runs"], f["completed"], f["cut"]) == (5, 3, 1)  # failed and cut count
    assert f["epochs"] == 6
    # a 4 + b 5 + c 4 + b's second attempt 4 x 2 ranks + d 2
    assert f["slot_seconds"] == pytest.approx(4 + 5 + 4 + 8 + 2)
    assert f["wall_s"] == pytest.approx(12.5)
    # at 109: a 4, b 5, c 4, b's retry 3 s x 2 ranks so far
    assert f["slot_s_to_threshold"] == pytest.approx(4 + 5 + 4 + 6)
    assert f["wall_to_threshold_s"] == pytest.approx(9.0)
    # the best by validation, and its own test accuracy (not the best test)
    assert (f["best_val"], f["best_test"]) == (0.97, 0.94)
    assert f["stopped_by_budget"]


def test_a_threshold_never_reached_leaves_the_times_empty() -> None:
    f = bench.figures(JOURNAL, threshold=0.99)
    assert f["slot_s_to_threshold"] is None and f["wall_to_threshold_s"] is None
    assert f["best_val"] == 0.97


def test_failed_and_pruned_trials_never_reach_the_threshold() -> None:
    journal = [JOURNAL[0], started("a", 101.0),
               finished("a", 102.0, None, status="failed"), started("b", 102.0),
               finished("b", 104.0, 0.95, status="pruned"), started("c", 104.0),
               finished("c", 106.0, 0.91, 0.9)]
    f = bench.figures(journal, threshold=0.9)
    assert f["wall_to_threshold_s"] == pytest.approx(6.0)
    assert f["best_val"] == 0.91 and f["runs"] == 3


def test_seeds_that_never_reached_count_at_their_whole_budget() -> None:
    seeds = [
        {"slot_s_to_threshold": 20.0, "slot_seconds": 50.0, "wall_to_threshold_s": 11.0,
         "wall_s": 27.0, "best_test": 0.93, "best_val": 0.94, "runs": 10},
        {"slot_s_to_threshold": None, "slot_seconds": 50.5, "wall_to_threshold_s": None,
         "wall_s": 26.0, "best_test": 0.90, "best_val": 0.89, "runs": 12},
        {"slot_s_to_threshold": 40.0, "slot_seconds": 50.2, "wall_to_threshold_s": 21.0,
         "wall_s": 25.0, "best_test": None, "best_val": None, "runs": 3},
    ]
    s = bench.summarize(seeds)
    assert stats.SeedSummary(**s["slot_s"]).cell() == "40 [20–≥ 50], 2/3 reached"
    assert s["wall_s"]["high"] == 26.0 and s["wall_s"]["high_is_lower_bound"]
    assert stats.Spread(**s["test"]).cell() == "0.915 [0.900–0.930], 2/3 seeds"
    assert s["runs"]["median"] == 10


def test_spread_of_no_values_says_so() -> None:
    assert stats.spread([None, float("nan")]).cell() == "none (0/2)"
    assert stats.spread([0.5]).cell() == "0.500"


def test_the_budget_watcher_stops_the_workflow_once_spent() -> None:
    now = time.monotonic()
    runner = SimpleNamespace(
        records={"a": SimpleNamespace(slot_seconds=3.0)},
        running={"b": SimpleNamespace(started=now - 1.0, shape=SimpleNamespace(ranks=2)),
                 "c": SimpleNamespace(started=None, shape=SimpleNamespace(ranks=1))},
        backend=SimpleNamespace(now=time.monotonic))
    watcher = bench.SlotBudget(budget=5.6, tick=0.02)
    watcher.on_progress(runner)
    assert watcher.spent() == pytest.approx(5.0, abs=0.1)  # 3 + 1 s x 2 ranks; c not started
    try:
        with watcher:
            deadline = time.monotonic() + 5
            while stopping.stop_requested() is None and time.monotonic() < deadline:
                time.sleep(0.02)
        assert stopping.stop_requested() == bench.STOP_REASON and watcher.fired
        assert watcher.spent() >= 5.6
    finally:
        stopping.clear()


def test_a_budget_not_spent_asks_for_no_stop() -> None:
    with bench.SlotBudget(budget=100.0, tick=0.01) as watcher:
        time.sleep(0.05)
    assert stopping.stop_requested() is None and not watcher.fired


@pytest.mark.parametrize("name", list(bench.SEARCHES))
def test_every_search_is_a_valid_spec_that_the_budget_ends(name: str) -> None:
    spec = bench.spec_for(bench.QUICK, name, seed=3)
    workflow = load_spec_text(yaml.safe_dump(spec))
    stage = workflow.stage("tune")
    assert stage.search.seed == 3
    # far more trials than the budget allows: the slot-seconds end the search
    assert stage.planned_trials() >= 1000
    epochs = stage.trainer.settings.get("epochs")
    if name in bench.CONTINUING:
        assert epochs is None  # the fidelity sets it per trial
    else:
        assert epochs == bench.QUICK.epochs
    assert {"lr", "batch_size", "momentum"} <= set(stage.space)


def result(pbt_slot_s: list[float | None]) -> dict[str, Any]:
    def search(values: list[float | None], spent: float) -> dict[str, Any]:
        seeds = [{"seed": i, "slot_s_to_threshold": v, "slot_seconds": spent,
                  "wall_to_threshold_s": None if v is None else v / 2, "wall_s": spent / 2,
                  "best_test": 0.9, "best_val": 0.91, "runs": 7}
                 for i, v in enumerate(values)]
        return {"seeds": seeds, **bench.summarize(seeds)}

    return {"machine": {"host": "h", "cores": 2, "cpu": "c", "memory_gib": 1, "gpu": "none",
                        "started": "s", "finished": "f", "load_average_at_start": [3.0, 2, 1],
                        "load_average_at_end": [2.5, 2, 1]},
            "profile": json.loads(json.dumps(bench.asdict(bench.QUICK))), "wall_s": 60.0,
            "searches": {"pbt": search(pbt_slot_s, 50.0), "random": search([30.0, 35.0], 50.0),
                         "asha": search([None, None], 50.0)}}


def test_the_report_ranks_searches_and_reads_the_pbt_goal(tmp_path: Path) -> None:
    (tmp_path / report.FIGURES).mkdir()
    lines = report.fidelity_section(result([10.0, 20.0]), tmp_path)
    text = "\n".join(lines)
    assert "loaded machine" in text
    table = [line for line in lines if line.startswith("| ")][1:]
    assert [row.split(" | ")[1] for row in table] == ["pbt", "random", "asha"]
    assert "≥ 50 [≥ 50–≥ 50], 0/2 reached" in table[2]
    assert "met on the medians" in text
    assert (tmp_path / report.FIGURES / "search-fidelity.png").is_file()
    assert "not met here" in report.pbt_verdict(result([None, 40.0]))
    headline = report.fidelity_headline(result([10.0, 20.0]))
    assert f"mnist5k searches, {bench.QUICK.budget_slot_s:g} slot-s each" in headline
    assert headline.index("pbt 15") < headline.index("random 32") < headline.index("asha ≥ 50")
