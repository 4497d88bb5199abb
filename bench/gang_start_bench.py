"""Time to start N Horovod gangs on real Ray: concurrently (the engine's RayBackend,
each start-up in its own thread, off the scheduling loop) against one at a time
(what the engine did before: ``GangPool.acquire`` inside the loop).

Both run in one process on one Ray, one after the other, with N one-rank gangs
on N logical CPUs (this machine has 2 cores: the ranks' processes share them, so
what concurrency saves is the waiting in placement and rendezvous, not CPU).

    .venv/bin/python bench/gang_start_bench.py [--gangs 32]

Prints a table and writes bench/results/gang-start.json.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def one_at_a_time(gangs: int) -> float:
    from nestor.orchestrator.backends.ray.gangs import GangPool, Shape

    pool = GangPool(gangs)
    began = time.perf_counter()
    try:
        for _ in range(gangs):
            pool.acquire(Shape(1))
        return time.perf_counter() - began
    finally:
        pool.shutdown()


def concurrently(gangs: int) -> tuple[float, float]:
    """Seconds until every gang is up, and the longest the loop was held by a launch."""
    from nestor.orchestrator.backends import Launch, RayBackend, Started
    from nestor.orchestrator.backends.ray.gangs import GangPool, Shape
    from nestor.trainers import TrainerRef, TrialRequest

    backend = RayBackend(GangPool(gangs))
    request = TrialRequest("bench", TrainerRef.python("bench.gang_start_bench:noop"))
    began = time.perf_counter()
    held = 0.0
    try:
        for i in range(gangs):
            tick = time.perf_counter()
            backend.launch(Launch(f"g{i}", Shape(1), request))
            held = max(held, time.perf_counter() - tick)
        up = 0
        while up < gangs:
            up += sum(isinstance(e, Started) for e in backend.wait(None))
        return time.perf_counter() - began, held
    finally:
        backend.shutdown()


def noop(config: dict, ctx: object) -> dict:
    return {"result": 0.0}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gangs", type=int, default=32)
    args = parser.parse_args()

    import ray

    from bench.machine import describe, finish, write_result

    start = describe()
    ray.init(address="local", num_cpus=args.gangs, include_dashboard=False, log_to_driver=False,
             configure_logging=False, runtime_env={"env_vars": {"PYTHONPATH": str(ROOT)}})
    try:
        serial = one_at_a_time(args.gangs)
        together, held = concurrently(args.gangs)
    finally:
        ray.shutdown()
    result = {"gangs": args.gangs, "one_at_a_time_s": round(serial, 2),
              "concurrently_s": round(together, 2), "speedup": round(serial / together, 2),
              "longest_loop_hold_s": round(held, 4), "machine": finish(start)}
    print(f"{args.gangs} one-rank gangs on real Ray: one at a time {serial:.1f} s,"
          f" concurrently {together:.1f} s ({serial / together:.1f}x);"
          f" the loop was held at most {held * 1000:.1f} ms per launch")
    print(f"written: {write_result('gang-start', result)}")


if __name__ == "__main__":
    main()
