"""The seed's three result tables, measured end to end on mnist5k in one run.

1. single-model: time for the built-in CNN to reach a fixed validation
   accuracy at dp = 1, dp = k and mp = k (real Horovod ranks over Gloo, or
   NCCL on a GPU machine), with samples/s and scaling efficiency. The global
   batch is the same at every size (strong scaling), so every size follows
   the same optimization and only the speed differs.
2. calibration and HPO: a random search over ``--calibration`` configurations
   gives the threshold, the accuracy only the top ``--top-fraction`` of random
   configurations reach; then genetic, Bayesian and random search, over
   ``--seeds`` seeds, each stopping at that threshold or its budget. Runs,
   generations and time count every run, failed ones included.
3. combined: time to the same threshold on one allocation of ``--slots``
   slots for random search with 1-rank trials, HPO with 1-rank trials, HPO
   with dp = k trials and HPO with dp = k x mp = k trials, next to the product
   of the individual speed-ups (HPO from table 2, dp and mp from table 1)
   that the seed used as its estimate.

Every HPO run is a real nestor workflow (``run_spec``: Ray, warm Horovod
gangs, journal, MLflow) on one Ray started here with ``--slots`` CPUs.

    .venv/bin/python -m bench.tables --quick          # minutes, small sizes
    .venv/bin/python -m bench.tables                  # the full sizes (hours here)
    .venv/bin/python -m bench.tables --gpu    # device machine: bench/results/gpu-tables.json
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
import textwrap
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from bench import machine, stats
from bench.machine import write_result

SPACE = """\
      lr: {type: float, low: 1.0e-3, high: 0.5, log: true}
      batch_size: {type: int, low: 16, high: 256, log: true}
      momentum: {type: float, low: 0.0, high: 0.95}
"""


@dataclass(frozen=True)
class Profile:
    """Sizes of one benchmark run: ``full`` is the issue's, ``quick`` fits in minutes."""

    name: str
    settings: dict[str, Any]  # trainer settings every trial shares (dataset, its size)
    fixed: dict[str, Any]  # hyperparameters every trial shares (model size): constants
    epochs: int  # per HPO trial
    single_epochs: int  # most epochs the single-model runs get to reach the target
    single_target: float  # the fixed validation accuracy of the single-model table
    repeats: int  # interleaved runs of each single-model size; the fastest counts
    calibration: int  # random configurations that set the threshold
    top_fraction: float
    seeds: int
    budget: int  # most trials per HPO search
    population: int  # genetic
    combined_seeds: int
    parts: tuple[str, ...] = ("single", "calibrate", "hpo", "combined")
    notes: list[str] = field(default_factory=list)


FULL = Profile(
    name="full", settings={"dataset": "mnist5k"}, fixed={}, epochs=2, single_epochs=6,
    single_target=0.95, repeats=2,
    calibration=300, top_fraction=0.01, seeds=5, budget=200, population=10, combined_seeds=3,
)
QUICK = Profile(
    name="quick",
    settings={"dataset": "mnist5k", "max_train_samples": 1000},
    fixed={"channels": 8, "width": 128},
    epochs=1, single_epochs=5, single_target=0.7, repeats=1, calibration=20, top_fraction=0.1,
    seeds=2, budget=12, population=4, combined_seeds=1,
    notes=["quick profile: 1,000 training images, a small CNN (8 channels, 128 units), 1 epoch"
           " per HPO trial; the threshold is the top 10 % of 20 random configurations (not"
           " 1 % of hundreds); 2 seeds of HPO and 1 of the combined table, 12 trials at most"
           " per search; single-model runs to 0.7 validation accuracy, once per size"
           " (the full profile takes the best of 2). Use `make bench` for the full sizes."],
)


def default_k(cores: int) -> int:
    """The largest power of two the cores allow, at most 8 (dp = k, mp = k)."""
    k = 1
    while k * 2 <= min(cores, 8):
        k *= 2
    return max(k, 2)


# -- 1. single model -------------------------------------------------------------------


def time_to_accuracy(history: list[dict[str, Any]], target: float) -> tuple[float | None, int]:
    """Training seconds (sum of epoch times) until validation accuracy first
    reaches ``target``, and the epochs that took; (None, all epochs) if never."""
    spent = 0.0
    for row in history:
        spent += row["epoch_time"]
        if row["val_accuracy"] >= target:
            return spent, row["epoch"]
    return None, len(history)


def _faster(row: dict[str, Any], than: dict[str, Any]) -> bool:
    """The best of repeats: a shared machine's other load only ever slows a run."""
    a, b = row["time_to_target_s"], than["time_to_target_s"]
    if a is not None and b is not None:
        return a < b
    if a is not None or b is not None:
        return a is not None
    return row["samples_per_s"] > than["samples_per_s"]


def single_model(profile: Profile, k: int, timeout: float) -> dict[str, Any]:
    from bench.trainers_bench import run_trial

    settings = {**profile.settings, "epochs": profile.single_epochs}
    config = {"lr": 0.05, "batch_size": 64, **profile.fixed}
    rows: dict[str, Any] = {}
    sizes = (("dp=1", 1, 1), (f"dp={k}", k, 1), (f"mp={k}", 1, k))
    for _ in range(profile.repeats):  # interleaved, so a burst of load hits every size alike
        for label, dp, mp in sizes:
            tick = time.perf_counter()
            result = run_trial(dp * mp, dp, mp, settings, config, timeout)
            wall = time.perf_counter() - tick
            history = result["history"]
            seconds, epochs = time_to_accuracy(history, profile.single_target)
            steady = history[1:] or history
            row = {
                "dp": dp, "mp": mp, "ranks": dp * mp,
                "time_to_target_s": seconds, "epochs_to_target": epochs,
                "samples_per_s": sum(r["samples_per_second"] for r in steady) / len(steady),
                "final_val_accuracy": history[-1]["val_accuracy"],
                "test_accuracy": result["metrics"].get("test_accuracy"),
                "process_wall_s": wall,
            }
            shown = "never" if seconds is None else f"{seconds:.1f} s"
            print(f"  single {label}: to {profile.single_target} in {shown}"
                  f" ({epochs} epochs), {row['samples_per_s']:.0f} samples/s", flush=True)
            kept = rows.get(label)
            if kept is None or _faster(row, kept):
                rows[label] = row | {"all_times_to_target_s": [
                    *(kept or {}).get("all_times_to_target_s", []), seconds]}
            else:
                kept["all_times_to_target_s"].append(seconds)
    base = rows["dp=1"]
    for row in rows.values():
        if base["time_to_target_s"] and row["time_to_target_s"]:
            row["speedup"] = stats.speedup(base["time_to_target_s"], row["time_to_target_s"])
            row["efficiency"] = stats.scaling_efficiency(row["speedup"], row["ranks"])
        else:
            row["speedup"] = row["efficiency"] = None
        row["throughput_efficiency"] = stats.throughput_efficiency(
            row["samples_per_s"], base["samples_per_s"], row["ranks"])
    return {"target_val_accuracy": profile.single_target, "settings": settings,
            "config": config, "k": k, "rows": rows}


# -- 2 and 3. HPO through nestor ---------------------------------------------------------


def search_block(algorithm: str, profile: Profile, seed: int) -> str:
    if algorithm == "genetic":
        generations = max(2, math.ceil(profile.budget / profile.population))
        return (f"{{algorithm: genetic, population: {profile.population},"
                f" generations: {generations}, schedule: async, seed: {seed}}}")
    if algorithm == "bayesian":
        return (f"{{algorithm: bayesian, budget: {profile.budget},"
                f" startup_trials: {min(4, profile.budget)}, seed: {seed}}}")
    return f"{{algorithm: random, budget: {profile.budget}, seed: {seed}}}"


def run_stage(workdir: Path, name: str, *, search: str, profile: Profile, slots: int,
              threshold: float | None, dp: int = 1, mp: int = 1) -> dict[str, Any]:
    """One nestor workflow with one HPO stage; returns the stage's summary and wall time."""
    from nestor.orchestrator.commands.run import run_spec

    settings = {**profile.settings, "epochs": profile.epochs}
    constants = "".join(f"      {name}: {{type: constant, value: {value}}}\n"
                        for name, value in profile.fixed.items())
    objective = "{metric: val_accuracy, mode: max"
    objective += f", threshold: {threshold}}}" if threshold is not None else "}"
    spec = textwrap.dedent(f"""\
        name: {name}
        resources: {{slots: {slots}}}
        stages:
          - name: tune
            kind: hpo
            trainer: {{name: cnn, settings: {settings}}}
            parallel: {{data: {dp}, model: {mp}}}
            search: {search}
            space:
        """) + SPACE + constants + textwrap.indent(textwrap.dedent(f"""\
            objective: {objective}
            trial: {{timeout: 900, retries: 0}}
        """), "    ")
    path = workdir / f"{name}.yaml"
    path.write_text(spec)
    tick = time.perf_counter()
    _, results = run_spec(path, run_dir=workdir / name)
    wall = time.perf_counter() - tick
    stage = results["stages"][0]
    values = [t["value"] for t in stage["trials"]]
    reaching = [t for t in stage["trials"]
                if threshold is not None and stats.reached(t["value"], threshold)]
    out = {
        "runs": stage["n_runs"], "trials": stage["n_trials"], "failed": stage["n_failed"],
        "slot_seconds": stage["slot_seconds"], "wall_s": stage["wall_time_s"],
        "workflow_wall_s": wall,
        "time_to_threshold_s": stage["time_to_threshold_s"],
        "generation_reached": min((t["generation"] for t in reaching), default=None),
        "generations_run": 1 + max((t["generation"] for t in stage["trials"]), default=-1),
        "best_val": stage["best"]["value"] if stage["best"] else None,
        "best_test": stage["best"]["test_value"] if stage["best"] else None,
        "values": values, "stop_reason": stage["stop_reason"],
    }
    reach = out["time_to_threshold_s"]
    shown = "never" if reach is None else f"{reach:.1f} s"
    print(f"  {name}: {out['runs']} runs, best {out['best_val']}, to threshold {shown},"
          f" wall {out['wall_s']:.0f} s", flush=True)
    return out


def calibrate(workdir: Path, profile: Profile, slots: int) -> dict[str, Any]:
    calib = replace(profile, budget=profile.calibration)
    row = run_stage(workdir, "calibration", search=search_block("random", calib, 12345),
                    profile=calib, slots=slots, threshold=None)
    threshold = stats.top_fraction_threshold(row["values"], profile.top_fraction)
    finite = sorted(v for v in row["values"] if v is not None and math.isfinite(v))
    return {"configurations": len(row["values"]), "top_fraction": profile.top_fraction,
            "threshold": threshold,
            "reaching": sum(stats.reached(v, threshold) for v in row["values"]),
            "median_val": finite[len(finite) // 2] if finite else None,
            "best_val": finite[-1] if finite else None, "run": row}


def hpo(workdir: Path, profile: Profile, slots: int, threshold: float) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for algorithm in ("genetic", "bayesian", "random"):
        runs = [run_stage(workdir, f"hpo-{algorithm}-{seed}",
                          search=search_block(algorithm, profile, seed), profile=profile,
                          slots=slots, threshold=threshold)
                for seed in range(profile.seeds)]
        out[algorithm] = {"seeds": runs, **summary_of(runs)}
    return out


def summary_of(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Runs, seconds and generations to the threshold over seeds, every seed counted:
    a seed that never reached it counts at its whole budget, a lower bound (≥)."""
    hit = [r["time_to_threshold_s"] is not None for r in runs]
    return {
        "runs": asdict(stats.summarize_seeds(
            [r["runs"] if h else None for r, h in zip(runs, hit, strict=True)],
            budgets=[r["runs"] for r in runs])),
        "time_s": asdict(stats.summarize_seeds(
            [r["time_to_threshold_s"] for r in runs], budgets=[r["wall_s"] for r in runs])),
        "generations": asdict(stats.summarize_seeds(
            [r["generation_reached"] + 1 if h and r["generation_reached"] is not None
             else None for r, h in zip(runs, hit, strict=True)],
            budgets=[r["generations_run"] for r in runs])),
    }


def combined(workdir: Path, profile: Profile, slots: int, k: int, threshold: float,
             algorithm: str) -> dict[str, Any]:
    rows = {
        "random search, 1-rank trials": ("random", 1, 1),
        f"HPO ({algorithm}), 1-rank trials": (algorithm, 1, 1),
        f"HPO + DP (dp={k} trials)": (algorithm, k, 1),
        f"HPO + DP + MP (dp={k} x mp={k} trials)": (algorithm, k, k),
    }
    out: dict[str, Any] = {}
    for i, (label, (alg, dp, mp)) in enumerate(rows.items()):
        runs = [run_stage(workdir, f"combined-{i}-{seed}",
                          search=search_block(alg, profile, 100 + seed), profile=profile,
                          slots=slots, threshold=threshold, dp=dp, mp=mp)
                for seed in range(profile.combined_seeds)]
        out[label] = {"algorithm": alg, "dp": dp, "mp": mp, "seeds": runs, **summary_of(runs)}
    return out


def ratio_bound(numerator_bound: bool, denominator_bound: bool) -> str | None:
    """What a ratio of two medians is when either is a lower bound (≥): baseline /
    time grows with the baseline and shrinks with the time."""
    if numerator_bound and denominator_bound:
        return "unknown"
    if numerator_bound:
        return "lower"
    return "upper" if denominator_bound else None


def product_bound(bounds: list[str | None]) -> str | None:
    kinds = {b for b in bounds if b is not None}
    if not kinds:
        return None
    return kinds.pop() if len(kinds) == 1 else "unknown"


def combined_estimate(tables: dict[str, Any], algorithm: str) -> None:
    """Fill in the measured speed-ups of the combined rows and the seed's estimate:
    the product of HPO's (table 2), dp's and mp's (table 1) individual speed-ups.

    Medians count every seed, one that never reached the threshold at its whole
    wall time (a lower bound), so a speed-up over a bounded baseline is a lower
    bound (``"lower"``), one of a bounded row an upper bound, and of both unknown.
    """
    rows = list(tables["combined"].values())
    base = rows[0]["time_s"]["median"]
    base_bound = rows[0]["time_s"].get("median_is_lower_bound", False)
    for row in rows:
        t = row["time_s"]["median"]
        row["measured_speedup"] = stats.speedup(base, t) if base and t else None
        row["speedup_bound"] = (None if row is rows[0] else ratio_bound(
            base_bound, row["time_s"].get("median_is_lower_bound", False)))
    factors: list[float | None] = [1.0, None, None, None]
    bounds: list[str | None] = [None, None, None, None]
    hpo_table = tables.get("hpo", {})
    if hpo_table:
        t_random, t_hpo = hpo_table["random"]["time_s"], hpo_table[algorithm]["time_s"]
        if t_random["median"] and t_hpo["median"]:
            factors[1] = stats.speedup(t_random["median"], t_hpo["median"])
            bounds[1] = ratio_bound(t_random.get("median_is_lower_bound", False),
                                    t_hpo.get("median_is_lower_bound", False))
    single = tables.get("single", {}).get("rows", {})
    k = tables["k"]
    factors[2] = single.get(f"dp={k}", {}).get("speedup")
    mp_speed = single.get(f"mp={k}", {}).get("speedup")
    # A dp x mp trial's speed-up over dp alone is mp's own (the seed multiplied them).
    factors[3] = mp_speed
    product: float | None = 1.0
    for i, (row, factor) in enumerate(zip(rows, factors, strict=True)):
        row["individual_speedup"] = factor
        row["individual_bound"] = bounds[i]
        product = product * factor if product is not None and factor is not None else None
        row["estimated_speedup"] = product
        row["estimated_bound"] = product_bound(bounds[: i + 1])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="small sizes (minutes); see QUICK")
    p.add_argument("--gpu", action="store_true",
                   help="the GPU variant: needs nvidia-smi to find a GPU; results kept apart")
    p.add_argument("--parts", default="single,calibrate,hpo,combined")
    p.add_argument("--slots", type=int, default=None,
                   help="the allocation for the HPO and combined runs (default: 2k, so that"
                        " a dp=k x mp=k trial fits; above the cores it is oversubscribed)")
    p.add_argument("--hpo-slots", type=int, default=None,
                   help="slots for the calibration and HPO table (default: the cores)")
    p.add_argument("--k", type=int, default=None, help="dp and mp size (default: from cores)")
    p.add_argument("--algorithm", default="bayesian", choices=("bayesian", "genetic"),
                   help="the HPO of the combined table")
    p.add_argument("--budget", type=int, help="override the profile's trials per search")
    p.add_argument("--seeds", type=int, help="override the profile's HPO seeds")
    p.add_argument("--calibration", type=int, help="override the random configurations")
    p.add_argument("--top-fraction", type=float, help="override the threshold's top fraction")
    p.add_argument("--timeout", type=float, default=1800)
    args = p.parse_args(argv)
    profile = QUICK if args.quick else FULL
    overrides = {name: getattr(args, name) for name in
                 ("budget", "seeds", "calibration", "top_fraction")
                 if getattr(args, name) is not None}
    if overrides:
        profile = replace(profile, notes=[*profile.notes, f"overridden: {overrides}"],
                          **overrides)
    parts = [x for x in args.parts.split(",") if x]
    unknown = sorted(set(parts) - set(Profile.parts))
    if unknown:
        p.error(f"--parts must be among {', '.join(Profile.parts)}, but got {', '.join(unknown)}")
    if "combined" in parts and "calibrate" not in parts:
        p.error("--parts combined needs calibrate (the threshold) in the same run")
    if "hpo" in parts and "calibrate" not in parts:
        p.error("--parts hpo needs calibrate (the threshold) in the same run")
    start = machine.describe()
    if args.gpu and start["gpu"] == "none":
        print("--gpu needs a GPU, but nvidia-smi found none on this machine; run"
              " `make bench-gpu-tables` on the device machine", file=sys.stderr)
        return 2
    cores = start["cores"]
    k = args.k or default_k(cores)
    slots = args.slots or k * k
    hpo_slots = args.hpo_slots or (min(cores, slots) if not args.gpu else slots)
    os.environ.setdefault("MLFLOW_LOGGING_LEVEL", "WARNING")
    tables: dict[str, Any] = {
        "machine": start, "profile": asdict(profile), "k": k, "slots": slots,
        "hpo_slots": hpo_slots, "parts": parts, "variant": "gpu" if args.gpu else "cpu",
        "oversubscribed": slots > cores and not args.gpu,
    }
    print(f"# tables ({profile.name}, {tables['variant']}): {cores} cores, GPU"
          f" {start['gpu']}, k = {k}, {slots} slots (HPO table {hpo_slots}), load"
          f" {start['load_average_at_start'][0]:.2f}", flush=True)
    tick = time.perf_counter()
    if "single" in parts:
        tables["single"] = single_model(profile, k, args.timeout)
    if {"calibrate", "hpo", "combined"} & set(parts):
        import ray

        ray.init(address="local", num_cpus=max(slots, hpo_slots), include_dashboard=False,
                 log_to_driver=False, configure_logging=False)
        try:
            with tempfile.TemporaryDirectory(prefix="nestor-bench-") as tmp:
                workdir = Path(tmp)
                if "calibrate" in parts:
                    tables["calibration"] = calibrate(workdir, profile, hpo_slots)
                    threshold = tables["calibration"]["threshold"]
                    print(f"  threshold: val_accuracy {threshold} (top"
                          f" {profile.top_fraction:.0%} of {profile.calibration} random"
                          " configurations)", flush=True)
                if "hpo" in parts:
                    tables["hpo"] = hpo(workdir, profile, hpo_slots, threshold)
                if "combined" in parts:
                    tables["combined"] = combined(workdir, profile, slots, k, threshold,
                                                  args.algorithm)
                    tables["combined_algorithm"] = args.algorithm
                    combined_estimate(tables, args.algorithm)
        finally:
            ray.shutdown()
    tables["wall_s"] = time.perf_counter() - tick
    tables["machine"] = machine.finish(start)
    name = ("gpu-" if args.gpu else "") + "tables"
    print(f"written: {write_result(name, tables)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
