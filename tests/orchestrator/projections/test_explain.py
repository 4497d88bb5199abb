"""Results that explain themselves (issue 39 item 5): parameter importance, the
Pareto front of a multi-objective stage, parallel-coordinates and slice plots, and
`nestor best` / `nestor trials`.

The numbers are checked against what the objective was built to have (one parameter
that decides it, one that does nothing; a front computed by brute force); a real run
of a function trainer checks the commands, the JSON, the plot files and the stage's
MLflow run.
"""

from __future__ import annotations

import json
import math
import os
import random
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from nestor.orchestrator.projections import explain, plots


def summary_of(rows: list[tuple[dict[str, Any], Any]], objectives: list[tuple[str, str]],
               name: str = "tune") -> dict[str, Any]:
    return {"name": name, "kind": "hpo",
            "objective": {"metric": objectives[0][0], "mode": objectives[0][1]},
            "objectives": [{"metric": m, "mode": d} for m, d in objectives],
            "trials": [{"id": f"t{i}", "status": "completed", "value": value, "config": config,
                        "attempts": 1, "slot_seconds": 1.0, "generation": 0}
                       for i, (config, value) in enumerate(rows)]}


def test_importance_rates_the_parameter_that_decides_the_value_far_above_one_that_does_not(
        ) -> None:
    rng = random.Random(0)
    rows = []
    for _ in range(40):
        config = {"lr": rng.uniform(0, 1), "noise": rng.uniform(0, 1),
                  "act": rng.choice(["relu", "tanh"])}
        rows.append((config, math.sin(3 * config["lr"]) + (0.05 if config["act"] == "relu"
                                                              else 0.0)))
    found = explain.importance(summary_of(rows, [("acc", "max")]))
    assert found is not None and found.trials == 40
    assert next(iter(found.shares)) == "lr" and found.shares["lr"] > 0.7, found.shares
    assert found.shares["noise"] < 0.1, found.shares
    assert math.isclose(sum(found.shares.values()), 1.0, abs_tol=1e-6)


def test_a_stage_published_and_read_back_fits_the_forest_once(monkeypatch) -> None:
    from nestor.orchestrator.projections.kinds.hpo import HpoReport

    fits: list[int] = []
    fit = explain._fanova
    monkeypatch.setattr(explain, "_fanova", lambda *a: fits.append(1) or fit(*a))
    rng = random.Random(1)
    rows = [({"a": rng.uniform(0, 1), "b": rng.uniform(0, 1)}, rng.uniform(0, 1))
            for _ in range(30)]
    summary = summary_of(rows, [("acc", "max")])
    first = explain.importance(summary)
    report = HpoReport()
    assert report.explained(summary)["importance"]["shares"] == first.shares
    assert report.explained_lines(summary) and explain.importance(summary) == first
    assert len(fits) == 1, "fANOVA must be fitted once for the same trials"
    summary["trials"][0]["value"] = 2.0  # other results: fitted again
    explain.importance(summary)
    assert len(fits) == 2


def test_importance_names_a_conditional_or_constant_parameter_as_not_rated() -> None:
    rows = [({"lr": i / 10, "fixed": 3, **({"momentum": 0.9} if i % 2 else {})}, i / 10)
            for i in range(10)]
    found = explain.importance(summary_of(rows, [("acc", "max")]))
    assert found is not None and set(found.shares) == {"lr"}
    assert "conditional" in found.unrated["momentum"] and "fixed" in found.unrated
    assert explain.importance(summary_of(rows[:explain.MIN_TRIALS - 1], [("acc", "max")])) is None
    alike = [({"lr": i / 10}, 0.5) for i in range(10)]  # every trial scored the same
    assert explain.importance(summary_of(alike, [("acc", "max")])) is None


def test_one_varied_parameter_has_all_the_importance_without_a_forest(monkeypatch) -> None:
    fits: list[int] = []
    fit = explain._fanova
    monkeypatch.setattr(explain, "_fanova", lambda *a: fits.append(1) or fit(*a))
    rows = [({"x": i / 50, "fixed": 1}, (i / 50) ** 2) for i in range(50)]
    found = explain.importance(summary_of(rows, [("loss", "min")]))
    assert found is not None and found.shares == {"x": 1.0} and found.trials == 50
    assert "fixed" in found.unrated
    assert not fits, "one rated parameter: its share is 1 without fitting fANOVA's forest"


@pytest.mark.parametrize("modes", [("max", "min"), ("min", "min"), ("max", "max")])
def test_the_pareto_front_is_every_trial_no_other_beats_in_all_objectives(
        modes: tuple[str, str]) -> None:
    rng = random.Random(1)
    points = [(round(rng.random(), 3), round(rng.random(), 3)) for _ in range(60)]
    rows = [({"x": i}, list(p)) for i, p in enumerate(points)]
    rows.append(({"x": -1}, None))  # a failed-looking value: never on the front
    summary = summary_of(rows, [("acc", modes[0]), ("latency", modes[1])])
    summary["trials"][-1]["status"] = "failed"
    signs = [1 if m == "min" else -1 for m in modes]

    def dominates(a: tuple[float, ...], b: tuple[float, ...]) -> bool:
        pairs = [(s * x, s * y) for s, x, y in zip(signs, a, b, strict=True)]
        return all(x <= y for x, y in pairs) and any(x < y for x, y in pairs)

    brute = {f"t{i}" for i, p in enumerate(points) if not any(dominates(q, p) for q in points)}
    front = explain.pareto_trials(summary)
    assert {t["id"] for t in front} == brute
    firsts = [t["value"][0] for t in front]
    assert firsts == sorted(firsts, reverse=modes[0] == "max")  # best first
    assert explain.pareto_trials(summary_of([({"x": 1}, 1.0)], [("acc", "max")])) == []


def test_parallel_coordinates_and_slices_draw_numbers_logs_and_categories(
        tmp_path: Path) -> None:
    rng = random.Random(2)
    rows = [({"lr": 10 ** rng.uniform(-5, -1), "layers": rng.randint(1, 4),
              "opt": rng.choice(["adam", "sgd"]), **({"momentum": 0.9} if i % 3 else {})},
             rng.random()) for i in range(25)]
    summary = summary_of(rows, [("acc", "max")])
    axes = {a.name: a for a in plots.parameter_axes(explain.completed(summary))}
    assert axes["lr"].log and not axes["layers"].log and not axes["opt"].numeric
    assert sum(p is None for p in axes["momentum"].positions) == 9  # conditional: gaps
    for draw, name in ((plots.plot_parallel_coordinates, "p.png"),
                       (plots.plot_slices, "s.png")):
        path = draw(summary, "acc", "max", tmp_path / name)
        assert path is not None and path.stat().st_size > 10_000
        pixels = __import__("matplotlib.image").image.imread(path)
        assert pixels.shape[0] > 300 and pixels.shape[1] > 500


TRAINER = textwrap.dedent("""\
    import math


    def train(config, ctx):
        x, y = config["x"], config["y"]
        accuracy = 1.0 - (x - 0.7) ** 2           # x decides accuracy; y does nothing to it
        latency = 0.2 + x + 0.01 * y               # and a larger x costs time
        return {"acc": accuracy, "latency": latency, "test_accuracy": accuracy - 0.01}
    """)

SPEC = textwrap.dedent("""\
    name: explained
    resources: {slots: 2}
    stages:
      - name: tune
        kind: hpo
        trainer: {function: "twoobj:train"}
        space:
          x: {type: float, low: 0.0, high: 1.0}
          y: {type: float, low: 0.0, high: 1.0}
        search: {algorithm: random, budget: 12, seed: 3}
        objective:
          - {metric: acc, mode: max}
          - {metric: latency, mode: min}
    """)


@pytest.mark.slow
def test_a_finished_run_explains_itself_in_results_best_trials_plots_and_mlflow(
        tmp_path: Path) -> None:
    (tmp_path / "twoobj.py").write_text(TRAINER)
    (tmp_path / "spec.yaml").write_text(SPEC)
    bin_dir = Path(sys.executable).parent
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    run_dir = tmp_path / "run"

    def nestor(*args: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run([str(bin_dir / "nestor"), *args], cwd=tmp_path, env=env,
                              capture_output=True, text=True, check=False, timeout=600)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
        return done

    nestor("run", "spec.yaml", "--run-dir", str(run_dir))
    trials = json.loads(nestor("trials", str(run_dir), "--format", "json").stdout)
    assert len(trials) == 12 and all(t["stage"] == "tune" for t in trials)
    accs = [t["value"][0] for t in trials]
    assert accs == sorted(accs, reverse=True)  # best first by the first objective

    best = json.loads(nestor("best", str(run_dir), "--format", "json").stdout)[0]
    points = {t["id"]: tuple(t["value"]) for t in trials}

    def dominates(a: tuple[float, ...], b: tuple[float, ...]) -> bool:
        return a[0] >= b[0] and a[1] <= b[1] and a != b

    brute = {i for i, p in points.items() if not any(dominates(q, p) for q in points.values())}
    assert {t["id"] for t in best["pareto_front"]} == brute and best["best"]["id"] in brute
    assert [o["mode"] for o in best["objectives"]] == ["max", "min"]

    results = json.loads(nestor("results", str(run_dir), "--format", "json").stdout)
    stage = results["stages"][0]
    assert stage["pareto_front"] == [t["id"] for t in best["pareto_front"]]
    shares = stage["importance"]["shares"]
    assert next(iter(shares)) == "x" and shares["x"] > shares["y"], shares
    table = nestor("results", str(run_dir)).stdout
    assert "parameter importance (fANOVA" in table and "Pareto front" in table

    for suffix in ("parallel", "slices"):
        assert (run_dir / "plots" / f"tune-{suffix}.png").stat().st_size > 10_000
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{run_dir / 'mlflow.db'}")
    runs = [r for e in client.search_experiments() for r in client.search_runs([e.experiment_id])
            if r.data.tags.get("nestor.stage") == "tune" and "nestor.trial" not in r.data.tags]
    stage_runs = [r for r in runs if "importance.x" in r.data.metrics]
    assert len(stage_runs) == 1, [r.data.metrics for r in runs]
    from nestor.orchestrator.projections.store_paths import list_artifacts

    logged = {a.path for a in list_artifacts(client, run_dir, stage_runs[0].info.run_id,
                                             "plots")}
    assert {"plots/tune-parallel.png", "plots/tune-slices.png"} <= logged, logged
    assert stage_runs[0].data.metrics["importance.x"] == pytest.approx(shares["x"])
