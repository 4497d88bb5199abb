"""Training throughput of the built-in trainers at dp = 1, 2, 4, 8, and mp = 2 against mp = 1.

    .venv/bin/python bench/trainers_bench.py                 # the defaults below
    .venv/bin/python bench/trainers_bench.py --epochs 3 --dp 1,2,4 --oversubscribe

Every measurement is a real trial: ``python -m trainers`` under ``horovodrun
--gloo`` (a plain process at one rank) on the real mnist5k digits. Data
parallelism is measured as weak scaling, the way Horovod is used: a fixed
batch per rank (``batch_per_rank``), so the global batch grows with dp.
Throughput is the mean samples/s of the epochs after the first (the first
pays for imports and warm-up); scaling efficiency is
throughput(dp) / (dp x throughput(1)). Ranks share the machine's cores
(each gets cores / ranks intra-op threads), so dp > cores is skipped unless
``--oversubscribe``. Model parallelism is timed per optimizer step on a
wide model (its fully connected layers split in two), at mp = 1 and mp = 2.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
HOROVODRUN = Path(sys.executable).parent / "horovodrun"


def run_trial(ranks: int, dp: int, mp: int, settings: dict, config: dict,
              timeout: float) -> dict:
    """One trial through the CLI; returns rank 0's result dict."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "result.json"
        args = ["-m", "trainers", "--quiet", "--json", str(out), "--trainer", "cnn",
                "--data-parallel", str(dp), "--model-parallel", str(mp)]
        for k, v in settings.items():
            args += ["--set", f"{k}={json.dumps(v)}"]
        for k, v in config.items():
            args += ["--param", f"{k}={json.dumps(v)}"]
        if ranks == 1:
            cmd = [sys.executable, *args]
        else:
            cmd = [str(HOROVODRUN), "-np", str(ranks), "-H", f"localhost:{ranks}", "--gloo",
                   sys.executable, *args]
        env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
        done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True,
                              timeout=timeout)
        if not out.is_file():
            raise RuntimeError(f"{' '.join(cmd[:6])} ... gave no result:\n{done.stdout[-2000:]}"
                               f"\n{done.stderr[-2000:]}")
        result = json.loads(out.read_text())
    if result["status"] != "ok":
        raise RuntimeError(f"trial failed: {result['reason']}")
    return result


def steady(result: dict, key: str) -> float:
    rows = result["history"][1:] or result["history"]
    return sum(r[key] for r in rows) / len(rows)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--dp", default="1,2,4,8", help="data-parallel sizes to try")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch-per-rank", type=int, default=64)
    p.add_argument("--channels", type=int, default=32)
    p.add_argument("--width", type=int, default=512)
    p.add_argument("--mp-width", type=int, default=4096, help="wide layers for the mp timing")
    p.add_argument("--mp-depth", type=int, default=2)
    p.add_argument("--oversubscribe", action="store_true", help="run dp above the core count")
    p.add_argument("--timeout", type=float, default=900)
    args = p.parse_args(argv)
    cores = os.cpu_count() or 1
    print(f"# trainers benchmark: cnn on mnist5k (4,000 training images), {cores} cores,"
          f" Horovod over Gloo, batch {args.batch_per_rank} per rank, {args.epochs} epochs"
          " (first epoch not counted)", flush=True)

    settings = {"dataset": "mnist5k", "epochs": args.epochs, "batch_per_rank": True}
    config = {"channels": args.channels, "width": args.width,
              "batch_size": args.batch_per_rank, "lr": 0.01}
    print(f"\n{'dp':>3} {'ranks':>5} {'samples/s':>10} {'efficiency':>10} {'val_acc':>8}")
    base = None
    for dp in (int(x) for x in args.dp.split(",")):
        if dp > cores and not args.oversubscribe:
            print(f"{dp:>3} {dp:>5} {'skipped: ' + str(cores) + ' cores':>30}", flush=True)
            continue
        result = run_trial(dp, dp, 1, settings, config, args.timeout)
        throughput = steady(result, "samples_per_second")
        base = throughput if dp == 1 else base
        efficiency = f"{throughput / (dp * base):.0%}" if base else "n/a"
        print(f"{dp:>3} {dp:>5} {throughput:>10.0f} {efficiency:>10}"
              f" {result['metrics']['val_accuracy']:>8.3f}", flush=True)

    print(f"\n# model parallelism: cnn with {args.mp_depth} fully connected layers of"
          f" {args.mp_width} units, batch {args.batch_per_rank}, dp = 1")
    print(f"{'mp':>3} {'ms/step':>8} {'vs mp=1':>8}")
    mp_settings = {**settings, "batch_per_rank": False, "max_train_samples": 1280}
    mp_config = {**config, "width": args.mp_width, "depth": args.mp_depth}
    reference = None
    for mp in (1, 2):
        if mp > cores and not args.oversubscribe:
            print(f"{mp:>3} skipped: {cores} cores")
            continue
        result = run_trial(mp, 1, mp, mp_settings, mp_config, args.timeout)
        steps = -(-1280 // args.batch_per_rank)
        ms = 1000 * steady(result, "epoch_time") / steps
        reference = ms if mp == 1 else reference
        ratio = f"{ms / reference:.2f}x" if reference else "n/a"
        print(f"{mp:>3} {ms:>8.1f} {ratio:>8}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
