"""`make bench-gpu` (bench/gpu_check.py): its CPU rehearsal runs every step but CUDA for
real (Ray, the built-in trainers, `nestor run` with packed trials, `nestor sweep` into its
MLflow store, dp 2 over Gloo), and its report section renders what it wrote; without a
GPU and without --cpu it stops at once, saying why."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench.report import GPU_CHECK_TITLE, gpu_check_section

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_the_cpu_rehearsal_runs_every_step(tmp_path: Path) -> None:
    # The deadline is the GPU run's five minutes at most; a shared 2-core machine under load
    # needs more for the same steps, and no test here is timed.
    done = subprocess.run([sys.executable, "-m", "bench.gpu_check", "--cpu", "--results",
                           str(tmp_path), "--deadline", "1200"], cwd=ROOT, capture_output=True,
                          text=True, check=False, timeout=1500)
    result = json.loads((tmp_path / "gpu-check-rehearsal.json").read_text())
    steps = result["steps"]
    assert done.returncode == 0, done.stdout[-4000:]
    assert list(steps) == ["environment", "throughput", "packing", "sweep", "own_code", "dp2"]
    assert all(step["status"] == "ok" for step in steps.values()), steps
    for step in steps:  # printed as it goes
        assert f"] {step} (" in done.stdout

    env = steps["environment"]
    assert env["cluster_resources"]["CPU"] >= 1 and env["gpus"] == []
    rows = steps["throughput"]["rows"]
    assert {(r["trainer"], r["precision"], r["data"]) for r in rows} == {
        (t, p, d) for t in ("mlp", "cnn") for p in ("fp32", "bf16") for d in ("device", "pinned")}
    assert all(r["status"] == "ok" and r["samples_per_s"] > 0 and r["device_gpu"] == 0.0
               for r in rows)
    packing = steps["packing"]
    assert packing["packed"]["trials_ok"] == packing["one_at_a_time"]["trials_ok"] == 4
    assert packing["packed"]["slots"] == 4 and packing["packed"]["gpus_per_trial"] == 0.25
    sweep = steps["sweep"]
    assert sweep["trials"] == 3 and sweep["device_gpu"] == [0.0] * 3
    assert sweep["mlflow_runs"] >= 3
    own = steps["own_code"]["stages"]  # a user's function and command trainers
    assert set(own) == {"function", "command"}
    assert all(row["completed"] == 2 and row["device_gpu"] == row["on_gpu"] == [0.0] * 2
               for row in own.values()), own
    dp = steps["dp2"]["backends"]
    assert "torch" in dp and all(row["efficiency"] > 0 for row in dp.values())
    assert result["machine"]["command"].startswith("python -m bench.gpu_check --cpu")

    text = "\n".join(gpu_check_section(result))
    assert "mlp | bf16 | pinned" in text and "Packed 4 to a GPU against one at a time" in text
    assert "dp 2 on torch" in text and "Not run" not in text
    assert "function trainer 2 of 2 completed" in text and "command trainer 2 of 2" in text


def test_the_report_says_no_gpu_has_run_it_until_one_has() -> None:
    lines = gpu_check_section(None)
    assert lines[0] == GPU_CHECK_TITLE
    assert "no GPU has run `make bench-gpu` yet" in " ".join(lines)
    assert GPU_CHECK_TITLE in (ROOT / "bench" / "REPORT.md").read_text()


@pytest.mark.slow
def test_without_a_gpu_the_check_stops_at_once_and_says_why(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "bench.gpu_check", "--results", str(tmp_path)],
                          cwd=ROOT, capture_output=True, text=True, check=False, timeout=300)
    assert done.returncode == 1
    assert "torch sees no GPU" in done.stdout and "--cpu" in done.stdout
    assert "Traceback" not in done.stdout
    steps = json.loads((tmp_path / "gpu-check.json").read_text())["steps"]
    assert list(steps) == ["environment"] and steps["environment"]["status"] == "failed"
