"""A journal of a million events: how long resume, status and results take on it.

Reads a run directory that ``python -m bench.simulate --nodes 4096 --keep DIR``
left (a simulated sweep at 32,768 slots journals about a million events) and
times, each in a fresh process, with its peak memory (``/usr/bin/time``):

- ``status``: ``nestor status RUN`` on the finished run;
- ``results``: ``nestor results RUN`` on the finished run;
- ``resume``: a driver killed after ``--cut`` events (the journal's first
  ``--cut`` lines, in a copy, without the searchers' snapshots, so the whole
  search log is replayed: the worst case) made ready to schedule again: the
  journal read, every stage's runner built and restored, as ``nestor resume``
  does before its first launch (on a simulated backend: Ray's start is not the
  journal's cost).

    python -m bench.million_events /tmp/runs/mixed-generational-sweep \\
        --workload mixed --schedule generational --nodes 4096

Writes bench/results/million-events.json.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]  # where `import bench` works
READY = """
import sys, time
began = time.perf_counter()
from pathlib import Path
from bench import simulate
from orchestrator.backends import SimulatedBackend, lognormal_trials
from orchestrator.journal.journal import Journal, read_events
from orchestrator.spec import load_spec_text
from orchestrator.engine.workflow import StageScheduler

run_dir, name, schedule, nodes = Path(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4])
workload = simulate.scaled(next(w for w in simulate.workloads(False) if w.name == name), nodes)
workflow = load_spec_text(simulate.spec_text(workload, schedule, workload.generations))
events = read_events(run_dir / "journal.jsonl")
read = time.perf_counter() - began
backend = SimulatedBackend(nodes, simulate.SLOTS_PER_NODE, lognormal_trials(60.0, 0.5))
with Journal(run_dir / "journal.jsonl") as journal:
    scheduler = StageScheduler(workflow, run_dir=run_dir, backend=backend, journal=journal,
                               events=events, on_progress=None)
    scheduler._start_ready_stages()
    pending = sum(len(r.queue) + len(r.searcher.pending) for r in scheduler.active.values())
print(f"events {len(events)} read_s {read:.2f} ready_s {time.perf_counter() - began:.2f}"
      f" stages {len(scheduler.active)} requeued {pending}")
"""


def timed(argv: list[str], cwd: Path) -> dict[str, Any]:
    """Run ``argv``; its wall seconds and peak resident memory (GNU time)."""
    done = subprocess.run(["/usr/bin/time", "-f", "TIME %e %M", *argv], capture_output=True,
                          text=True, cwd=cwd, check=False)
    line = next(x for x in done.stderr.splitlines() if x.startswith("TIME "))
    _, wall, kib = line.split()
    if done.returncode != 0:
        raise RuntimeError(f"{argv} failed: {done.stderr[-2000:]}")
    return {"wall_s": float(wall), "peak_mib": round(int(kib) / 1024, 1),
            "out": done.stdout.strip().splitlines()[-1:]}


def main(argv: list[str] | None = None) -> int:
    from bench import machine

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("run_dir", type=Path)
    p.add_argument("--workload", default="mixed")
    p.add_argument("--schedule", default="generational")
    p.add_argument("--nodes", type=int, default=4096)
    p.add_argument("--cut", type=int, default=None,
                   help="events the killed driver had journalled (default: all but the last"
                        " tenth)")
    args = p.parse_args(argv)
    start = machine.describe()
    journal = args.run_dir / "journal.jsonl"
    with journal.open("rb") as handle:
        total = sum(1 for _ in handle)
    nestor = str(Path(sys.executable).parent / "nestor")
    result: dict[str, Any] = {"run_dir": str(args.run_dir), "events": total,
                              "journal_mib": round(journal.stat().st_size / 2**20, 1)}
    print(f"{total:,} events, {result['journal_mib']} MiB", flush=True)
    for name in ("status", "results"):
        result[name] = timed([nestor, name, str(args.run_dir)], REPO)
        print(f"{name}: {result[name]['wall_s']} s, peak {result[name]['peak_mib']} MiB",
              flush=True)
    cut = args.cut or total * 9 // 10
    with tempfile.TemporaryDirectory(prefix="million-", dir=args.run_dir.parent) as tmp:
        copy = Path(tmp) / "run"
        copy.mkdir()
        with journal.open("rb") as source, (copy / "journal.jsonl").open("wb") as target:
            for number, line in enumerate(source):
                if number == cut:
                    break
                target.write(line)
        (copy / "searcher").mkdir()  # no snapshot: the whole search log is replayed
        result["resume"] = {"cut": cut, **timed(
            [sys.executable, "-c", READY, str(copy), args.workload, args.schedule,
             str(args.nodes)], REPO)}
        shutil.rmtree(copy)
    print(f"resume after {cut:,} events: ready in {result['resume']['wall_s']} s, peak"
          f" {result['resume']['peak_mib']} MiB ({result['resume']['out']})", flush=True)
    result["command"] = " ".join(["python -m bench.million_events", *(argv or sys.argv[1:])])
    result["machine"] = machine.finish(start)
    print("wrote", machine.write_result("million-events", result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
