"""Compare the search algorithms on analytic problems at fixed budgets.

Prints, per problem, a table of the median (over seeds) best value found
within 50, 100 and 200 trials and the median number of trials needed to reach
the problem's threshold, for each algorithm next to random search. Trials run
on ``--parallel`` simulated slots: whenever a slot is free the driver asks for
a trial, and results come back oldest first, as from a cluster where trials
take about equally long. A generational search idles slots at its barrier;
that is part of what is measured.

    .venv/bin/python bench/search_bench.py                 # all but gp, 10 seeds
    .venv/bin/python bench/search_bench.py --algorithms random,tpe,gp --jobs 16

GP is left out by default: Optuna's GP sampler took about 150 s per search of
200 trials on a 2-core machine (all the others take under a second). ``--jobs``
runs seeds in parallel processes.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from nestor.search import Searcher, make_searcher
from nestor.search.problems import PROBLEMS

BUDGETS = (50, 100, 200)

# name -> (algorithm, settings); budget and seed are added per run.
ALGORITHMS: dict[str, tuple[str, dict]] = {
    "random": ("random", {}),
    "grid": ("grid", {"points": 5}),
    "genetic": ("genetic", {"population": 16, "generations": 13}),
    "genetic-async": ("genetic", {"population": 16, "generations": 13, "schedule": "async"}),
    "genetic-mu+lambda": (
        "genetic",
        {"population": 16, "generations": 24, "mode": "mu_plus_lambda", "offspring": 8},
    ),
    "genetic-demes": (
        "genetic",
        {"population": 16, "generations": 13, "demes": 2, "migration_interval": 2},
    ),
    "tpe": ("bayesian", {"sampler": "tpe"}),
    "cmaes": ("bayesian", {"sampler": "cmaes"}),
    "gp": ("bayesian", {"sampler": "gp"}),
}


def run(searcher: Searcher, function: Callable, parallel: int) -> list[float]:
    """The values of all trials, in the order their results came back."""
    running: list = []
    values: list[float] = []
    while not searcher.done():
        running += searcher.ask(parallel - len(running)) if len(running) < parallel else []
        if not running:
            break  # should not happen: nothing running and nothing to ask
        trial = running.pop(0)
        value = function(trial.config)
        values.append(value)
        searcher.tell(trial.id, value)
    return values


def summarize(runs: list[list[float]], threshold: float) -> list[str]:
    cells = []
    for budget in BUDGETS:
        cells.append(f"{statistics.median(min(v[:budget]) for v in runs):.4g}")
    hits = []
    for values in runs:
        hit = next((i + 1 for i, v in enumerate(values) if v <= threshold), math.inf)
        hits.append(hit)
    reached = sum(h < math.inf for h in hits)
    median = statistics.median(hits)
    cells.append(
        f"{median:.0f} ({reached}/{len(runs)})"
        if median < math.inf
        else f">{BUDGETS[-1]} ({reached}/{len(runs)})"
    )
    return cells


def one_run(problem_name: str, name: str, seed: int, parallel: int) -> tuple[list[float], float]:
    """One search of one problem: its values in result order, and its seconds."""
    problem = PROBLEMS[problem_name]
    algorithm, settings = ALGORITHMS[name]
    start = time.perf_counter()
    searcher = make_searcher(
        algorithm, problem.space, problem.objectives, seed=seed, budget=BUDGETS[-1], **settings
    )
    return run(searcher, problem, parallel), time.perf_counter() - start


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--parallel", type=int, default=4, help="simulated slots")
    parser.add_argument("--problems", default=",".join(PROBLEMS))
    parser.add_argument("--algorithms", default=",".join(a for a in ALGORITHMS if a != "gp"))
    parser.add_argument("--jobs", type=int, default=os.cpu_count(), help="processes")
    args = parser.parse_args(argv)
    names = args.algorithms.split(",")
    for name in names:
        if name not in ALGORITHMS:
            parser.error(f"algorithms must be among {', '.join(ALGORITHMS)}, but got {name!r}")
    if "random" not in names:
        names.insert(0, "random")
    keys = args.problems.split(",")
    print(
        f"median over {args.seeds} seeds; {args.parallel} parallel slots; lower is better;"
        " time = median seconds per search of 200 trials"
    )
    jobs = [(k, n, seed) for k in keys for n in names for seed in range(args.seeds)]
    with ProcessPoolExecutor(args.jobs) as pool:
        futures = {job: pool.submit(one_run, *job, args.parallel) for job in jobs}
    for key in keys:
        problem = PROBLEMS[key]
        print(
            f"\n{problem.name} ({len(problem.space)} parameters, optimum {problem.optimum:.4g},"
            f" threshold {problem.threshold:g})"
        )
        header = ["algorithm", *(f"best@{b}" for b in BUDGETS), "trials to threshold", "time"]
        rows = []
        for name in names:
            results = [futures[(key, name, seed)].result() for seed in range(args.seeds)]
            cells = summarize([values for values, _ in results], problem.threshold)
            seconds = statistics.median(t for _, t in results)
            rows.append([name, *cells, f"{seconds:.2f}s"])
        widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
        print("| " + " | ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)) + " |")
        print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
        for row in rows:
            print("| " + " | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) + " |")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
