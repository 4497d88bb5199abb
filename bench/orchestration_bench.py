"""Orchestration benchmarks, measured side by side in one run on one machine.

1. Per-trial overhead over N trivial trials (default 200): nestor (warm 1-rank
   gangs, journal fsync, MLflow runs) against Ray Tune on the same Ray and
   against a plain Optuna ask/tell loop with no scheduling at all.
2. Slot utilization (busy slot-seconds / available slot-seconds) of a genetic
   search whose trial durations vary tenfold: generational against
   asynchronous schedule, same seed, same slots.
3. mnist: runs and time to a validation-accuracy threshold on mnist5k for
   genetic, Bayesian and random search, every run counted.

    .venv/bin/python bench/orchestration_bench.py [--trials 200] [--parts mnist]

Prints tables and writes bench/results/orchestration-PARTS.json.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # bench.machine, when run as a script

TRIVIAL = '''
import time


def trivial(config, ctx):
    return {"score": config["x"] ** 2}


def sleepy(config, ctx):
    # Durations vary tenfold across the space: 0.2 s to 2 s.
    time.sleep(0.2 + 1.8 * config["u"])
    return {"score": (config["u"] - 0.3) ** 2 + config["v"] ** 2}
'''


def machine() -> str:
    import platform

    return f"{os.cpu_count()} CPU cores, {platform.machine()}, no GPU used"


def run_nestor(spec_text: str, workdir: Path, name: str) -> dict:
    from orchestrator.workflow import run_workflow

    spec = workdir / f"{name}.yaml"
    spec.write_text(spec_text)
    _, results = run_workflow(spec, run_dir=workdir / name)
    return results["stages"][0] | {"total_wall_s": results["wall_time_s"]}


def overhead(trials: int, workdir: Path) -> dict:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    start = time.perf_counter()
    for _ in range(trials):
        trial = study.ask()
        x = trial.suggest_float("x", -1, 1)
        study.tell(trial, x**2)
    optuna_s = time.perf_counter() - start

    import ray
    from ray import tune

    def objective(config: dict) -> dict:
        return {"score": config["x"] ** 2}

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    start = time.perf_counter()
    tuner = tune.Tuner(
        objective,
        param_space={"x": tune.uniform(-1, 1)},
        tune_config=tune.TuneConfig(num_samples=trials, metric="score", mode="min"),
        run_config=tune.RunConfig(storage_path=str(workdir / "tune"), verbose=0),
    )
    tuner.fit()
    tune_s = time.perf_counter() - start
    ray.shutdown()

    spec = textwrap.dedent(f"""
        name: overhead
        resources: {{slots: 2}}
        stages:
          - name: tune
            kind: hpo
            trainer: {{function: "bench_trivial:trivial"}}
            search: {{algorithm: random, budget: {trials}, seed: 0}}
            space: {{x: {{type: float, low: -1, high: 1}}}}
            objective: {{metric: score, mode: min}}
        """)
    start = time.perf_counter()
    stage = run_nestor(spec, workdir, "overhead")
    nestor_s = time.perf_counter() - start
    assert stage["n_trials"] == trials and stage["n_failed"] == 0, stage["n_failed"]
    return {
        "trials": trials,
        "per_trial_ms": {
            "optuna ask/tell loop (no scheduling)": 1000 * optuna_s / trials,
            "ray tune (Tuner, function trainable)": 1000 * tune_s / trials,
            "nestor (warm gangs, journal, MLflow)": 1000 * nestor_s / trials,
        },
        "note": "wall time including start-up (Ray init for Tune and nestor) / trials",
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--parts", default="overhead,utilization,mnist",
                        help="which benchmarks to run, comma-separated")
    parser.add_argument("--mnist-budget", type=int, default=12)
    parser.add_argument("--threshold", type=float, default=0.93)
    args = parser.parse_args()
    os.environ.setdefault("MLFLOW_LOGGING_LEVEL", "WARNING")
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
            report["overhead"] = overhead(args.trials, workdir)
        if "utilization" in parts:
            report["utilization"] = utilization(workdir)
        if "mnist" in parts:
            report["mnist5k"] = mnist(workdir, args.mnist_budget, args.threshold)
    report["machine_detail"] = machine_info.finish(detail)
    print(f"machine: {report['machine']}; load average at start"
          f" {report['load_average_at_start'][0]:.2f}")
    if "overhead" in report:
        ov = report["overhead"]
        base = ov["per_trial_ms"]["optuna ask/tell loop (no scheduling)"]
        nestor_ms = ov["per_trial_ms"]["nestor (warm gangs, journal, MLflow)"]
        print(f"\nper-trial overhead over {ov['trials']} trivial trials ({ov['note']}):")
        for name, ms in ov["per_trial_ms"].items():
            print(f"  {name:40s} {ms:9.2f} ms/trial   x{ms / base:8.1f} vs optuna"
                  f"   x{ms / nestor_ms:6.2f} vs nestor")
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
    out = ROOT / "bench" / "results" / f"orchestration-{'-'.join(sorted(parts))}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2))
    print(f"\nwritten: {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
