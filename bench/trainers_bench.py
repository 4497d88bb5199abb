"""Training throughput of the built-in trainers at dp = 1, 2, 4, 8, and mp = 2 against mp = 1.

    .venv/bin/python bench/trainers_bench.py                 # the defaults below
    .venv/bin/python bench/trainers_bench.py --epochs 3 --dp 1,2,4 --oversubscribe

Every measurement is a real trial: ``python -m nestor.trainers`` under ``horovodrun
--gloo`` (a plain process at one rank) on the real mnist5k digits. Data
parallelism is measured as weak scaling, the way Horovod is used: a fixed
batch per rank (``batch_per_rank``), so the global batch grows with dp.
Throughput is the mean samples/s of the epochs after the first (the first
pays for imports and warm-up), best of ``--repeats`` interleaved runs since
a shared machine's other load only ever slows a run down; every run is
printed too, and the load average. Scaling efficiency is
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
              timeout: float, backend: str = "horovod") -> dict:
    """One trial through the CLI, under horovodrun or torchrun (``backend``); returns
    rank 0's result dict."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "result.json"
        args = ["-m", "trainers", "--quiet", "--json", str(out), "--trainer", "cnn",
                "--data-parallel", str(dp), "--model-parallel", str(mp), "--backend", backend]
        for k, v in settings.items():
            args += ["--set", f"{k}={json.dumps(v)}"]
        for k, v in config.items():
            args += ["--param", f"{k}={json.dumps(v)}"]
        if ranks == 1:
            cmd = [sys.executable, *args]
        elif backend == "torch":
            cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
                   "--nproc_per_node", str(ranks), *args]
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


def loadavg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "n/a"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--dp", default="1,2,4,8", help="data-parallel sizes to try")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--repeats", type=int, default=2,
                   help="runs of each size, interleaved; the best counts (shared machines)")
    p.add_argument("--batch-per-rank", type=int, default=64)
    p.add_argument("--channels", type=int, default=32)
    p.add_argument("--width", type=int, default=512)
    p.add_argument("--mp-width", type=int, default=4096, help="wide layers for the mp timing")
    p.add_argument("--mp-depth", type=int, default=2)
    p.add_argument("--oversubscribe", action="store_true", help="run dp above the core count")
    p.add_argument("--timeout", type=float, default=900)
    args = p.parse_args(argv)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    cores = cores or 1
    print(f"# trainers benchmark: cnn (channels {args.channels}, width {args.width}) on mnist5k"
          f" (4,000 training images), {cores} cores, Horovod over Gloo, batch"
          f" {args.batch_per_rank} per rank, {args.epochs} epochs (first not counted), best of"
          f" {args.repeats} interleaved runs; load average at start: {loadavg()}", flush=True)

    settings = {"dataset": "mnist5k", "epochs": args.epochs, "batch_per_rank": True}
    config = {"channels": args.channels, "width": args.width,
              "batch_size": args.batch_per_rank, "lr": 0.01}
    sizes = [int(x) for x in args.dp.split(",")]
    runnable = [dp for dp in sizes if dp <= cores or args.oversubscribe]
    runs: dict[int, list[tuple[float, float]]] = {dp: [] for dp in runnable}
    for _ in range(args.repeats):
        for dp in runnable:
            result = run_trial(dp, dp, 1, settings, config, args.timeout)
            runs[dp].append((steady(result, "samples_per_second"),
                             result["metrics"]["val_accuracy"]))
    print(f"\n{'dp':>3} {'samples/s':>10} {'efficiency':>10} {'val_acc':>8}   all runs (samples/s)")
    base = max(r[0] for r in runs[1]) if runs.get(1) else None
    for dp in sizes:
        if dp not in runs:
            print(f"{dp:>3} {'skipped: ' + str(cores) + ' cores':>30}")
            continue
        best, accuracy = max(runs[dp])
        efficiency = f"{best / (dp * base):.0%}" if base else "n/a"
        every = ", ".join(f"{r[0]:.0f}" for r in runs[dp])
        print(f"{dp:>3} {best:>10.0f} {efficiency:>10} {accuracy:>8.3f}   {every}")

    mp_settings = {**settings, "batch_per_rank": False, "max_train_samples": 1280}
    mp_config = {**config, "width": args.mp_width, "depth": args.mp_depth}
    steps = -(-1280 // args.batch_per_rank)
    mps = [mp for mp in (1, 2) if mp <= cores or args.oversubscribe]
    times: dict[int, list[float]] = {mp: [] for mp in mps}
    for _ in range(args.repeats):
        for mp in mps:
            result = run_trial(mp, 1, mp, mp_settings, mp_config, args.timeout)
            times[mp].append(1000 * steady(result, "epoch_time") / steps)
    print(f"\n# model parallelism: cnn with {args.mp_depth} fully connected layers of"
          f" {args.mp_width} units split across mp ranks, batch {args.batch_per_rank}, dp = 1")
    print(f"{'mp':>3} {'ms/step':>8} {'vs mp=1':>8}   all runs (ms/step)")
    reference = min(times[1]) if times.get(1) else None
    for mp in mps:
        best = min(times[mp])
        ratio = f"{best / reference:.2f}x" if reference else "n/a"
        print(f"{mp:>3} {best:>8.1f} {ratio:>8}   {', '.join(f'{t:.1f}' for t in times[mp])}")
    print(f"\n# load average at end: {loadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
