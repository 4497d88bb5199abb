"""The planner's cost model against real epochs: predicted and measured time per epoch.

    .venv/bin/python bench/planning_bench.py              # cnn on mnist5k, batch 64 per rank
    .venv/bin/python bench/planning_bench.py --cached     # reuse a cached profile

1. Profile the built-in trainer (``nestor plan --profile`` does the same): a
   few real training steps at 1x1, 2x1 and 1x2 on real Horovod ranks, one
   core per rank; fit the cost model.
2. Measure: every shape that fits this machine, as real trials (``python -m
   nestor.trainers``, ``--epochs`` epochs, the first left out as warm-up), and two
   1x1 trials side by side (what HPO runs on 2 slots). Best of ``--repeats``
   interleaved runs: a shared machine's other load only slows a run down.
3. Print each shape's measured epoch time beside two predictions: the model
   fitted to the whole profile, and the model fitted without that shape's
   steps (leave-one-out: a shape the profile never trained at).

Writes bench/results/planning.json. Timings on a loaded machine vary; the
load average at start and end is printed and kept with the results.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import machine
from nestor.orchestrator.planning import calibrate, model_size, profile
from nestor.orchestrator.planning._measure import measure_wave

CASES = ((1, 1, 1), (2, 1, 1), (1, 2, 1), (1, 1, 2))  # dp, mp, trials at once


def main(argv: list[str] | None = None) -> int:
    from nestor.trainers.catalog import resolve_options

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--trainer", default="cnn")
    p.add_argument("--dataset", default="mnist5k")
    p.add_argument("--batch", type=int, default=64, help="per-rank batch")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--cached", action="store_true", help="use a cached profile if there is one")
    args = p.parse_args(argv)

    start = machine.describe()
    print(f"machine: {start['cores']} cores, {start['cpu']}, load {start['load_average_at_start']}")
    options = resolve_options(args.trainer, {"dataset": args.dataset, "epochs": args.epochs,
                                             "batch_per_rank": True}, {"batch_size": args.batch})
    size = model_size(args.trainer, options)
    tick = time.perf_counter()
    prof = profile(args.trainer, options, shapes=[(1, 1), (2, 1), (1, 2)],
                   refresh=not args.cached, echo=print)
    print(f"profile {prof.key}: {time.perf_counter() - tick:.0f} s")
    full = calibrate(prof, size)
    print(f"fitted: {full.parameters()}")

    waves: dict[tuple[int, int, int], list[float]] = {case: [] for case in CASES}
    for repeat in range(args.repeats):
        for dp, mp, at_once in CASES:
            wave = measure_wave(args.trainer, options, dp, mp, at_once)
            waves[(dp, mp, at_once)].append(wave.epoch_s())
            print(f"  repeat {repeat + 1}: {at_once} x {dp}x{mp}: epoch {wave.epoch_s():.2f} s"
                  f" (all: {[round(sum(t), 2) for t in wave.epoch_times]})")

    rows: list[dict[str, Any]] = []
    header = (f"{'shape':<6} {'at once':>7} {'global batch':>12} {'measured s':>10}"
              f" {'predicted s':>11} {'error':>6} {'held-out s':>10} {'error':>6}")
    print("\ntime per epoch (training steps only)\n" + header)
    for (dp, mp, at_once), times in waves.items():
        measured = min(times)
        busy = dp * mp * at_once
        predicted = full.epoch(dp, mp, args.batch, busy)
        profiled_alone = (dp, mp) in prof.shapes and at_once == 1
        held = calibrate(prof.without(dp, mp), size) if profiled_alone else full
        held_out = held.epoch(dp, mp, args.batch, busy) if profiled_alone else None
        row = {"dp": dp, "mp": mp, "at_once": at_once, "global_batch": args.batch * dp,
               "measured_s": measured, "measured_all_s": times, "predicted_s": predicted,
               "error": predicted / measured - 1, "held_out_s": held_out,
               "held_out_error": held_out / measured - 1 if held_out else None}
        rows.append(row)
        held_text = (f"{held_out:>10.2f} {row['held_out_error']:>+6.0%}" if held_out
                     else f"{'-':>10} {'-':>6}")
        print(f"{f'{dp}x{mp}':<6} {at_once:>7} {args.batch * dp:>12} {measured:>10.2f}"
              f" {predicted:>11.2f} {row['error']:>+6.0%} {held_text}")
    end = machine.finish(start)
    print(f"load average at end: {end['load_average_at_end']}")
    path = machine.write_result("planning", {
        "machine": end, "trainer": args.trainer, "options": prof.options,
        "per_rank_batch": args.batch, "epochs": args.epochs, "profile": prof.to_record(),
        "model": full.parameters(), "rows": rows,
        "command": "python bench/planning_bench.py " + " ".join(argv or sys.argv[1:]),
    })
    print(f"results: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
