"""The two trial backends side by side: Horovod against torch.distributed.

    .venv/bin/python bench/backend_bench.py              # 3 interleaved repeats
    .venv/bin/python bench/backend_bench.py --repeats 5 --epochs 3

The same real trials (the built-in CNN on mnist5k, ``python -m nestor.trainers``) run
under ``horovodrun --gloo`` and under ``torchrun`` (``--backend torch``: DDP
over Gloo), at dp = 2 (weak scaling, a fixed batch per rank) and at mp = 2 (a
wide model's fully connected layers split in two). The backends alternate,
repeat after repeat, so a shared machine's load falls on both alike; each
figure is the median over repeats of the steady epochs (the first epoch pays
for imports and warm-up), and the ratio is taken repeat by repeat (paired).
The trials must also agree: the same seed gives both backends the same loss
curve up to float rounding, which the bench checks and prints.

Writes bench/results/backends.json.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import machine
from bench.trainers_bench import loadavg, run_trial, steady

BACKENDS = ("horovod", "torch")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch-per-rank", type=int, default=64)
    p.add_argument("--mp-width", type=int, default=2048)
    p.add_argument("--timeout", type=float, default=900)
    args = p.parse_args(argv)
    start = machine.describe()
    settings = {"dataset": "mnist5k", "epochs": args.epochs, "seed": 1}
    config = {"channels": 32, "width": 512, "batch_size": args.batch_per_rank, "lr": 0.01}
    cases = {
        "dp2": (2, 1, {**settings, "batch_per_rank": True}, config),
        "mp2": (1, 2, {**settings, "max_train_samples": 1280},
                {**config, "width": args.mp_width, "depth": 2}),
    }
    print(f"# Horovod against torch.distributed: cnn on mnist5k, {args.epochs} epochs (first not"
          f" counted), {args.repeats} interleaved repeats; load average at start: {loadavg()}",
          flush=True)
    runs: dict[str, dict[str, list[dict]]] = {c: {b: [] for b in BACKENDS} for c in cases}
    for _ in range(args.repeats):
        for case, (dp, mp, case_settings, case_config) in cases.items():
            for backend in BACKENDS:
                result = run_trial(dp * mp, dp, mp, case_settings, case_config, args.timeout,
                                   backend=backend)
                runs[case][backend].append(result)
    report: dict = {"repeats": args.repeats, "epochs": args.epochs,
                    "batch_per_rank": args.batch_per_rank, "mp_width": args.mp_width,
                    "command": "python bench/backend_bench.py " + " ".join(argv or sys.argv[1:]),
                    "cases": {}}
    print(f"\n{'case':<5} {'horovod samples/s':>18} {'torch samples/s':>16} {'torch/horovod':>14}"
          f" {'max loss diff':>14}")
    for case in cases:
        speeds = {b: [steady(r, "samples_per_second") for r in runs[case][b]] for b in BACKENDS}
        ratios = [t / h for h, t in zip(speeds["horovod"], speeds["torch"], strict=True)]
        diffs = [max(abs(a["train_loss"] - b["train_loss"])
                     for a, b in zip(h["history"], t["history"], strict=True))
                 for h, t in zip(runs[case]["horovod"], runs[case]["torch"], strict=True)]
        row = {"horovod_samples_per_s": statistics.median(speeds["horovod"]),
               "torch_samples_per_s": statistics.median(speeds["torch"]),
               "torch_over_horovod": statistics.median(ratios),
               "ratios": ratios, "max_train_loss_diff": max(diffs),
               "all": speeds}
        report["cases"][case] = row
        print(f"{case:<5} {row['horovod_samples_per_s']:>18.0f} {row['torch_samples_per_s']:>16.0f}"
              f" {row['torch_over_horovod']:>14.2f} {row['max_train_loss_diff']:>14.2g}")
    report["machine"] = machine.finish(start)
    print(f"\n# load average at end: {loadavg()}; wrote {machine.write_result('backends', report)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
