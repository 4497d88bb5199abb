"""The overhead benchmark times nestor and Ray Tune the same way (bench/orchestration_bench.py)."""

from __future__ import annotations

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
    (tmp_path / "bench_trivial.py").write_text(ob.TRIVIAL)
    rows = {system: ob.timed(system, 6, tmp_path) for system in ("nestor", "tune-reuse")}
    for system, row in rows.items():
        # Starting Ray takes seconds here: both clocks include it, in start-up.
        assert row["startup_s"] > 2.0, (system, row)
        assert row["steady_ms_per_trial"] < 1000 * row["startup_s"], (system, row)
        assert row["total_s"] == pytest.approx(
            row["startup_s"] + 5 * row["steady_ms_per_trial"] / 1000 + row["wind_down_s"])
