"""Epochs to a quality on simulated training: full-budget searches, successive
halving (ASHA, Hyperband, BOHB-style) and PBT.

A simulated model has an expected loss L that training moves towards the
configuration's floor g(x) (a 3-D sphere on [-5, 5]^3): Δ epochs with
configuration x give L <- g(x) + (L - g(x)) * 0.8^Δ, from L = 30 untrained.
A trial reports L plus noise of standard deviation 5 / sqrt(epochs trained by
that model), so short runs rank configurations badly. Continuing a trial
(``continue_from``) continues its model: this is what PBT and promotions
exploit, and what a full-budget search pays for in full every time.

The quality is reached when a trial trained the full 27 epochs has L <= 5.
The cost is every epoch of every trial asked so far (4 slots, in-flight ones
included; a continued trial counts from its checkpoint); a seed that never
reaches the quality counts at all it spent, and the table says how many did.

    .venv/bin/python bench/multifidelity_bench.py              # 10 seeds, a few seconds
    .venv/bin/python bench/multifidelity_bench.py --seeds 20 --parallel 8

It writes bench/results/multifidelity.json, which `python -m bench.report` renders.
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import machine, stats
from nestor.search import Objective, Searcher, make_searcher
from nestor.search._fidelity import span
from nestor.search.space import FloatParam, SearchSpace

SPACE = SearchSpace(tuple(FloatParam(f"x{i}", -5.0, 5.0) for i in range(3)))
MAX_EPOCHS = 27
QUALITY = 5.0
UNTRAINED = 30.0

# name -> (algorithm, settings); seed is added per run. Budgets allow at most
# about 2,700 epochs each (100 full trainings).
SEARCHES: dict[str, tuple[str, dict[str, Any]]] = {
    "random (27 epochs each)": ("random", {"budget": 100}),
    "tpe (27 epochs each)": ("bayesian", {"budget": 100, "sampler": "tpe"}),
    "asha": ("asha", {"budget": 1000, "max_budget": MAX_EPOCHS}),
    "asha tpe": ("asha", {"budget": 1000, "max_budget": MAX_EPOCHS, "sampler": "tpe"}),
    "hyperband": ("hyperband", {"budget": 500, "max_budget": MAX_EPOCHS}),
    "hyperband tpe (bohb)": (
        "hyperband",
        {"budget": 500, "max_budget": MAX_EPOCHS, "sampler": "tpe"},
    ),
    "pbt 8 x 9 intervals of 3": ("pbt", {"population": 8, "interval": 3, "intervals": 9}),
    "pbt 16 x 9 intervals of 3": ("pbt", {"population": 16, "interval": 3, "intervals": 9}),
}


def floor(config: dict[str, Any]) -> float:
    return sum(v * v for v in config.values())


def cost(searcher: Searcher) -> float:
    trials = searcher.trials
    total = 0.0
    for trial in trials.values():
        start, until = (0.0, MAX_EPOCHS) if trial.budget is None else span(trial, trials)
        total += until - start
    return total


def epochs_to_quality(searcher: Searcher, seed: int, parallel: int) -> tuple[float, bool]:
    model: dict[str, tuple[float, float]] = {}  # trial id -> (L, epochs trained)
    running: list = []
    while not searcher.done():
        running += searcher.ask(parallel - len(running))
        if not running:
            break
        trial = running.pop(0)
        loss, trained = (UNTRAINED, 0.0)
        if trial.continue_from is not None:
            loss, trained = model[trial.continue_from]
        until = MAX_EPOCHS if trial.budget is None else float(trial.budget)
        g = floor(trial.config)
        loss = g + (loss - g) * 0.8 ** (until - trained)
        model[trial.id] = (loss, until)
        noise = random.Random(f"{seed}-{trial.id}").gauss(0.0, 5.0 / math.sqrt(until))
        searcher.tell(trial.id, loss + noise)
        if until >= MAX_EPOCHS and loss <= QUALITY:
            return cost(searcher), True
    return cost(searcher), False


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--parallel", type=int, default=4, help="simulated slots")
    args = parser.parse_args(argv)
    start = machine.describe()
    print(
        f"epochs to a 27-epoch model with loss <= {QUALITY} (median over {args.seeds} seeds,"
        f" {args.parallel} slots; every epoch of every trial counted)"
    )
    header = ["search", "median epochs [min-max]", "quartiles", "reached"]
    rows = []
    records: list[dict[str, Any]] = []
    for name, (algorithm, settings) in SEARCHES.items():
        runs = []
        for seed in range(args.seeds):
            searcher = make_searcher(
                algorithm, SPACE, [Objective("loss", "min")], seed=seed, **settings
            )
            runs.append(epochs_to_quality(searcher, seed, args.parallel))
        # A seed that never got there counts at all it spent, a lower bound (≥).
        summary = stats.summarize_seeds([e if r else None for e, r in runs],
                                        budgets=[e for e, _ in runs])
        spent = sorted(e for e, _ in runs)
        q1, _, q3 = statistics.quantiles(spent, n=4)
        rows.append([name, summary.cell(), f"{q1:.0f}-{q3:.0f}",
                     f"{summary.reached}/{summary.seeds}"])
        records.append({"search": name, "algorithm": algorithm, "settings": settings,
                        "epochs": asdict(summary), "q1": q1, "q3": q3,
                        "per_seed": [{"epochs": e, "reached": r} for e, r in runs]})
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    print("| " + " | ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)) + " |")
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for row in rows:
        print("| " + " | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) + " |")
    result = {"machine": machine.finish(start), "seeds": args.seeds, "parallel": args.parallel,
              "max_epochs": MAX_EPOCHS, "quality": QUALITY, "rows": records}
    print(f"written: {machine.write_result('multifidelity', result)}")


if __name__ == "__main__":
    main()
