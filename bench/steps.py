"""The benchmarks of ``make bench-quick`` and ``make bench``: one list, run in order, each timed.

    .venv/bin/python -m bench.steps quick                 # every headline figure, small sizes
    .venv/bin/python -m bench.steps full                  # the full sizes
    .venv/bin/python -m bench.steps quick --only tables,simulate --run 20261125T1930Z

Why one runner and not a list in the Makefile: every step of one invocation gets the
same run id (``NESTOR_BENCH_RUN``, recorded by ``bench/machine.py`` in each results
file) and size (``NESTOR_BENCH_SIZE``), so ``python -m bench.report --check --same-run``
can tell that the headline's figures come from one run; and each step's wall time,
CPU time and load go to ``bench/results/bench-SIZE.json``, so the "under 30 minutes"
goal is measured, not guessed. ``--only`` reruns some steps under an existing run id
(their timings are merged into the file of that run); ``--nice`` lowers their priority
on a shared machine.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shlex
import subprocess
import sys
import time
from typing import Any

from bench import machine

# (name, arguments to python). The quick sizes are said in bench/REPORT.md by each
# results file's own fields (seeds, profile, quick) and the command beside each figure.
# They are cut to about 20 minutes on a quiet 2-core machine (the goal is 30; the
# estimate below); a one-seed figure says so in the headline. bench/planning_bench.py
# (the cost model against real epochs, about 150 s) makes no headline figure, so only
# `make bench` runs it.
QUICK: list[tuple[str, str]] = [
    ("tables", "-m bench.tables --quick"),
    ("simulate", "-m bench.simulate --quick"),
    ("gang-start", "bench/gang_start_bench.py --gangs 8"),
    ("orchestration", "bench/orchestration_bench.py --parts overhead --trials 250,2000"
                      " --tune-new-actor-cap 50 --reps 3"),
    ("e2e-planning", "bench/e2e_planning_bench.py --seeds 1 --threshold 0.93"),
    ("simulate-planning", "-m bench.simulate_planning --quick"),
    ("multifidelity", "bench/multifidelity_bench.py --seeds 20"),
    ("auto-sine", "bench/auto_bench.py --seeds 10"
                  " --algorithms auto,random,cmaes-0,lq-cmaes,genetic,optuna-cmaes-1"),
    ("auto-heldout", "bench/auto_heldout_bench.py --seeds 3 --budget 60"),
    ("conditional", "bench/conditional_bench.py --seeds 5 --budget 60"),
    ("many-at-once", "bench/many_at_once_bench.py --seeds 2 --jobs 2 --mf-max-width 16"
                     " --ngopt-max-width 16 --optuna-tpe-max-width 64 --cbo-max-width 0"),
    ("multifidelity-heldout", "bench/multifidelity_heldout_bench.py --seeds 2"),
    ("multifidelity-dev", "bench/multifidelity_dev_bench.py --seeds 1"),
    ("search-fidelity", "bench/search_fidelity_bench.py --quick --seeds 1"),
    ("backends", "bench/backend_bench.py --repeats 2 --epochs 2"),
]
# The quick sizes' estimated wall time on a quiet 2-core machine, by step, from runs on a
# shared one (bench-quick.json of run quick-20261125T1940Z at load 12-41, about 3.5x slower
# than quiet where a step's own CPU time does not say more; the e2e-planning and backends
# runs at load 1-5 in git history) and each bench's sizes, in seconds: tables 190,
# simulate 15, gang-start 35, orchestration 540 (3 interleaved repetitions of 250 and
# 2,000 trials by nestor's command and function trials and Tune's reuse_actors, about
# 85 s a repetition, and of Tune's default at 50 trials of about a second, 70 s),
# e2e-planning 250 (4 arms x 1 seed; 2 seeds took 602 s at load 1-4),
# simulate-planning 5, multifidelity 10, auto-sine 25 (37 s of CPU in 2 processes),
# auto-heldout 35 (63 s of CPU with NGOpt, in 2 processes), many-at-once 40 (72 s of CPU
# with NGOpt, --jobs 2; the competitors and the multi-fidelity problems kept to the
# widths of that run: the bench's defaults since run them to 1,024, 23 minutes here),
# multifidelity-heldout 65 (63 s of CPU, one process), multifidelity-dev 35 (the same
# searches on its 4 problems, one seed: an estimate from the held-out step's, not run),
# search-fidelity 300 (6 searches x 80 slot-s on 2 slots: 240 s, and start-ups), backends
# 65 (3 repeats of 3 epochs: 125 s at load 1-2). About 27 minutes in all; CPU times
# measured at load 20-38; bench-quick.json says what a run took.

FULL: list[tuple[str, str]] = [
    ("search", "bench/search_bench.py"),  # these three print tables only: not in the report
    ("auto-suite-2", "bench/auto_suite_bench.py --budget 130 --parallel 2"),
    ("auto-suite-8", "bench/auto_suite_bench.py --budget 100 --parallel 8"),
    ("trainers", "bench/trainers_bench.py"),
    ("tables", "-m bench.tables"),
    ("simulate", "-m bench.simulate"),
    ("simulate-4096", "-m bench.simulate --nodes 4096 --fsync --out simulate-4096-fsync"),
    ("journal", "-m bench.journal_bench"),
    ("gang-start", "bench/gang_start_bench.py"),
    ("orchestration", "bench/orchestration_bench.py"),
    ("e2e-planning", "bench/e2e_planning_bench.py"),
    ("planning", "bench/planning_bench.py"),
    ("simulate-planning", "-m bench.simulate_planning"),
    ("multifidelity", "bench/multifidelity_bench.py --seeds 20"),
    ("auto-sine", "bench/auto_bench.py --seeds 20 --algorithms auto,random,tpe,cmaes-10,"
                  "cmaes-0,lq-cmaes,genetic,genetic-async,optuna-cmaes-1"),
    ("auto-heldout", "bench/auto_heldout_bench.py --seeds 5 --competitors tpe,gp,cmaes,ngopt"),
    ("conditional", "bench/conditional_bench.py --seeds 8 --budget 60"),
    ("many-at-once", "bench/many_at_once_bench.py"),
    ("multifidelity-heldout", "bench/multifidelity_heldout_bench.py"),
    ("multifidelity-dev", "bench/multifidelity_dev_bench.py"),
    # 30 cells (3 widths x 2 problems x 5 seeds) took about 40 minutes at load 20 here.
    ("multifidelity-auto", "bench/multifidelity_auto_bench.py --seeds 5 --jobs 4 --problems"
                           " faithful-rotated-4d misleading-overfit-5d"),
    ("search-fidelity", "bench/search_fidelity_bench.py"),
    # the user's own function, nestor against Tune, Optuna and Syne Tune: 7 systems x 5
    # seeds x 90 s, about an hour (issue 38)
    ("own-code", "bench/own_code_bench.py --seeds 5 --budget 90"),
    ("backends", "bench/backend_bench.py"),
]

STEPS = {"quick": QUICK, "full": FULL}

# The code each step measures, by step name (a quick and a full step of one name measure
# the same): a results file made at a commit older than the last change to these paths
# is stale, and `python -m bench.report --check` fails unless REPORT.md labels its
# headline figure so (bench.report.stale_label). nestor's own code only: a change to a
# bench script or its problems changes what is asked, and its results say their command.
SYSTEM = ("orchestrator/", "search/", "trainers/")  # a whole run: engine, searches, ranks
MEASURES: dict[str, tuple[str, ...]] = {
    "tables": SYSTEM,
    "simulate": ("orchestrator/", "search/"),  # the real scheduler on a simulated cluster
    "simulate-4096": ("orchestrator/", "search/"),
    "gang-start": ("orchestrator/backends/", "trainers/"),
    "orchestration": SYSTEM,
    "e2e-planning": SYSTEM,
    "planning": ("orchestrator/planning/", "trainers/"),
    "simulate-planning": ("orchestrator/", "search/"),
    "multifidelity": ("search/",),
    "auto-sine": ("search/",),
    "auto-heldout": ("search/",),
    "conditional": ("search/",),
    "many-at-once": ("search/",),
    "multifidelity-heldout": ("search/",),
    "multifidelity-dev": ("search/",),
    "multifidelity-auto": ("search/",),
    "search-fidelity": SYSTEM,
    "own-code": SYSTEM,
    "backends": ("orchestrator/backends/", "trainers/"),
    "search": ("search/",),
    "auto-suite-2": ("search/",),
    "auto-suite-8": ("search/",),
    "trainers": ("trainers/",),
    "journal": ("orchestrator/journal/",),
}


def _program(command: str) -> str | None:
    """The script or module a step's arguments (or a result's ``python ...``) run."""
    words = shlex.split(command)
    if words and words[0] in ("python", "python3"):
        words = words[1:]
    if words[:1] == ["-m"]:
        return words[1] if len(words) > 1 else None
    return words[0] if words else None


def measured_paths(command: str) -> tuple[str, ...] | None:
    """The paths the step that ran ``command`` (a results file's ``python ...``)
    measures; None for a command no step runs (a bench run by hand)."""
    program = _program(command)
    for name, args in (*QUICK, *FULL):
        if program is not None and _program(args) == program:
            return MEASURES[name]
    return None


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_step(name: str, args: str, nice: int) -> dict[str, Any]:
    """One benchmark in its own process: its wall time, the CPU time of it and the
    processes it waited for (Ray's included once they exit), and the load around it."""
    argv = [sys.executable, *shlex.split(args)]
    if nice:
        argv = ["nice", "-n", str(nice), *argv]
    load_start, cpu_start, t0 = list(os.getloadavg()), _children_cpu_s(), time.monotonic()
    print(f"== {name}: python {args}", flush=True)
    rc = subprocess.run(argv, cwd=machine.ROOT, check=False).returncode
    wall = time.monotonic() - t0
    return {"command": f"python {args}", "rc": rc, "wall_s": round(wall, 3),
            "cpu_s": round(_children_cpu_s() - cpu_start, 1),
            "load_average_at_start": load_start, "load_average_at_end": list(os.getloadavg())}


def record(size: str, run: str, steps: dict[str, dict[str, Any]],
           start: dict[str, Any] | None = None) -> None:
    """Merge these steps into bench/results/bench-SIZE.json when it holds the same run,
    else start it afresh: one file says what one run took, step by step. ``start`` is
    ``machine.describe()`` at the run's start (the file's own, where it holds the run)."""
    path = machine.RESULTS / f"bench-{size}.json"
    old = json.loads(path.read_text()) if path.is_file() else {}
    same = old.get("machine", {}).get("run") == run
    kept = old.get("steps", {}) if same else {}
    start = old["machine"] if same else (start or machine.describe())
    order = [name for name, _ in STEPS[size]]
    merged = kept | steps
    merged = {name: merged[name] for name in order if name in merged}
    total = {"wall_s": round(sum(s["wall_s"] for s in merged.values()), 1),
             "cpu_s": round(sum(s["cpu_s"] for s in merged.values()), 1)}
    machine.write_result(f"bench-{size}", {"size": size, "steps": merged, "total": total,
                                           "missing": [n for n in order if n not in merged],
                                           "machine": machine.finish(start)})


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("size", choices=sorted(STEPS))
    p.add_argument("--only", default=None, help="comma-separated step names (default: all)")
    p.add_argument("--run", default=None,
                   help="run id to record (default: a new one, the UTC time now)")
    p.add_argument("--nice", type=int, default=0, help="niceness of each step (shared machines)")
    args = p.parse_args(argv)
    names = [name for name, _ in STEPS[args.size]]
    only = names if args.only is None else args.only.split(",")
    unknown = sorted(set(only) - set(names))
    if unknown:
        p.error(f"--only must name steps of {args.size} ({', '.join(names)}), but got {unknown}")
    run = args.run or time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    os.environ[machine.RUN_ENV], os.environ[machine.SIZE_ENV] = run, args.size
    done: dict[str, dict[str, Any]] = {}
    start = machine.describe()
    for name, step in STEPS[args.size]:
        if name in only:
            done[name] = run_step(name, step, args.nice)
            record(args.size, run, done, start)
    failed = [name for name, s in done.items() if s["rc"] != 0]
    print(f"run {run}: " + ", ".join(f"{n} {s['wall_s']:.0f} s" for n, s in done.items()))
    if failed:
        print(f"failed: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
