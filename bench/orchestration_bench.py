"""Orchestration benchmarks, measured side by side in one run on one machine.

1. Per-trial overhead of trivial trials, 2 at a time on 2 slots: nestor (warm
   1-rank gangs, journal fsync, MLflow runs) against Ray Tune on the same Ray
   (one new actor per trial, as Tune does by default, and with
   ``reuse_actors=True``, the nearer match to nestor's warm gangs), and a plain
   Optuna ask/tell loop with no scheduling at all. Every system is timed the
   same way, each run in a fresh process: the clock starts after the imports,
   before Ray starts, and every trial returns the time it ended. Reported
   apart: start-up (clock start to the first trial's end: Ray, the framework,
   the first gang or actor), steady state (the time between the first and
   the last trial's end per trial after the first) and wind-down (last trial's
   end to the call's return, Ray's shutdown included), at each trial count
   asked (default 250, 2,000 and 10,000; the default Tune at most
   ``--tune-new-actor-cap``, since at about a second per trial 10,000 would
   take hours here).
2. Slot utilization (busy slot-seconds / available slot-seconds) of a genetic
   search whose trial durations vary tenfold: generational against
   asynchronous schedule, same seed, same slots.
3. mnist: runs and time to a validation-accuracy threshold on mnist5k for
   genetic, Bayesian and random search, every run counted.

    .venv/bin/python bench/orchestration_bench.py [--trials 250,2000,10000] [--parts mnist]

Prints tables and writes bench/results/orchestration-PARTS.json.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # bench.machine, when run as a script

TRIVIAL = '''
import time


def trivial(config, ctx):
    return {"score": config["x"] ** 2, "t_end": time.time()}


def sleepy(config, ctx):
    # Durations vary tenfold across the space: 0.2 s to 2 s.
    time.sleep(0.2 + 1.8 * config["u"])
    return {"score": (config["u"] - 0.3) ** 2 + config["v"] ** 2}
'''

SYSTEMS = {
    "nestor": "nestor (warm gangs, journal, MLflow)",
    "tune-reuse": "ray tune, reuse_actors=True",
    "tune": "ray tune, default (new actor per trial)",
}
OPTUNA = "optuna ask/tell loop (no scheduling)"


def machine() -> str:
    import platform

    return f"{os.cpu_count()} CPU cores, {platform.machine()}, no GPU used"


def run_nestor(spec_text: str, workdir: Path, name: str) -> dict:
    from orchestrator.workflow import run_workflow

    spec = workdir / f"{name}.yaml"
    spec.write_text(spec_text)
    _, results = run_workflow(spec, run_dir=workdir / name)
    return results["stages"][0] | {"total_wall_s": results["wall_time_s"]}


def timed_child(system: str, trials: int, workdir: Path) -> dict[str, Any]:
    """One system's run of ``trials`` trivial trials, in this (fresh) process.

    Returns the clock's start, every trial's end (as the trial itself measured
    it) and when the call returned, all on the same wall clock.
    """
    import ray

    if system == "nestor":
        from orchestrator.workflow import run_workflow

        spec = workdir / f"overhead-{trials}.yaml"
        spec.write_text(textwrap.dedent(f"""
            name: overhead
            resources: {{slots: 2}}
            stages:
              - name: tune
                kind: hpo
                trainer: {{function: "bench_trivial:trivial"}}
                search: {{algorithm: random, budget: {trials}, seed: 0}}
                space: {{x: {{type: float, low: -1, high: 1}}}}
                objective: {{metric: score, mode: min}}
            """))
        t0 = time.time()
        _, results = run_workflow(spec, run_dir=workdir / f"nestor-{trials}")  # starts Ray
        returned = time.time()  # run_workflow has shut Ray down
        stage = results["stages"][0]
        if stage["n_trials"] != trials or stage["n_failed"]:
            raise RuntimeError(f"nestor ran {stage['n_trials']} trials, {stage['n_failed']}"
                               f" failed; {trials} were asked")
        ends = [t["metrics"]["t_end"] for t in stage["trials"]]
    else:
        from ray import tune

        def objective(config: dict) -> dict:
            return {"score": config["x"] ** 2, "t_end": time.time()}

        t0 = time.time()
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False,
                 configure_logging=False)
        tuner = tune.Tuner(
            objective,
            param_space={"x": tune.uniform(-1, 1)},
            tune_config=tune.TuneConfig(num_samples=trials, metric="score", mode="min",
                                        max_concurrent_trials=2,
                                        reuse_actors=system == "tune-reuse"),
            run_config=tune.RunConfig(storage_path=str(workdir / f"{system}-{trials}"),
                                      verbose=0),
        )
        grid = tuner.fit()
        ray.shutdown()
        returned = time.time()
        if grid.num_errors or len(grid) != trials:
            raise RuntimeError(f"tune ran {len(grid)} trials, {grid.num_errors} failed;"
                               f" {trials} were asked")
        ends = [float(t) for t in grid.get_dataframe()["t_end"]]
    return {"t0": t0, "ends": sorted(ends), "returned": returned}


def phases(raw: dict[str, Any]) -> dict[str, float]:
    """Start-up, steady state and wind-down of one timed run (see the docstring)."""
    ends, n = raw["ends"], len(raw["ends"])
    if n < 2:
        raise ValueError(f"a timed run needs at least 2 trials, but got {n}")
    return {
        "startup_s": ends[0] - raw["t0"],
        "steady_ms_per_trial": 1000 * (ends[-1] - ends[0]) / (n - 1),
        "wind_down_s": raw["returned"] - ends[-1],
        "total_s": raw["returned"] - raw["t0"],
        "total_ms_per_trial": 1000 * (raw["returned"] - raw["t0"]) / n,
    }


def timed(system: str, trials: int, workdir: Path) -> dict[str, float]:
    """``timed_child`` in a fresh Python, so each run starts its own Ray from nothing."""
    out = workdir / f"timed-{system}-{trials}.json"
    env = dict(os.environ, PYTHONPATH=f"{workdir}{os.pathsep}{ROOT}{os.pathsep}"
               f"{os.environ.get('PYTHONPATH', '')}")
    done = subprocess.run(
        [sys.executable, __file__, "--child", system, "--trials", str(trials),
         "--workdir", str(workdir), "--child-out", str(out)],
        env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{system} with {trials} trials failed:\n{done.stderr[-3000:]}")
    result = phases(json.loads(out.read_text()))
    print(f"  {system:10s} {trials:6d} trials: start-up {result['startup_s']:.1f} s, steady"
          f" {result['steady_ms_per_trial']:.1f} ms/trial, wind-down"
          f" {result['wind_down_s']:.1f} s", flush=True)
    return result


def overhead(counts: list[int], tune_cap: int, workdir: Path) -> dict[str, Any]:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    runs: dict[str, dict[str, dict[str, float]]] = {OPTUNA: {}}
    for n in counts:
        study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
        start = time.perf_counter()
        for _ in range(n):
            trial = study.ask()
            x = trial.suggest_float("x", -1, 1)
            study.tell(trial, x**2)
        seconds = time.perf_counter() - start
        runs[OPTUNA][str(n)] = {"startup_s": 0.0, "steady_ms_per_trial": 1000 * seconds / n,
                                "wind_down_s": 0.0, "total_s": seconds,
                                "total_ms_per_trial": 1000 * seconds / n}
    for system, label in SYSTEMS.items():
        capped = sorted({min(n, tune_cap) if system == "tune" else n for n in counts})
        runs[label] = {str(n): timed(system, n, workdir) for n in capped}
    return {
        "counts": counts, "tune_new_actor_cap": tune_cap, "concurrent": 2, "runs": runs,
        "method": "each run a fresh process; clock from before Ray starts (after imports);"
                  " start-up = first trial's end; steady = (last end - first end) / (n - 1);"
                  " wind-down = last end to return, Ray shutdown included",
    }


def utilization(workdir: Path) -> dict:
    out = {}
    for schedule in ("generational", "async"):
        spec = textwrap.dedent(f"""
            name: util-{schedule}
            resources: {{slots: 2}}
            stages:
              - name: tune
                kind: hpo
                trainer: {{function: "bench_trivial:sleepy"}}
                search: {{algorithm: genetic, population: 6, generations: 4, seed: 5,
                          schedule: {schedule}}}
                space:
                  u: {{type: float, low: 0, high: 1}}
                  v: {{type: float, low: -1, high: 1}}
                objective: {{metric: score, mode: min}}
            """)
        stage = run_nestor(spec, workdir, f"util-{schedule}")
        out[schedule] = {
            "wall_s": stage["wall_time_s"],
            "busy_slot_s": stage["slot_seconds"],
            "utilization": stage["slot_seconds"] / (2 * stage["wall_time_s"]),
            "best": stage["best"]["value"],
        }
    return out


def mnist(workdir: Path, budget: int, threshold: float) -> dict:
    out = {}
    search = {
        "genetic": f"{{algorithm: genetic, population: 4, generations: {budget // 4}, seed: 1, "
        "schedule: async}",
        "bayesian": f"{{algorithm: bayesian, budget: {budget}, startup_trials: 4, seed: 1}}",
        "random": f"{{algorithm: random, budget: {budget}, seed: 1}}",
    }
    for algorithm, settings in search.items():
        spec = textwrap.dedent(f"""
            name: mnist-{algorithm}
            resources: {{slots: 2}}
            stages:
              - name: tune
                kind: hpo
                trainer: {{name: cnn, settings: {{dataset: mnist5k, epochs: 1}}}}
                search: {settings}
                space:
                  lr: {{type: float, low: 1.0e-4, high: 0.3, log: true}}
                  batch_size: {{type: int, low: 16, high: 256, log: true}}
                  momentum: {{type: float, low: 0.0, high: 0.95}}
                objective: {{metric: val_accuracy, mode: max, threshold: {threshold}}}
            """)
        stage = run_nestor(spec, workdir, f"mnist-{algorithm}")
        out[algorithm] = {
            "runs": stage["n_runs"],
            "best_val": stage["best"]["value"] if stage["best"] else None,
            "its_test": stage["best"]["test_value"] if stage["best"] else None,
            "time_to_threshold_s": stage["time_to_threshold_s"],
            "wall_s": stage["wall_time_s"],
        }
    return out


def print_overhead(ov: dict[str, Any]) -> None:
    print(f"\nper-trial overhead, trivial trials, {ov['concurrent']} at a time ({ov['method']}):")
    print(f"  {'system':42s} {'trials':>7s} {'start-up s':>10s} {'steady ms':>10s}"
          f" {'wind-down s':>11s} {'total ms/trial':>14s}")
    for label, by_count in ov["runs"].items():
        for n, row in by_count.items():
            print(f"  {label:42s} {int(n):7d} {row['startup_s']:10.1f}"
                  f" {row['steady_ms_per_trial']:10.2f} {row['wind_down_s']:11.1f}"
                  f" {row['total_ms_per_trial']:14.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", default="250,2000,10000",
                        help="overhead: trial counts, comma-separated (each a run per system)")
    parser.add_argument("--tune-new-actor-cap", type=int, default=1000,
                        help="overhead: most trials for Tune's default (new actor per trial,"
                             " about a second each here)")
    parser.add_argument("--parts", default="overhead,utilization,mnist",
                        help="which benchmarks to run, comma-separated")
    parser.add_argument("--mnist-budget", type=int, default=12)
    parser.add_argument("--threshold", type=float, default=0.93)
    parser.add_argument("--child", choices=sorted(SYSTEMS), help=argparse.SUPPRESS)
    parser.add_argument("--workdir", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--child-out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    os.environ.setdefault("MLFLOW_LOGGING_LEVEL", "WARNING")
    if args.child:
        raw = timed_child(args.child, int(args.trials), args.workdir)
        args.child_out.write_text(json.dumps(raw))
        return
    counts = sorted({int(n) for n in args.trials.split(",") if n.strip()})
    if not counts or min(counts) < 2:
        parser.error(f"--trials must list counts of at least 2, but got {args.trials!r}")
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        (workdir / "bench_trivial.py").write_text(TRIVIAL)
        os.environ["PYTHONPATH"] = f"{workdir}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"
        sys.path.insert(0, str(workdir))
        parts = set(args.parts.split(","))
        from bench import machine as machine_info

        detail = machine_info.describe()
        report: dict = {"machine": machine(), "load_average_at_start": os.getloadavg(),
                        "machine_detail": detail}
        if "overhead" in parts:
            report["overhead"] = overhead(counts, args.tune_new_actor_cap, workdir)
        if "utilization" in parts:
            report["utilization"] = utilization(workdir)
        if "mnist" in parts:
            report["mnist5k"] = mnist(workdir, args.mnist_budget, args.threshold)
    report["machine_detail"] = machine_info.finish(detail)
    print(f"machine: {report['machine']}; load average at start"
          f" {report['load_average_at_start'][0]:.2f}")
    if "overhead" in report:
        print_overhead(report["overhead"])
    if "utilization" in report:
        print("\nslot utilization, genetic 6x4, durations 0.2-2 s, 2 slots:")
        for schedule, row in report["utilization"].items():
            print(f"  {schedule:12s} utilization {row['utilization']:.2f}"
                  f"  wall {row['wall_s']:.1f} s  busy {row['busy_slot_s']:.1f} slot-s"
                  f"  best {row['best']:.4f}")
    if "mnist5k" in report:
        print(f"\nmnist5k, threshold val_accuracy {args.threshold}:")
        for algorithm, row in report["mnist5k"].items():
            print(f"  {algorithm:9s} runs {row['runs']:3d}  best val {row['best_val']}"
                  f"  its test {row['its_test']}  to threshold {row['time_to_threshold_s']} s"
                  f"  wall {row['wall_s']:.0f} s")
    out = machine_info.write_result(f"orchestration-{'-'.join(sorted(parts))}", report)
    print(f"\nwritten: {out}")


if __name__ == "__main__":
    main()
