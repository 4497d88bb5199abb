"""2,048 simulated slots (256 nodes x 8), or 32,768, running nestor's real scheduler.

The StageScheduler and TrialRunners that drive Ray here drive a
:class:`~orchestrator.backends.SimulatedBackend` instead: a cluster on a
virtual clock, so days of trials take seconds to minutes and what is measured
is the scheduler itself (its decisions, its journal, its searchers), not a
copy of its loop. Workloads:

- ``seed``: the seed's combined example: generations of 16 trials of dp 16 x
  mp 8 (128 ranks each: one generation fills the allocation), genetic search;
  lognormal durations (median 30 min, sigma 0.5).
- ``mixed``: four hpo stages side by side on the same slots, trials of 128,
  64, 32 and 16 ranks (dp x mp 16x8, 8x8, 8x4, 4x4), genetic searches of
  population 16, 32, 64 and 128; lognormal durations with a heavy tail
  (median 15 min, sigma 1.0: one trial in a hundred runs 10x the median).

Each runs with ``schedule: generational`` (a barrier per generation) and
``schedule: async`` (a finished trial is replaced at once), on the same
cluster, seed and failures. Gang start-up takes 30-90 s (uniform) for a new
gang; a warm gang of the same shape starts the next trial at once. Nodes fail
at random (exponential, ``--node-mtbf-h`` per node, default 2,000 h: about
one node failure every 7.8 h on 256 nodes) and come back after
``--repair-h`` (default 4 h); a rank fails in ``--rank-failure`` of attempts
(default 0.5 %). Trials retry up to 3 times.

Reported, from the simulator's ledger (what the slots did, in virtual time):
utilization = busy slot-seconds (trials' ranks running, failed attempts
included) over available slot-seconds (slots x makespan, less the time nodes
were out for repair); gang start-up slot-seconds apart (held, not busy);
idle slot-seconds before the last trial was launched (the barriers, or
fragmentation) and after it (the final drain); time to fill the allocation
(97 % of its slots held, and busy); trials lost (planned but not completed:
must be 0). From the driver: CPU seconds (``time.process_time``) less the
simulator's own, per backend event and per trial.

At ``--nodes 4096`` (32,768 slots) each stage's population grows with the
nodes (the seed's generations of 256 trials of dp 16 x mp 8), so that a
generation fills the allocation as it does at 256 nodes. Also reported: the
driver's peak memory (its resident set, VmHWM, reset before each run) and
backend events per second of wall time.

    .venv/bin/python -m bench.simulate [--quick] [--fsync] [--nodes 4096]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import tempfile
import textwrap
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from bench import machine
from bench.machine import write_result

NODES, SLOTS_PER_NODE = 256, 8
FILL = 0.97  # "the allocation is full": this share of its slots held
RETRIES = 3  # re-runs of a failed trial
ALLOCATION_GENERATIONS = 10_000  # mode allocation: more than any allocation runs


@dataclass(frozen=True)
class Stage:
    name: str
    data: int
    model: int
    population: int


@dataclass(frozen=True)
class Workload:
    name: str
    stages: tuple[Stage, ...]
    generations: int
    median_s: float
    sigma: float
    note: str


def workloads(quick: bool) -> list[Workload]:
    """The two workloads; ``quick`` cuts the generations (and so the run) to a quarter."""
    return [
        Workload("seed", (Stage("tune", 16, 8, 16),), generations=5 if quick else 20,
                 median_s=1800.0, sigma=0.5,
                 note="generations of 16 trials of dp 16 x mp 8 (the seed's combined example)"),
        Workload("mixed", (Stage("w128", 16, 8, 16), Stage("w64", 8, 8, 32),
                           Stage("w32", 8, 4, 64), Stage("w16", 4, 4, 128)),
                 generations=15 if quick else 60, median_s=900.0, sigma=1.0,
                 note="4 stages side by side: 16x8, 8x8, 8x4, 4x4 ranks"),
    ]


def scaled(workload: Workload, nodes: int) -> Workload:
    """The workload for ``nodes`` nodes: each population in proportion, so a
    generation fills the allocation as it does on NODES nodes."""
    if nodes == NODES:
        return workload
    stages = tuple(replace(s, population=max(1, round(s.population * nodes / NODES)))
                   for s in workload.stages)
    return replace(workload, stages=stages,
                   note=f"{workload.note}; populations x {nodes / NODES:g} for {nodes} nodes")


def _reset_peak_memory() -> None:
    """Start a new peak of the resident set (Linux: clear_refs 5 resets VmHWM)."""
    with contextlib.suppress(OSError):
        Path("/proc/self/clear_refs").write_text("5")


def _peak_memory_mib() -> float | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def spec_text(workload: Workload, schedule: str, generations: int,
              retries: int = RETRIES) -> str:
    """The workload as a nestor spec: hpo stages, genetic search, the given schedule."""
    stages = []
    for i, stage in enumerate(workload.stages):
        stages.append(textwrap.dedent(f"""
          - name: {stage.name}
            kind: hpo
            trainer: {{function: "nestor.orchestrator.simulate:simulated_trial"}}
            parallel: {{data: {stage.data}, model: {stage.model}}}
            search: {{algorithm: genetic, population: {stage.population},
                      generations: {generations}, schedule: {schedule},
                      seed: {i + 1}}}
            space:
              lr: {{type: float, low: 1.0e-4, high: 0.5, log: true}}
              momentum: {{type: float, low: 0.0, high: 0.99}}
              width: {{type: int, low: 16, high: 512, log: true}}
            objective: {{metric: val_accuracy, mode: max}}
            trial: {{retries: {retries}}}
        """))
    body = "".join(textwrap.indent(s, "  ") for s in stages)
    return f"name: sim-{workload.name}-{schedule}\nstages:\n{body}"


def attempt_rows(backend: Any) -> list[tuple[float, float | None, float, int, str]]:
    """(launched, started, ended, ranks, outcome) of every attempt the slots ran."""
    return [(a.launched, a.started, a.ended, a.ranks, a.outcome) for a in backend.attempts
            if a.ended is not None and a.where]


def usage(rows: list[tuple[float, float | None, float, int, str]],
          outages: list[tuple[float, float, int]], slots: int, end: float,
          last_launch: float) -> dict[str, float]:
    """Slot-seconds over [0, end]: available (slots less those out for repair),
    busy (ranks running a trial), start-up (held by a gang starting), lost work
    (busy in attempts that failed), and idle before and after ``last_launch``.

    >>> u = usage([(0.0, 10.0, 50.0, 4, "ok"), (0.0, None, 5.0, 4, "node_lost")],
    ...           [(5.0, 105.0, 4)], slots=8, end=100.0, last_launch=0.0)
    >>> u["available"], u["busy"], u["startup"], u["idle_before_last_launch"]
    (420.0, 160.0, 60.0, 0.0)
    """
    available = slots * end - sum(max(0.0, min(e, end) - s) * n for s, e, n in outages)
    busy = startup = lost = 0.0
    for launched, started, ended, ranks, outcome in rows:
        ran_from = started if started is not None else ended
        startup += (ran_from - launched) * ranks
        busy += (ended - ran_from) * ranks
        if outcome != "ok":
            lost += (ended - ran_from) * ranks
    idle_before = _idle_between(rows, outages, slots, 0.0, last_launch)
    return {"available": available, "busy": busy, "startup": startup, "lost_work": lost,
            "idle": available - busy - startup, "idle_before_last_launch": idle_before,
            "idle_after_last_launch": available - busy - startup - idle_before}


def _idle_between(rows: list[tuple[float, float | None, float, int, str]],
                  outages: list[tuple[float, float, int]], slots: int, t0: float,
                  t1: float) -> float:
    """Slot-seconds in [t0, t1] that were up and held by no gang's attempt."""
    steps: list[tuple[float, int]] = []
    for launched, _, ended, ranks, _ in rows:
        steps += [(launched, ranks), (ended, -ranks)]
    for start, end, n in outages:
        steps += [(start, n), (end, -n)]
    steps.sort()
    idle, held, at = 0.0, 0, t0
    for t, delta in steps:
        if t > at:
            span = min(t, t1) - at
            if span > 0:
                idle += span * max(0, slots - held)
            at = max(at, min(t, t1))
        held += delta
    if t1 > at:
        idle += (t1 - at) * max(0, slots - held)
    return idle


def time_to_fill(rows: list[tuple[float, float | None, float, int, str]], slots: int,
                 share: float = FILL) -> dict[str, float | None]:
    """First virtual time at which ``share`` of the slots were held by gangs, and at
    which they were busy running trials (start-up done); None if never."""
    out: dict[str, float | None] = {}
    for what, begin in (("held", 0), ("busy", 1)):
        steps: list[tuple[float, int]] = []
        for launched, started, ended, ranks, _ in rows:
            first = launched if begin == 0 else started
            if first is not None:
                steps += [(first, ranks), (ended, -ranks)]
        steps.sort(key=lambda s: (s[0], -s[1]))
        level, reached = 0, None
        for t, delta in steps:
            level += delta
            if level >= share * slots:
                reached = t
                break
        out[what] = reached
    return out


def occupancy_curve(rows: list[tuple[float, float | None, float, int, str]], end: float,
                    points: int = 200) -> dict[str, list[float]]:
    """Busy slots at ``points`` evenly spaced virtual times, for a plot: the ranks of
    the attempts running at t (started <= t < ended), by one pass over their starts
    and ends in time order (a sum over every attempt per point took minutes at
    230,000 trials).

    >>> occupancy_curve([(0.0, 1.0, 3.0, 4, "ok"), (0.0, 2.0, 4.0, 2, "ok")], 4.0, 5)["busy"]
    [0, 4, 6, 2, 0]
    """
    grid = [end * i / (points - 1) for i in range(points)]
    steps = sorted([(s, r) for _, s, _, r, _ in rows if s is not None]
                   + [(e, -r) for _, s, e, r, _ in rows if s is not None])
    busy, level, i = [], 0, 0
    for t in grid:
        while i < len(steps) and steps[i][0] <= t:
            level += steps[i][1]
            i += 1
        busy.append(level)
    return {"t_h": [t / 3600 for t in grid], "busy": busy}


def trial_ends(path: Path) -> tuple[int, list[dict[str, Any]]]:
    """How many events the journal holds, and its trials' ends (finished, attempt
    failed, interrupted), parsed: only those lines are read as JSON, found by the
    event's name, which every line carries before its fields."""
    wanted = ("trial_finished", "trial_attempt_failed", "trial_interrupted")
    count, ends = 0, []
    with path.open() as lines:
        for line in lines:
            count += 1
            at = line.find('"event":"') + 9
            if line.startswith(wanted, at):
                event = json.loads(line)
                if event["event"] in wanted:
                    ends.append(event)
    return count, ends


def run_one(workload: Workload, schedule: str, mode: str, args: argparse.Namespace,
            workdir: Path) -> dict[str, Any]:
    """One workload on one schedule: the whole planned ``sweep`` to its last trial,
    or an ``allocation`` of ``--allocation-h`` hours that a larger sweep fills
    until the time limit stops the driver."""
    from nestor.orchestrator.backends import SimulatedBackend, lognormal_trials
    from nestor.orchestrator.backends.stopping import Interrupted
    from nestor.orchestrator.engine.workflow import run_workflow
    from nestor.orchestrator.spec import load_spec_text

    class TimedBackend(SimulatedBackend):
        """Notes when (in real time) the driver asked for each launch."""

        real_launches: list[float]

        def launch(self, launch: Any) -> None:
            self.real_launches.append(time.perf_counter())
            super().launch(launch)

    def startup(shape: Any, rng: random.Random) -> float:
        return rng.uniform(30.0, 90.0)

    allocation = mode == "allocation"
    generations = ALLOCATION_GENERATIONS if allocation else workload.generations
    workflow = load_spec_text(spec_text(workload, schedule, generations))
    backend = TimedBackend(
        args.nodes, SLOTS_PER_NODE, lognormal_trials(workload.median_s, workload.sigma),
        seed=args.seed, startup_s=startup, rank_failure_p=args.rank_failure,
        node_mtbf_s=args.node_mtbf_h * 3600.0, repair_s=args.repair_h * 3600.0,
        time_limit_s=args.allocation_h * 3600.0 if allocation else None)
    backend.real_launches = []
    run_dir = workdir / f"{workload.name}-{schedule}-{mode}"
    _reset_peak_memory()
    cpu0, wall0 = time.process_time(), time.perf_counter()
    try:
        run_workflow(workflow, backend, run_dir, fsync=args.fsync)
    except Interrupted:
        if not allocation:
            raise
    cpu = time.process_time() - cpu0
    wall = time.perf_counter() - wall0
    peak_mib = _peak_memory_mib()
    end = backend.now()
    rows = attempt_rows(backend)
    outages = [(o.start, o.end, SLOTS_PER_NODE) for o in backend.outages]
    last_launch = max(launched for launched, *_ in rows)
    u = usage(rows, outages, backend.slots, end, last_launch)
    fill = time_to_fill(rows, backend.slots)
    planned = sum(workflow.stage(s.name).planned_trials() for s in workload.stages)
    journal_events, ends = trial_ends(run_dir / "journal.jsonl")
    finished = [e for e in ends if e["event"] == "trial_finished"]
    completed = sum(1 for e in finished if e["status"] == "completed")
    failed = sum(1 for e in finished if e["status"] != "completed")
    interrupted = sum(1 for e in ends if e["event"] == "trial_interrupted")
    scheduler_busy = sum(e.get("slot_seconds", 0.0) for e in ends
                         if e["event"] in ("trial_finished", "trial_attempt_failed"))
    s_to_fill = None
    if fill["held"] is not None:  # real seconds the driver took to issue those launches
        n = sum(1 for launched, *_ in rows if launched <= fill["held"])
        s_to_fill = backend.real_launches[n - 1] - wall0 if n else None
    scheduler_cpu = cpu - backend.cpu_s
    events = backend.events_delivered
    outcomes: dict[str, int] = {}
    for *_, outcome in rows:
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
    # Lost: a trial that failed for good, or (a whole sweep) one planned but never
    # completed. Trials cut by the allocation's end are journalled and run on resume.
    lost = failed if allocation else planned - completed
    row = {
        "schedule": schedule, "mode": mode,
        "planned_trials": None if allocation else planned,
        "completed": completed, "failed": failed, "interrupted_at_limit": interrupted,
        "lost": lost, "attempts": len(rows), "outcomes": outcomes,
        "virtual_h": end / 3600, "driver_wall_s": wall, "journal_events": journal_events,
        "slot_seconds": {k: round(v, 1) for k, v in u.items()},
        "utilization": u["busy"] / u["available"],
        "useful_utilization": (u["busy"] - u["lost_work"]) / u["available"],
        "startup_share": u["startup"] / u["available"],
        "idle_share": u["idle"] / u["available"],
        "idle_share_before_last_launch": u["idle_before_last_launch"] / u["available"],
        "idle_share_after_last_launch": u["idle_after_last_launch"] / u["available"],
        "scheduler_counted_busy_share": scheduler_busy / u["available"],
        "time_to_fill_min": {k: None if v is None else v / 60 for k, v in fill.items()},
        "driver_s_to_fill": s_to_fill,
        "node_failures": backend.node_failures,
        "gangs": {"started": backend.gangs_started, "reused": backend.gangs_reused,
                  "evicted": backend.gangs_evicted},
        "events": events,
        "driver_cpu_s": cpu, "simulator_cpu_s": backend.cpu_s, "scheduler_cpu_s": scheduler_cpu,
        "scheduler_cpu_ms_per_event": 1000 * scheduler_cpu / max(events, 1),
        "scheduler_cpu_ms_per_trial": 1000 * scheduler_cpu / max(len(finished), 1),
        "events_per_s": events / wall, "peak_memory_mib": peak_mib,
        "occupancy": occupancy_curve(rows, end),
    }
    print(f"{workload.name:5s} {mode:10s} {schedule:12s} {completed:6d} trials,"
          f" {end / 3600:6.1f} h virtual in {wall:6.1f} s; busy {row['utilization']:.1%},"
          f" start-up {row['startup_share']:.1%}, idle before/after last launch"
          f" {row['idle_share_before_last_launch']:.1%}/{row['idle_share_after_last_launch']:.1%};"
          f" {backend.node_failures} node failures; lost {lost};"
          f" {row['scheduler_cpu_ms_per_event']:.3f} ms CPU/event;"
          f" {row['events_per_s']:,.0f} events/s, peak {peak_mib or 0:,.0f} MiB", flush=True)
    return row


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="a quarter of the generations and hours")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--node-mtbf-h", type=float, default=2000.0,
                   help="mean time between failures of one node, hours")
    p.add_argument("--repair-h", type=float, default=4.0, help="hours a failed node is out")
    p.add_argument("--rank-failure", type=float, default=0.005,
                   help="share of attempts in which a rank fails")
    p.add_argument("--allocation-h", type=float, default=None,
                   help="hours of the allocation in mode allocation (default 48, quick 12)")
    p.add_argument("--fsync", action="store_true",
                   help="fsync the journal as a real run does (in groups, beside the loop)")
    p.add_argument("--nodes", type=int, default=NODES,
                   help=f"nodes of {SLOTS_PER_NODE} slots (default {NODES}); populations grow"
                        " with them")
    p.add_argument("--workloads", default="seed,mixed")
    p.add_argument("--modes", default="sweep,allocation")
    p.add_argument("--out", default="simulate", help="name of bench/results/NAME.json")
    p.add_argument("--keep", type=Path, default=None, metavar="DIR",
                   help="write the run directories into DIR and keep them (nestor status,"
                        " results and resume can read them); default: a temporary folder")
    args = p.parse_args(argv)
    if args.allocation_h is None:
        args.allocation_h = 12.0 if args.quick else 48.0
    import logging

    quiet = logging.getLogger("orchestrator")
    level = quiet.level
    quiet.setLevel(logging.ERROR)  # retries are counted, not told
    try:
        return _run(args)
    finally:
        quiet.setLevel(level)  # main() is called in tests: leave the process as it was


def _run(args: argparse.Namespace) -> int:
    wanted, modes = args.workloads.split(","), args.modes.split(",")
    start = machine.describe()
    result: dict[str, Any] = {
        "machine": start, "nodes": args.nodes, "slots_per_node": SLOTS_PER_NODE,
        "slots": args.nodes * SLOTS_PER_NODE, "quick": args.quick, "seed": args.seed,
        "node_mtbf_h": args.node_mtbf_h, "repair_h": args.repair_h,
        "rank_failure": args.rank_failure, "fsync": args.fsync, "startup_s": [30.0, 90.0],
        "allocation_h": args.allocation_h, "fill_share": FILL, "retries": RETRIES,
        "workloads": {},
    }
    with contextlib.ExitStack() as stack:
        tmp = args.keep or stack.enter_context(tempfile.TemporaryDirectory(prefix="nestor-sim-"))
        for workload in workloads(args.quick):
            if workload.name not in wanted:
                continue
            workload = scaled(workload, args.nodes)
            result["workloads"][workload.name] = {
                "note": workload.note, "generations": workload.generations,
                "median_min": workload.median_s / 60, "sigma": workload.sigma,
                "stages": [f"{s.name}: {s.data}x{s.model}, population {s.population}"
                           for s in workload.stages],
                "runs": [run_one(workload, schedule, mode, args, Path(tmp))
                         for mode in modes for schedule in ("generational", "async")],
            }
    result["machine"] = machine.finish(start)
    print(f"written: {write_result(args.out, result)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
