"""The final drain of a whole sweep: what a scheduler with no overhead gets busy.

``bench.simulate``'s sweep mode runs a fixed number of trials to the last: once
the last trial is launched, nothing is left to start, and the slots idle while
the trials still running end (the "idle after last launch", the final drain).
Its durations are drawn i.i.d. from a lognormal that does not depend on the
trial's config, so no scheduler that does not know a trial's duration before it
ends can shorten the drain by its order of launches: the last trials' durations
have the same distribution whatever it starts last.

Here the same workloads (``bench.simulate``'s, at ``--nodes``) run on an ideal
scheduler: the slots as one pool (no nodes, no gang start-up, no failures, no
driver time), each freed slot handed at once to the stage with the fewest busy
ranks whose next trial fits, as nestor's scheduler hands them out. Its busy
share over ``--seeds`` draws of the durations is what a sweep's busy share can
be: any real scheduler's lies below it, give or take the luck of the longest
trials near the end.

    .venv/bin/python -m bench.drain_bound [--nodes 4096] [--seeds 20]
"""

from __future__ import annotations

import argparse
import heapq
import math
import random
import statistics
from typing import Any

from bench import machine, simulate
from bench.machine import write_result


def ideal_sweep(workload: simulate.Workload, slots: int, seed: int) -> dict[str, float]:
    """One draw of ``workload``'s whole sweep on the ideal scheduler: busy share,
    makespan and last launch (hours).

    >>> w = simulate.Workload("w", (simulate.Stage("s", 2, 1, 4),), 2, 60.0, 0.0, "")
    >>> run = ideal_sweep(w, slots=4, seed=0)  # 8 trials of 2 ranks, 60 s, 2 at a time
    >>> round(run["busy"], 9), round(run["makespan_h"] * 3600), round(run["last_launch_h"] * 3600)
    (1.0, 240, 180)
    """
    rng = random.Random(seed)
    mu = math.log(workload.median_s)
    # [ranks, trials left, busy ranks] per stage
    stages = [[s.data * s.model, s.population * workload.generations, 0]
              for s in workload.stages]
    running: list[tuple[float, int, list[int]]] = []
    free, now, work, last, order = slots, 0.0, 0.0, 0.0, 0
    while True:
        started = True
        while started:
            started = False
            for stage in sorted(stages, key=lambda s: s[2]):
                if stage[1] and stage[0] <= free:
                    seconds = rng.lognormvariate(mu, workload.sigma)
                    order += 1
                    heapq.heappush(running, (now + seconds, order, stage))  # type: ignore[misc]
                    stage[1] -= 1
                    stage[2] += stage[0]
                    free -= stage[0]
                    work += seconds * stage[0]
                    last, started = now, True
                    break
        if not running:
            break
        now, _, stage = heapq.heappop(running)
        free += stage[0]
        stage[2] -= stage[0]
    return {"busy": work / (slots * now), "makespan_h": now / 3600, "last_launch_h": last / 3600}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--nodes", type=int, default=4096)
    p.add_argument("--seeds", type=int, default=20)
    p.add_argument("--out", default="drain-bound-4096")
    args = p.parse_args(argv)
    start = machine.describe()
    slots = args.nodes * simulate.SLOTS_PER_NODE
    result: dict[str, Any] = {"machine": start, "nodes": args.nodes, "slots": slots,
                              "seeds": args.seeds, "workloads": {}}
    for workload in simulate.workloads(quick=False):
        workload = simulate.scaled(workload, args.nodes)
        draws = [ideal_sweep(workload, slots, seed) for seed in range(args.seeds)]
        busy = [d["busy"] for d in draws]
        row = {"generations": workload.generations, "median_min": workload.median_s / 60,
               "sigma": workload.sigma, "busy_mean": statistics.mean(busy),
               "busy_min": min(busy), "busy_max": max(busy),
               "makespan_h_mean": statistics.mean(d["makespan_h"] for d in draws),
               "drain_h_mean": statistics.mean(d["makespan_h"] - d["last_launch_h"]
                                               for d in draws)}
        result["workloads"][workload.name] = row
        print(f"{workload.name:5s} ideal whole sweep on {slots:,} slots: busy"
              f" {row['busy_mean']:.1%} on average ({row['busy_min']:.1%} to"
              f" {row['busy_max']:.1%} over {args.seeds} draws), drain"
              f" {row['drain_h_mean']:.1f} h of {row['makespan_h_mean']:.1f} h", flush=True)
    result["machine"] = machine.finish(start)
    print(f"written: {write_result(args.out, result)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
