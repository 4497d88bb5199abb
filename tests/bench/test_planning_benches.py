"""bench/simulate_planning.py (the seed's combined table, simulated) on a small cluster,
and how bench/e2e_planning_bench.py reads a run's journal."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import e2e_planning_bench as e2e
from bench import simulate_planning


def test_the_simulated_combined_table_follows_the_cost_model(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("bench.machine.RESULTS", tmp_path)
    monkeypatch.setattr("bench.machine.ROOT", tmp_path)
    assert simulate_planning.main(["--nodes", "4", "--populations", "4,8", "--generations", "2",
                                   "--epochs", "1", "--sigma", "0", "--out", "sp"]) == 0
    result = json.loads((tmp_path / "sp.json").read_text())
    assert result["simulation"] is True and result["model"]["measured"] is True
    assert [t["population"] for t in result["tables"]] == [4, 8]
    rows = {r["label"]: r for r in result["tables"][0]["rows"]}
    assert list(rows) == ["random search", "DP+MP", "HPO", "HPO+MP", "HPO+DP", "HPO+DP+MP",
                          "HPO+DP+MP (dp, mp >= 2)"]
    assert rows["random search"]["shape"] == "1x1" and rows["random search"]["speedup"] == 1.0
    for r in rows.values():
        assert r["runs"] == 8, r
        assert r["global_batch"] <= 400 and int(r["shape"].split("x")[1]) <= 2
        assert 0 < r["utilization_allocation"] <= r["utilization_own"] <= 1
        # No spread: the simulation is the closed form plus the gangs' start-up and
        # the scheduler's waits, never faster than the closed form.
        assert r["predicted_s"] <= r["simulated_s"] <= 1.3 * r["predicted_s"] + 10, r
    assert rows["HPO"]["at_once"] == 4 and rows["HPO"]["speedup"] > 1
    assert rows["HPO+DP"]["speedup"] > rows["HPO"]["speedup"]
    dp, mp = (int(x) for x in rows["HPO+DP+MP (dp, mp >= 2)"]["shape"].split("x"))
    assert dp >= 2 and mp >= 2
    # 8 trials a generation on 8 slots: 1x1 fills them; no wider shape fits them at once.
    wide = {r["label"]: r for r in result["tables"][1]["rows"]}
    assert wide["HPO"]["at_once"] == 8 and wide["HPO"]["runs"] == 16


def test_feasible_hand_picked_shapes_respect_the_cap_and_the_widest_split() -> None:
    assert e2e.feasible_shapes(2, 64, 128, 512) == [(1, 1), (2, 1), (1, 2)]
    assert e2e.feasible_shapes(2, 64, 64, 512) == [(1, 1), (1, 2)]
    assert e2e.feasible_shapes(4, 64, 256, 2) == [(1, 1), (2, 1), (1, 2), (3, 1), (4, 1),
                                                    (2, 2)]


def _journal(run_dir: Path, events: list[dict[str, object]]) -> None:
    run_dir.mkdir()
    (run_dir / "journal.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    (run_dir / "results.json").write_text(json.dumps({"stages": [{
        "slot_seconds": 99.0, "wall_time_s": 50.0, "n_runs": 3, "best": {"value": 0.96}}]}))


def test_a_runs_time_and_slot_seconds_count_from_its_plan_to_its_threshold(
        tmp_path: Path) -> None:
    trial = {"id": "0"}
    _journal(tmp_path / "auto", [
        {"time": 100.0, "event": "stage_started"},
        {"time": 130.0, "event": "stage_planned", "dp": 1, "mp": 1, "measured": True,
         "plan": {"why": "because"}},
        {"time": 131.0, "event": "trial_started", "trial": trial, "attempt": 1, "shape": "1x1"},
        {"time": 131.0, "event": "trial_started", "trial": {"id": "1"}, "attempt": 1,
         "shape": "1x1"},
        {"time": 141.0, "event": "trial_finished", "trial": trial, "attempt": 1},
        {"time": 141.0, "event": "trial_started", "trial": {"id": "2"}, "attempt": 1,
         "shape": "2x1"},
        {"time": 146.0, "event": "trial_finished", "trial": {"id": "1"}, "attempt": 1},
        {"time": 146.0, "event": "threshold_reached"},
        {"time": 150.0, "event": "trial_finished", "trial": {"id": "2"}, "attempt": 1},
        {"time": 150.0, "event": "stage_finished"},
    ])
    got = e2e.read_run(tmp_path / "auto")
    assert got["reached"] and got["time_to_threshold_s"] == pytest.approx(16.0)
    assert got["profile_s"] == pytest.approx(30.0)
    # 10 s + 15 s on one slot each, and 5 s of the 2-rank run cut at the threshold.
    assert got["slot_s_to_threshold"] == pytest.approx(10 + 15 + 2 * 5)
    assert got["slot_s_total"] == 99.0 and got["shapes_run"] == {"1x1": 2, "2x1": 1}
    assert got["plan"]["shape"] == "1x1"


def test_a_run_that_never_reaches_the_threshold_counts_its_whole_stage(tmp_path: Path) -> None:
    _journal(tmp_path / "fixed", [
        {"time": 0.0, "event": "stage_started"},
        {"time": 1.0, "event": "trial_started", "trial": {"id": "0"}, "attempt": 1,
         "shape": "1x2"},
        {"time": 21.0, "event": "trial_finished", "trial": {"id": "0"}, "attempt": 1},
        {"time": 22.0, "event": "stage_finished"},
    ])
    got = e2e.read_run(tmp_path / "fixed")
    assert not got["reached"] and got["time_to_threshold_s"] == pytest.approx(22.0)
    assert got["slot_s_to_threshold"] == pytest.approx(40.0) and got["profile_s"] == 0.0


def test_the_report_labels_the_simulation_and_states_the_goals(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from bench import report

    monkeypatch.setattr("bench.machine.RESULTS", tmp_path)
    monkeypatch.setattr("bench.machine.ROOT", tmp_path)
    simulate_planning.main(["--nodes", "2", "--populations", "2", "--generations", "1",
                            "--epochs", "1"])
    machine = json.loads((tmp_path / "simulate-planning.json").read_text())["machine"]

    def row(seconds: float, reached: bool = True) -> dict[str, object]:
        return {"reached": reached, "time_to_threshold_s": seconds,
                "slot_s_to_threshold": 2 * seconds, "plan": None}

    auto = [dict(row(10.0), plan={"shape": "1x1", "why": "fastest"}), row(12.0)]
    summary = {arm: {"median_time_s": t, "mean_time_s": t, "median_slot_s": 2 * t,
                     "mean_slot_s_total": 3 * t, "reached": 2, "seeds": 2, "runs": 8}
               for arm, t in (("auto", 11.0), ("1x1", 10.5), ("1x2", 30.0))}
    (tmp_path / "e2e-planning.json").write_text(json.dumps({
        "machine": machine, "dataset": "mnist5k", "epochs": 2, "per_rank_batch": 64,
        "global_max": 128, "budget": 8, "slots": 2, "threshold": 0.95, "lr_range": [0.005, 0.2],
        "seeds": 2, "arms": ["auto", "1x1", "1x2"], "profile": {"seconds": 90.0},
        "rows": {"auto": auto, "1x1": [row(10.0), row(11.0)],
                 "1x2": [row(30.0), row(30.0, reached=False)]},
        "summary": summary,
        "verdict": {"time_s": {"best": "1x1", "worst": "1x2", "auto_over_best": 11 / 10.5,
                               "worst_over_auto": 30 / 11, "within_10pct_of_best": True,
                               "2x_better_than_worst": True}}}))
    text = report.render(tmp_path, tmp_path / "REPORT.md").read_text()
    assert "at 2 nodes — a SIMULATION" in text and "**Simulated, not measured.**" in text
    assert "ring allreduce alpha" in text and "busy ranks on the node" in text
    assert "auto / best hand-picked (`1x1`) 1.05 (goal ≤ 1.10: met)" in text
    # Through bench/stats.py: 1x2's seed that never reached the threshold makes its
    # median a lower bound, and so the ratio over auto.
    assert "worst (`1x2`) / auto ≥ 2.73 (goal ≥ 2: met)" in text
    assert "| `1x2` | ≥ 30.0 [30.0–≥ 30.0], 1/2 reached | 30 / ≥30 |" in text
    assert "auto 11 [10–12], best hand-picked `1x1` 10 [10–11] (auto / best 1.05), worst" \
           " `1x2` ≥ 30 [30–≥ 30], 1/2 reached (worst / auto ≥ 2.73)" in text
    assert "measured the profile (90 s, once" in text
    assert "- SIMULATED combined table, 2 nodes" in text
    assert "`1x2` reached the threshold in 2/2 seeds" not in text
    assert "- noise: `auto` ran the very shape of the `1x1` arm on the same seeds;" \
           " their medians differ by +5%" in text


def test_the_report_shows_the_cost_model_against_measured_epochs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """bench/planning_bench.py's planning.json gets its section; without it, "Not run"."""
    from bench import report

    text = report.render(tmp_path, tmp_path / "REPORT.md").read_text()
    assert "## The cost model against measured epochs\n\nNot run." in text

    def row(dp: int, mp: int, at_once: int, measured: float, predicted: float,
            held: float | None) -> dict[str, object]:
        return {"dp": dp, "mp": mp, "at_once": at_once, "global_batch": 64 * dp,
                "measured_s": measured, "measured_all_s": [measured, measured + 0.5],
                "predicted_s": predicted, "error": predicted / measured - 1,
                "held_out_s": held, "held_out_error": held / measured - 1 if held else None}

    (tmp_path / "planning.json").write_text(json.dumps({
        "machine": "a test machine", "trainer": "cnn", "per_rank_batch": 64, "epochs": 3,
        "rows": [row(1, 1, 1, 2.0, 2.2, 2.5), row(2, 1, 1, 1.5, 1.2, 1.8),
                 row(1, 1, 2, 2.4, 2.4, None)],
        "command": "python bench/planning_bench.py --cached"}))
    text = report.render(tmp_path, tmp_path / "REPORT.md").read_text()
    section = text.split("## The cost model against measured epochs")[1].split("\n## ")[0]
    assert "machine: a test machine" in section
    assert "`cnn`" in section and "best of 2 interleaved runs" in section
    assert "| 1x1 | 1 | 64 | 2.00 | 2.20 (+10%) | 2.50 (+25%) |" in section
    assert "| 2x1 | 1 | 128 | 1.50 | 1.20 (-20%) | 1.80 (+20%) |" in section
    assert "| 1x1 | 2 | 64 | 2.40 | 2.40 (+0%) | — |" in section
    assert "- largest error: 2x1 x 1 at once, -20%" in section
    assert "python bench/planning_bench.py --cached" in section


def test_the_report_shows_the_two_backends_side_by_side(tmp_path: Path) -> None:
    """bench/backend_bench.py's backends.json gets its section; without it, "Not run"."""
    from bench import report

    text = report.render(tmp_path, tmp_path / "REPORT.md").read_text()
    assert f"{report.BACKENDS_TITLE}\n\nNot run." in text
    case = {"horovod_samples_per_s": 700.0, "torch_samples_per_s": 1050.0,
            "torch_over_horovod": 1.5, "max_train_loss_diff": 0.0}
    (tmp_path / "backends.json").write_text(json.dumps({
        "machine": "2 cores", "repeats": 3, "epochs": 3, "batch_per_rank": 64, "mp_width": 2048,
        "command": "python bench/backend_bench.py", "cases": {"dp2": case}}))
    text = report.render(tmp_path, tmp_path / "REPORT.md").read_text()
    assert "| dp2 | 700 | 1050 | 1.50 | 0 |" in text


def test_the_report_shows_regret_on_sine_fit_beside_the_centre_and_random(
        tmp_path: Path, monkeypatch) -> None:
    """bench/auto_bench.py writes regret (best error - the least-squares optimum's),
    and the report shows it with the centre of the box and random search beside it."""
    from bench import auto_bench, report

    monkeypatch.setattr("bench.machine.RESULTS", tmp_path)
    assert f"{report.AUTO_SINE_TITLE}\n\nNot run." in report.render(
        tmp_path, tmp_path / "REPORT.md").read_text()
    auto_bench.main(["--seeds", "2", "--budget", "20", "--problems", "sin7", "--jobs", "1",
                     "--algorithms", "auto,random"])
    result = json.loads((tmp_path / "auto-sine.json").read_text())
    sin7 = result["problems"]["sin7"]
    assert sin7["optimum_error"] == pytest.approx(0.0018240175, rel=1e-6)
    assert sin7["centre_regret"] == pytest.approx(50.0 - 0.0018240175, rel=1e-6)
    assert all(r >= 0 for r in sin7["searches"]["random"]["regret"])
    text = report.render(tmp_path, tmp_path / "REPORT.md").read_text()
    head = text.split("## Headline figures")[1].split("\n## ")[0]
    assert "sine-fit sin7 regret" in head and "centre of the box 50" in head
    assert "random " in head and "improvement" not in text.split(report.AUTO_SINE_TITLE)[1]
