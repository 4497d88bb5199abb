"""End to end through ``nestor run``: ``parallel: auto`` against every hand-picked shape.

The same HPO stage (random search over the learning rate of the built-in CNN
on the 5,000 real MNIST digits, a threshold on validation accuracy, a budget
of runs) is written out as a spec once per arm and run by the real engine
(``nestor run``: Ray, Horovod gangs, the journal), on the same slots and under
the same global-batch cap:

- ``auto``: ``parallel: auto``, planned by the engine on the slots it has;
- one arm per feasible hand-picked ``parallel: {data, model}``: every dp x mp
  within the slots whose global batch (per-rank batch x dp) is within the cap
  and whose mp is no wider than the narrowest split layer (on 2 slots: 1x1,
  2x1, 1x2).

Every arm has ``batch: {global_max: CAP}``, so ``batch_size`` is per rank and
the learning rate scales with dp by the same rule in all of them. Seeds are
the search's seed: every arm draws the same learning rates in the same order.
Seeds run one after another and, within a seed, the arms in turn, so a shared
machine's load falls on all arms alike.

Measured per run, from its journal and results.json: time to the threshold
(from the moment the stage's shape was fixed: its start, or for ``auto`` its
``stage_planned`` event, so a profile is counted once, apart), slot-seconds
to the threshold (ranks x seconds of every training run up to that moment,
including runs cut short by it) and over the whole stage (every run counted,
including the ones that finish after the threshold). A run that never reaches
the threshold within its budget is counted at its whole stage time, and
flagged. The profile that ``auto`` measures on its first run is cached (per
trainer, settings and machine) and reported apart, with its cost.

    .venv/bin/python bench/e2e_planning_bench.py              # 5 seeds
    .venv/bin/python bench/e2e_planning_bench.py --quick      # 3 seeds: 28 min at load 11-28

Writes bench/results/e2e-planning.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import machine


def feasible_shapes(slots: int, per_rank_batch: int, global_max: int, widest_mp: int
                    ) -> list[tuple[int, int]]:
    """Every dp x mp a hand-picked spec may give on ``slots`` under the cap, narrow first.

    >>> feasible_shapes(2, 64, 128, 10)
    [(1, 1), (2, 1), (1, 2)]
    >>> feasible_shapes(4, 64, 128, 10)
    [(1, 1), (2, 1), (1, 2), (1, 3), (2, 2), (1, 4)]
    """
    out = []
    for ranks in range(1, slots + 1):
        for mp in range(1, ranks + 1):
            dp = ranks // mp
            if dp * mp == ranks and dp * per_rank_batch <= global_max and mp <= widest_mp:
                out.append((dp, mp))
    return out


def spec_text(arm: str, *, slots: int, dataset: str, epochs: int, batch: int, global_max: int,
              budget: int, seed: int, threshold: float, lr: tuple[float, float]) -> str:
    """One arm's spec: ``auto`` or ``DPxMP``."""
    if arm == "auto":
        parallel = "auto"
    else:
        dp, mp = (int(x) for x in arm.split("x"))
        parallel = f"{{data: {dp}, model: {mp}}}"
    return textwrap.dedent(f"""\
        name: e2e-{arm}-seed{seed}
        resources: {{slots: {slots}}}
        stages:
          - name: tune
            kind: hpo
            trainer: {{name: cnn, settings: {{dataset: {dataset}, epochs: {epochs}}}}}
            parallel: {parallel}
            batch: {{global_max: {global_max}, lr_rule: linear}}
            search: {{algorithm: random, budget: {budget}, seed: {seed}}}
            space:
              lr: {{type: float, low: {lr[0]}, high: {lr[1]}, log: true}}
              batch_size: {batch}
              momentum: 0.9
            objective: {{metric: val_accuracy, mode: max, threshold: {threshold}}}
            trial: {{timeout: 900}}
        """)


def read_run(run_dir: Path) -> dict[str, Any]:
    """Time and slot-seconds to the threshold, and the totals, from a finished run."""
    events = [json.loads(line) for line in (run_dir / "journal.jsonl").open()]
    results = json.loads((run_dir / "results.json").read_text())
    stage = results["stages"][0]
    started = next(e["time"] for e in events if e["event"] == "stage_started")
    planned = next((e for e in events if e["event"] == "stage_planned"), None)
    t0 = planned["time"] if planned else started
    reached = next((e["time"] for e in events if e["event"] == "threshold_reached"), None)
    ended = next(e["time"] for e in events if e["event"] == "stage_finished")
    until = reached if reached is not None else ended
    runs: dict[tuple[str, int], dict[str, Any]] = {}
    shapes: dict[str, int] = {}
    for e in events:
        if e["event"] == "trial_started":
            dp, mp = (int(x) for x in e["shape"].split("x"))
            key = (e["trial"]["id"], e.get("attempt", 1))
            runs[key] = {"start": e["time"], "ranks": dp * mp, "end": None}
            shapes[e["shape"]] = shapes.get(e["shape"], 0) + 1
        elif e["event"] in ("trial_finished", "trial_attempt_failed"):
            key = (e["trial"]["id"], e.get("attempt", 1))
            if key in runs:
                runs[key]["end"] = e["time"]
    to_threshold = sum(r["ranks"] * max(0.0, min(r["end"] or until, until) - r["start"])
                       for r in runs.values())
    return {
        "reached": reached is not None,
        "time_to_threshold_s": until - t0,
        "profile_s": (planned["time"] - started) if planned else 0.0,
        "plan": None if planned is None else {
            "shape": f"{planned['dp']}x{planned['mp']}", "measured": planned["measured"],
            "why": planned["plan"].get("why")},
        "replanned": [f"{e['dp']}x{e['mp']}" for e in events if e["event"] == "stage_replanned"],
        "shapes_run": shapes,
        "slot_s_to_threshold": to_threshold,
        "slot_s_total": stage["slot_seconds"],
        "stage_wall_s": stage["wall_time_s"],
        "runs": stage["n_runs"],
        "best": stage["best"]["value"] if stage["best"] else None,
    }


def run_arm(spec: str, run_dir: Path, env: dict[str, str]) -> tuple[dict[str, Any], float]:
    spec_path = run_dir.with_suffix(".yaml")
    spec_path.write_text(spec)
    tick = time.perf_counter()
    # The nestor beside this Python (the venv's), not ROOT/.venv's: the bench then runs
    # from any checkout whose venv has nestor, as `make setup` gives a fresh clone.
    nestor = Path(sys.executable).parent / "nestor"
    done = subprocess.run([str(nestor), "run", str(spec_path),
                           "--run-dir", str(run_dir)], env=env, capture_output=True, text=True,
                          check=False)
    wall = time.perf_counter() - tick
    if done.returncode != 0:
        raise RuntimeError(f"nestor run {spec_path} failed ({done.returncode}):\n"
                           f"{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    return read_run(run_dir), wall


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    times = [r["time_to_threshold_s"] for r in rows]
    slot = [r["slot_s_to_threshold"] for r in rows]
    return {"median_time_s": statistics.median(times), "mean_time_s": statistics.fmean(times),
            "min_time_s": min(times), "max_time_s": max(times),
            "median_slot_s": statistics.median(slot), "mean_slot_s": statistics.fmean(slot),
            "mean_slot_s_total": statistics.fmean(r["slot_s_total"] for r in rows),
            "reached": sum(r["reached"] for r in rows), "seeds": len(rows),
            "runs": sum(r["runs"] for r in rows)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="3 seeds (default 5)")
    p.add_argument("--seeds", type=int, default=None)
    p.add_argument("--slots", type=int, default=2)
    p.add_argument("--dataset", default="mnist5k")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch", type=int, default=64, help="per-rank batch")
    p.add_argument("--global-max", type=int, default=128)
    p.add_argument("--budget", type=int, default=8, help="runs at most, per search")
    p.add_argument("--threshold", type=float, default=0.95)
    p.add_argument("--arms", default=None, help="comma-separated, e.g. auto,1x1 (default all)")
    p.add_argument("--keep", type=Path, default=None, help="keep the run directories here")
    p.add_argument("--out", default="e2e-planning")
    args = p.parse_args(argv)
    seeds = args.seeds or (3 if args.quick else 5)
    lr = (0.005, 0.2)

    from nestor.orchestrator.planning import model_size
    from nestor.trainers.catalog import resolve_options

    options = resolve_options("cnn", {"dataset": args.dataset, "epochs": args.epochs},
                              {"batch_size": args.batch})
    widest = model_size("cnn", options).max_model_parallel()
    hand = [f"{d}x{m}" for d, m in feasible_shapes(args.slots, args.batch, args.global_max,
                                                     widest)]
    arms = args.arms.split(",") if args.arms else ["auto", *hand]
    start = machine.describe()
    print(f"machine: {start['cores']} cores, load {start['load_average_at_start']};"
          f" arms {arms}, {seeds} seeds", flush=True)
    work = Path(args.keep or tempfile.mkdtemp(prefix="nestor-e2e-"))
    work.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "NESTOR_CACHE_DIR": str(work / "cache"), "RAY_DEDUP_LOGS": "0"}
    rows: dict[str, list[dict[str, Any]]] = {arm: [] for arm in arms}
    profile: dict[str, Any] | None = None
    for seed in range(1, seeds + 1):
        for arm in arms:
            spec = spec_text(arm, slots=args.slots, dataset=args.dataset, epochs=args.epochs,
                             batch=args.batch, global_max=args.global_max, budget=args.budget,
                             seed=seed, threshold=args.threshold, lr=lr)
            row, wall = run_arm(spec, work / f"{arm}-seed{seed}", env)
            row |= {"seed": seed, "nestor_run_wall_s": wall, "load": list(os.getloadavg())}
            if arm == "auto" and row["profile_s"] > 1.0 and profile is None:
                profile = {"seconds": row["profile_s"], "seed": seed}
            rows[arm].append(row)
            plan = f" plan {row['plan']['shape']}" if row["plan"] else ""
            print(f"seed {seed} {arm:>5}:{plan} {row['time_to_threshold_s']:6.1f} s to"
                  f" threshold{'' if row['reached'] else ' (NOT reached)'},"
                  f" {row['slot_s_to_threshold']:6.1f} slot-s ({row['slot_s_total']:.1f} in"
                  f" all), {row['runs']} runs, shapes {row['shapes_run']}; nestor run"
                  f" {wall:.0f} s, load {row['load'][0]:.1f}", flush=True)
    summary = {arm: summarise(r) for arm, r in rows.items()}
    hand_arms = [a for a in arms if a != "auto"]
    verdict: dict[str, Any] = {}
    if "auto" in summary and hand_arms:
        for what in ("time_s", "slot_s"):
            ranked = sorted(hand_arms, key=lambda a: summary[a][f"median_{what}"])
            best, worst = ranked[0], ranked[-1]
            auto = summary["auto"][f"median_{what}"]
            verdict[what] = {
                "best": best, "worst": worst,
                "auto_over_best": auto / summary[best][f"median_{what}"],
                "worst_over_auto": summary[worst][f"median_{what}"] / auto,
                "within_10pct_of_best": auto <= 1.10 * summary[best][f"median_{what}"],
                "2x_better_than_worst": summary[worst][f"median_{what}"] >= 2 * auto}
    print(f"\n{'arm':>5} {'median s':>9} {'min-max s':>13} {'median slot-s':>14}"
          f" {'reached':>8} {'runs':>5}")
    for arm, s in summary.items():
        print(f"{arm:>5} {s['median_time_s']:9.1f} {s['min_time_s']:6.1f}-{s['max_time_s']:<6.1f}"
              f" {s['median_slot_s']:14.1f} {s['reached']:>4}/{s['seeds']:<3} {s['runs']:>5}")
    for what, v in verdict.items():
        print(f"{what}: auto / best ({v['best']}) {v['auto_over_best']:.2f},"
              f" worst ({v['worst']}) / auto {v['worst_over_auto']:.2f}")
    if profile:
        print(f"profile (once, then cached): {profile['seconds']:.0f} s")
    end = machine.finish(start)
    path = machine.write_result(args.out, {
        "machine": end, "trainer": "cnn", "dataset": args.dataset, "epochs": args.epochs,
        "per_rank_batch": args.batch, "global_max": args.global_max, "slots": args.slots,
        "budget": args.budget, "threshold": args.threshold, "lr_range": list(lr),
        "seeds": seeds, "arms": arms, "rows": rows, "summary": summary, "verdict": verdict,
        "profile": profile,
        "command": "python bench/e2e_planning_bench.py " + " ".join(argv or sys.argv[1:]),
    })
    print(f"results: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
