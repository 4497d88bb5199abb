"""A journal of a million events: how long resume, status and results take on it.

Reads run directories that ``python -m bench.simulate --nodes 4096 --keep DIR``
left, or that ``--make GENERATIONS`` runs first (the mixed sweep at 2,048 nodes
for 68 generations journals 523,802 events; at 4,096 nodes for 60, 924,309;
at 4,096 for 68, about 1.05 million: give two sizes to see how each figure
grows with the journal), and times, each in a fresh process, with its peak
memory (``/usr/bin/time``) and the load:

- ``status_first``: ``nestor status RUN`` on the finished run as its driver
  left it: the driver kept the stages' fold snapshot (``journal.kept``), so the
  first look folds only what came after its last save (``driver_snapshot``: the
  offset it covers and the journal's size);
- ``status_no_snapshot``: with that snapshot deleted (a run from before the
  driver kept one: the whole journal folded, the snapshot left), and ``status``
  the same again (the snapshot read, nothing left to fold);
- ``results``: ``nestor results RUN`` on the finished run (results.json's
  summaries, through its index; the trials only where a table reads them);
- ``plots``: the numbers behind the plots: the journal's whole fold (a record
  per trial and attempt), every attempt laid on the slots, each stage's
  best-so-far curve;
- ``resume``: a killed driver's run made ready to schedule again: the journal
  read, every stage's runner built and restored, as ``nestor resume`` does
  before its first launch, its fold keeper started (on a simulated backend:
  Ray's start is not the journal's cost). With ``--live DIR``, a copy of the run
  taken while its driver ran (its searchers' and fold snapshots as the driver
  left them; ``status_killed``: the first status on it); else the journal's first
  ``--cut`` lines with no snapshot, so the whole search log is replayed (the
  worst case). The process ends once ready (its heap's teardown is not timed); it
  prints its CPU seconds then and how many of the searchers' log entries their
  snapshots covered (a genetic search's internals: those entries only fill its book).

    python -m bench.million_events /tmp/half/mixed-generational-sweep \\
        /tmp/full/mixed-generational-sweep --nodes 2048 4096 --make 68
    python -m bench.million_events HALF/mixed-generational-sweep \\
        W28/mixed-generational-sweep --nodes 2048 4096 --generations 68 60

    python -m bench.million_events W28A/full/mixed-generational-sweep --nodes 4096 \\
        --generations 70 --live W28A/live/run

Writes bench/results/million-events.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]  # where `import bench` works
READY = """
import os, sys, time
# The events the resume reads (its check), counted before the clock starts: newlines, in C.
with open(sys.argv[1] + "/journal.jsonl", "rb") as journal:
    count = sum(block.count(b"\\n") for block in iter(lambda: journal.read(1 << 24), b""))
began = time.perf_counter()
from pathlib import Path
from bench import simulate
from nestor.orchestrator.backends import SimulatedBackend, lognormal_trials
from nestor.orchestrator.engine.history import JournalSoFar
from nestor.orchestrator.journal.journal import Journal
from nestor.orchestrator.journal.kept import FoldKeeper
from nestor.orchestrator.spec import load_spec_text
from nestor.orchestrator.engine.workflow import StageScheduler

run_dir, name, schedule, nodes = Path(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4])
workload = simulate.scaled(next(w for w in simulate.workloads(False) if w.name == name), nodes)
generations = int(sys.argv[5]) if sys.argv[5] != "-" else workload.generations
workflow = load_spec_text(simulate.spec_text(workload, schedule, generations))
events = JournalSoFar.read(run_dir / "journal.jsonl")
read = time.perf_counter() - began
backend = SimulatedBackend(nodes, simulate.SLOTS_PER_NODE, lognormal_trials(60.0, 0.5))
keeper = FoldKeeper(run_dir)  # as run_workflow: takes the fold the read made
with Journal(run_dir / "journal.jsonl", on_written=keeper.written) as journal:
    keeper.start(journal.size, events.heads)  # as run_workflow: the read's fold handed on
    scheduler = StageScheduler(workflow, run_dir=run_dir, backend=backend, journal=journal,
                               events=events, on_progress=None)
    scheduler._start_ready_stages()
    pending = sum(len(r.queue) + len(r.searcher.pending) for r in scheduler.active.values())
    ready, cpu = time.perf_counter() - began, time.process_time()
    logs = [r.search_log for r in scheduler.active.values()]
    print(f"events {count} read_s {read:.2f} ready_s {ready:.2f} cpu_s {cpu:.2f}"
          f" stages {len(scheduler.active)} requeued {pending} search_log"
          f" {sum(x.logged for x in logs)} snapshot_covers {sum(x.snapshot_at for x in logs)}",
          flush=True)
    # Ready: the driver would go on scheduling here. Its heap's teardown at exit (seconds
    # for a resumed sweep's millions of objects) is no part of that, so it is skipped.
    os._exit(0)
"""

PLOTS = """
import sys, time
from pathlib import Path
from nestor.orchestrator.journal.state import RunState
from nestor.orchestrator.projections.plots import best_so_far, slot_intervals

began = time.perf_counter()
state = RunState.of(Path(sys.argv[1]), save=False)
folded = time.perf_counter()
intervals, slots = slot_intervals(state)
laid = time.perf_counter()
curves = {name: best_so_far(state, name, "max") for name in state.stages}
print(f"fold_s {folded - began:.2f} slot_intervals_s {laid - folded:.2f}"
      f" best_so_far_s {time.perf_counter() - laid:.2f} attempts {len(intervals)} slots {slots}")
"""


def timed(argv: list[str], cwd: Path) -> dict[str, Any]:
    """Run ``argv``; its wall and CPU seconds and peak resident memory (GNU time), and
    the load average (1 min) as it started: the machine is shared."""
    load = round(os.getloadavg()[0], 1)
    done = subprocess.run(["/usr/bin/time", "-f", "TIME %e %M %U %S", *argv],
                          capture_output=True, text=True, cwd=cwd, check=False)
    line = next(x for x in done.stderr.splitlines() if x.startswith("TIME "))
    _, wall, kib, user, system = line.split()
    if done.returncode != 0:
        raise RuntimeError(f"{argv} failed: {done.stderr[-2000:]}")
    # CPU seconds too: on a machine shared at a load of 30, wall time is mostly waiting
    return {"wall_s": float(wall), "cpu_s": round(float(user) + float(system), 2),
            "peak_mib": round(int(kib) / 1024, 1),
            "out": done.stdout.strip().splitlines()[-1:], "load": load}


def make(keep: Path, workload: str, schedule: str, nodes: int, generations: int,
         fsync: bool) -> Path:
    """Run the simulated sweep whose journal is measured: ``workload`` at ``nodes``
    nodes for ``generations`` generations (bench.simulate's workloads, cluster and
    failures), its run directory kept in ``keep``. Returns that directory."""
    from dataclasses import replace

    from bench import simulate

    chosen = next(w for w in simulate.workloads(False) if w.name == workload)
    chosen = replace(simulate.scaled(chosen, nodes), generations=generations)
    args = argparse.Namespace(nodes=nodes, seed=0, rank_failure=0.005, node_mtbf_h=2000.0,
                              repair_h=4.0, allocation_h=None, fsync=fsync)
    keep.mkdir(parents=True, exist_ok=True)
    simulate.run_one(chosen, schedule, "sweep", args, keep)
    return keep / f"{workload}-{schedule}-sweep"


def measure(run_dir: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Every figure of one run directory (one journal size)."""
    journal = run_dir / "journal.jsonl"
    with journal.open("rb") as handle:
        total = sum(block.count(b"\n") for block in iter(lambda: handle.read(1 << 24), b""))
    nestor = str(Path(sys.executable).parent / "nestor")
    result: dict[str, Any] = {"run_dir": str(run_dir), "events": total,
                              "journal_mib": round(journal.stat().st_size / 2**20, 1)}
    print(f"{run_dir}: {total:,} events, {result['journal_mib']} MiB", flush=True)
    (run_dir / "journal.fold.json").unlink(missing_ok=True)  # a reader's, never the driver's
    stages = run_dir / "journal.fold-stages.json"  # the driver's, as it left it
    if stages.exists():
        kept = json.loads(stages.read_bytes())
        result["driver_snapshot"] = {"offset": kept["offset"], "journal_bytes":
                                     journal.stat().st_size}
    # status: the first look, from the snapshot the driver kept; then with no snapshot
    # (the whole journal folded: a run from before the driver kept one); then again.
    # results reads results.json's summaries (its index), not the journal.
    result["status_first"] = timed([nestor, "status", str(run_dir)], REPO)
    stages.unlink(missing_ok=True)
    for name, argv in (("status_no_snapshot", ["status"]), ("status", ["status"]),
                       ("results", ["results"])):
        result[name] = timed([nestor, *argv, str(run_dir)], REPO)
    for name in ("status_first", "status_no_snapshot", "status", "results"):
        print(f"{name}: {result[name]['wall_s']} s, peak {result[name]['peak_mib']} MiB"
              f" (load {result[name]['load']})", flush=True)
    # the plots' numbers: the whole fold (a record per trial and attempt), every attempt
    # laid on the slots, each stage's best-so-far curve
    result["plots"] = timed([sys.executable, "-c", PLOTS, str(run_dir)], REPO)
    print(f"plots: {result['plots']['wall_s']} s, peak {result['plots']['peak_mib']} MiB"
          f" ({result['plots']['out']})", flush=True)
    with tempfile.TemporaryDirectory(prefix="million-", dir=run_dir.parent) as tmp:
        copy = Path(tmp) / "run"
        if args.live is not None:  # a copy taken while the driver ran: a killed driver's
            shutil.copytree(args.live, copy)
            with (copy / "journal.jsonl").open("rb") as handle:
                cut = sum(block.count(b"\n")
                          for block in iter(lambda: handle.read(1 << 24), b""))
            # status on it: the first look at a killed driver's run (its last snapshot)
            result["status_killed"] = {"events": cut, **timed([nestor, "status", str(copy)],
                                                              REPO)}
            print(f"status of the driver killed after {cut:,} events:"
                  f" {result['status_killed']['wall_s']} s", flush=True)
            (copy / "journal.fold-stages.json").unlink(missing_ok=True)  # as resume finds it
            if (args.live / "journal.fold-stages.json").exists():
                shutil.copy(args.live / "journal.fold-stages.json", copy)
        else:  # the journal's first --cut lines, with no snapshot at all: the worst case
            cut = args.cut or total * 9 // 10
            copy.mkdir()
            with journal.open("rb") as source, (copy / "journal.jsonl").open("wb") as target:
                for number, line in enumerate(source):
                    if number == cut:
                        break
                    target.write(line)
            (copy / "searcher").mkdir()  # no snapshot: the whole search log is replayed
        result["resume"] = {"cut": cut, "live": args.live is not None, **timed(
            [sys.executable, "-c", READY, str(copy), args.workload, args.schedule,
             str(args.nodes), str(args.generations or "-")], REPO)}
        print(f"resume after {cut:,} events: ready in {result['resume']['wall_s']} s, peak"
              f" {result['resume']['peak_mib']} MiB (load {result['resume']['load']},"
              f" {result['resume']['out']})", flush=True)
        shutil.rmtree(copy)
    return result


def main(argv: list[str] | None = None) -> int:
    from bench import machine

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("run_dirs", type=Path, nargs="+", metavar="RUN_DIR",
                   help="kept simulated runs, smallest first: the figures of each, the"
                        " largest's also at the top of the result")
    p.add_argument("--workload", default="mixed")
    p.add_argument("--schedule", default="generational")
    p.add_argument("--nodes", type=int, nargs="+", default=[4096],
                   help="the nodes each run had (one for all, or one per run)")
    p.add_argument("--cut", type=int, default=None,
                   help="events the killed driver had journalled (default: all but the last"
                        " tenth)")
    p.add_argument("--live", type=Path, default=None, metavar="DIR",
                   help="a copy of the (largest) run taken while its driver ran (searcher/ and"
                        " journal.fold-stages.json copied before journal.jsonl): resume and"
                        " status are timed on it, as a killed driver left it (default: the"
                        " journal cut at --cut, with no snapshot: the worst case)")
    p.add_argument("--make", type=int, default=None, metavar="GENERATIONS",
                   help="first run each simulated sweep (this many generations, fsync on) into"
                        " its RUN_DIR's parent; RUN_DIR must then end in"
                        " WORKLOAD-SCHEDULE-sweep")
    p.add_argument("--generations", type=int, nargs="+", default=None,
                   help="the generations each run's spec had (default: the workload's, or"
                        " --make's)")
    args = p.parse_args(argv)
    start = machine.describe()
    nodes = args.nodes * len(args.run_dirs) if len(args.nodes) == 1 else args.nodes
    generations = args.generations or [args.make]
    generations = generations * len(args.run_dirs) if len(generations) == 1 else generations
    sizes = []
    for run_dir, count, planned in zip(args.run_dirs, nodes, generations, strict=True):
        if args.make is not None:
            made = make(run_dir.parent, args.workload, args.schedule, count, args.make,
                        fsync=True)
            if made != run_dir:
                raise SystemExit(f"RUN_DIR must be {made} for --make, but got {run_dir}")
        last = run_dir == args.run_dirs[-1]
        sizes.append(measure(run_dir, argparse.Namespace(**{
            **vars(args), "nodes": count, "generations": planned,
            "live": args.live if last else None})))
    result: dict[str, Any] = {**sizes[-1], "sizes": sizes,
                              "goals": {"resume_s": 60, "status_s": 2, "results_s": 10,
                                        "peak_mib": 4096}}
    if len(sizes) > 1:  # each figure's growth against the events' growth
        small, large = sizes[0], sizes[-1]
        result["growth"] = {"events": round(large["events"] / small["events"], 2), **{
            f"{name}_{what}": round(large[name][what] / max(small[name][what], 1e-9), 2)
            for name in ("status_first", "status_no_snapshot", "status", "results", "resume",
                         "plots")
            for what in ("wall_s", "peak_mib")}}
    result["command"] = " ".join(["python -m bench.million_events", *(argv or sys.argv[1:])])
    result["machine"] = machine.finish(start)
    print("wrote", machine.write_result("million-events", result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
