"""The overhead benchmark times nestor and Ray Tune the same way (bench/orchestration_bench.py)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench import orchestration_bench as ob


def test_phases_split_start_up_steady_state_and_wind_down() -> None:
    # Clock at 100; trials end at 110 (the first, after start-up), 111, 112, 113;
    # the call returns at 115.
    raw = {"t0": 100.0, "ends": [110.0, 111.0, 112.0, 113.0], "returned": 115.0}
    assert ob.phases(raw) == pytest.approx({
        "startup_s": 10.0, "steady_ms_per_trial": 1000.0, "wind_down_s": 2.0,
        "total_s": 15.0, "total_ms_per_trial": 3750.0})
    with pytest.raises(ValueError, match="at least 2 trials"):
        ob.phases({"t0": 0.0, "ends": [1.0], "returned": 2.0})


@pytest.mark.slow
def test_nestor_and_tune_both_pay_ray_start_up_in_start_up_not_per_trial(
        tmp_path: Path) -> None:
    """The README's method, checked on what each child process recorded: the clock
    starts before Ray does, every trial stamps its own end (so the n ends lie between
    the clock's start and the call's return, two trials at a time), and Ray's start-up
    falls in start-up, not in the per-trial figure."""
    (tmp_path / "bench_trivial.py").write_text(ob.TRIVIAL)
    rows = {system: ob.timed(system, 6, tmp_path) for system in ("nestor", "tune-reuse")}
    for system, row in rows.items():
        raw = json.loads((tmp_path / f"timed-{system}-6.json").read_text())
        ends = sorted(raw["ends"])
        assert len(ends) == 6 and raw["t0"] < ends[0] and ends[-1] <= raw["returned"], raw
        assert row["startup_s"] == ends[0] - raw["t0"]
        # The steady figure is the time between ends, none of it Ray's start-up: the
        # five trials after the first took less than that start-up did.
        assert ends[-1] - ends[0] < ends[0] - raw["t0"], (system, raw)
        assert row["steady_ms_per_trial"] == pytest.approx(1000 * (ends[-1] - ends[0]) / 5)
