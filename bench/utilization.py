"""A model of the scheduling policy at the seed's scale: 2,048 logical slots,
heavy-tailed trials. Not nestor's scheduler.

What this measures is the policy (a generational barrier against refilling
each slot as it frees) and nestor's genetic searcher, driven by a loop written
here (``run_schedule``): it has none of nestor's scheduler (no gangs, no
placement groups, no journal, no MLflow, no retries, no stage sharing), so its
utilization is the policy's, not nestor's. Until the engine's simulated
backend runs the real scheduler at this scale, nestor's own utilization at
2,048 slots is not measured anywhere; bench/REPORT.md says so beside the
figures.

The seed's allocation had 2,048 nodes. This machine cannot start 2,048
worker processes, so the slots are Ray resources: Ray starts with
``--slots`` units of a ``slot`` resource, and a few async actors claim them
(each holds ``slots / hosts`` units and runs that many trials at once with
``max_concurrency``). A trial is an actor call that ``await``s
``asyncio.sleep(duration)``: it holds its slot for exactly its duration and no
core. Durations are drawn from a seeded lognormal (heavy-tailed: a few trials
run tens of times longer than the median), in the order trials start, so both
schedules see the same sequence.

Which trial starts when is decided by nestor's own genetic searcher
(``search.GeneticSearch``): with ``schedule="generational"`` it hands out
nothing until the whole generation is back (the barrier), with
``schedule="async"`` every finished trial is replaced at once. The driver
loop imitates the shape of nestor's (ask for as many trials as slots are
free, submit them, tell each result as it comes back) but is this file's own.

Reported per schedule: busy slot-seconds (from the start and end times the
actors measured), available slot-seconds (slots x wall time from the first
submission to the last result), their ratio, and the driver's own CPU time
(``time.process_time``: Ray client calls, ask/tell, bookkeeping), of which
the searcher's ask/tell wall time is given apart.

    .venv/bin/python -m bench.utilization --slots 2048 --generations 3 --median 2
"""

from __future__ import annotations

import argparse
import asyncio
import math
import random
import time
from typing import Any

from bench import machine, stats
from bench.machine import write_result


class SlotHost:
    """Holds ``slots`` logical slots; each trial sleeps on one of them."""

    async def run(self, duration: float) -> tuple[float, float]:
        start = time.time()
        await asyncio.sleep(duration)
        return start, time.time()

    def ping(self) -> bool:
        return True


def durations(n: int, median: float, sigma: float, seed: int) -> list[float]:
    """n lognormal durations: median ``median`` seconds, shape ``sigma``."""
    rng = random.Random(seed)
    return [rng.lognormvariate(math.log(median), sigma) for _ in range(n)]


def sphere(config: dict[str, float]) -> float:
    """The trials' objective: cheap, so the searcher's work is what is timed."""
    return sum(v * v for v in config.values())


def run_schedule(schedule: str, hosts: list[Any], per_host: int, population: int,
                 generations: int, sleeps: list[float], seed: int) -> dict[str, Any]:
    """One genetic search on the slots; returns its timeline summary."""
    import ray

    from search import Objective, make_searcher
    from search.space import FloatParam, SearchSpace

    space = SearchSpace([FloatParam(f"x{i}", -1.0, 1.0) for i in range(4)])
    searcher = make_searcher("genetic", space, [Objective("loss", "min")],
                             population=population, generations=generations, seed=seed,
                             schedule=schedule)
    slots = per_host * len(hosts)
    free = {i: per_host for i in range(len(hosts))}
    running: dict[Any, tuple[Any, int]] = {}  # ref -> (trial, host index)
    intervals: list[stats.Interval] = []
    search_s = 0.0
    started = 0
    cpu0 = time.process_time()
    t0 = time.time()
    while not searcher.done():
        room = slots - len(running)
        if room:
            tick = time.perf_counter()
            trials = searcher.ask(room)
            search_s += time.perf_counter() - tick
            for trial in trials:
                host = max(free, key=free.__getitem__)
                free[host] -= 1
                ref = hosts[host].run.remote(sleeps[started % len(sleeps)])
                started += 1
                running[ref] = (trial, host)
        if not running:
            raise RuntimeError(f"{schedule}: nothing running and nothing to ask")
        ready, _ = ray.wait(list(running), num_returns=1)
        ready, _ = ray.wait(list(running), num_returns=len(running), timeout=0)
        for ref, (start, end) in zip(ready, ray.get(ready), strict=True):
            trial, host = running.pop(ref)
            free[host] += 1
            intervals.append((start, end, 1))
            tick = time.perf_counter()
            searcher.tell(trial.id, sphere(trial.config))
            search_s += time.perf_counter() - tick
    t1 = time.time()
    cpu = time.process_time() - cpu0
    wall = t1 - t0
    busy = stats.busy_slot_seconds(intervals, t0, t1)
    grid = [t0 + wall * i / 199 for i in range(200)]
    return {
        "trials": len(intervals),
        "wall_s": wall,
        "busy_slot_s": busy,
        "available_slot_s": slots * wall,
        "utilization": busy / (slots * wall),
        "driver_cpu_s": cpu,
        "driver_cpu_ms_per_trial": 1000 * cpu / len(intervals),
        "searcher_ask_tell_s": search_s,
        "best": searcher.best().values[0] if searcher.best() else None,
        "occupancy": {"t": [t - t0 for t in grid], "busy": stats.occupancy(intervals, grid)},
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--slots", type=int, default=2048)
    p.add_argument("--hosts", type=int, default=8, help="async actors the slots are split over")
    p.add_argument("--generations", type=int, default=4)
    p.add_argument("--median", type=float, default=2.0, help="median trial duration, s")
    p.add_argument("--sigma", type=float, default=1.0, help="lognormal shape (tail weight)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="utilization", help="name of bench/results/NAME.json")
    args = p.parse_args(argv)
    if args.slots % args.hosts:
        p.error(f"--slots must be a multiple of --hosts ({args.hosts}), but got {args.slots}")
    import ray

    start = machine.describe()
    ray.init(num_cpus=1, resources={"slot": args.slots}, include_dashboard=False,
             log_to_driver=False, configure_logging=False)
    try:
        per_host = args.slots // args.hosts
        remote = ray.remote(SlotHost)
        hosts = [remote.options(num_cpus=0, resources={"slot": per_host},
                                max_concurrency=per_host).remote() for _ in range(args.hosts)]
        ray.get([h.ping.remote() for h in hosts])
        n = args.slots * args.generations
        sleeps = durations(n, args.median, args.sigma, args.seed)
        result: dict[str, Any] = {
            "machine": start,
            "slots": args.slots, "hosts": args.hosts, "population": args.slots,
            "generations": args.generations,
            "durations": {"distribution": "lognormal", "median_s": args.median,
                          "sigma": args.sigma, "seed": args.seed,
                          "mean_s": sum(sleeps) / n, "max_s": max(sleeps),
                          "p99_s": sorted(sleeps)[int(0.99 * n)]},
            "schedules": {},
        }
        for schedule in ("generational", "async"):
            result["schedules"][schedule] = run_schedule(
                schedule, hosts, per_host, args.slots, args.generations, sleeps, args.seed)
            row = result["schedules"][schedule]
            print(f"{schedule:12s} {row['trials']} trials, wall {row['wall_s']:.1f} s,"
                  f" utilization {row['utilization']:.1%}, driver CPU {row['driver_cpu_s']:.1f} s"
                  f" ({row['driver_cpu_ms_per_trial']:.2f} ms/trial)", flush=True)
    finally:
        ray.shutdown()
    result["machine"] = machine.finish(start)
    print(f"written: {write_result(args.out, result)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
