"""Durable journal events per second with fsync on: group commit against one fsync each.

Three ways of writing the same events, on this machine's disk, one after another:

- ``per-event``: every append waits for its own fsync (the journal before group
  commit: at most one event per fsync);
- ``stream``: one writer (the driver's loop) appends and never waits; an event
  counts once the journal's writer thread says it is durable;
- ``callers``: ``--threads`` writers each append and wait for their own event
  to be durable before the next (as attempt threads wait on a launch's gate).

The figure is events made durable per second of wall time, first append to
last acknowledgement, with the events per fsync. Run by
``python -m bench.journal_bench [--events 20000]``; writes bench/results/journal.json.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

# A trial_finished event is a few hundred bytes: metrics, history, logs.
PAD = "x" * 300


def _timed(path: Path, write: Any, events: int) -> dict[str, Any]:
    from nestor.orchestrator.journal.journal import Journal

    acked = 0

    def ack(_: dict[str, Any]) -> None:
        nonlocal acked
        acked += 1

    journal = Journal(path, on_durable=ack)
    cpu0, began = time.process_time(), time.perf_counter()
    write(journal, events)
    journal.sync()
    wall = time.perf_counter() - began
    cpu = time.process_time() - cpu0
    fsyncs = journal.fsyncs
    journal.close()
    assert acked == events, f"{acked} of {events} events acknowledged"
    return {"events": events, "wall_s": round(wall, 3),
            "durable_events_per_s": round(events / wall), "fsyncs": fsyncs,
            "events_per_fsync": round(events / max(fsyncs, 1), 1),
            "cpu_ms_per_event": round(1000 * cpu / events, 4)}


def per_event(journal: Any, events: int) -> None:
    for i in range(events):
        journal.append("trial_finished", i=i, pad=PAD)
        journal.sync()


def stream(journal: Any, events: int) -> None:
    for i in range(events):
        journal.append("trial_finished", i=i, pad=PAD)


def callers(threads: int) -> Any:
    def write(journal: Any, events: int) -> None:
        def one(start: int) -> None:
            for i in range(start, events, threads):
                record = journal.append("trial_finished", i=i, pad=PAD)
                journal.wait(record["seq"] + 1)

        workers = [threading.Thread(target=one, args=(n,)) for n in range(threads)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
    return write


def main(argv: list[str] | None = None) -> int:
    from bench import machine

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--dir", type=Path, default=None,
                        help="where to write the journals (default: a temporary folder"
                             " beside the repository, on the disk runs use)")
    args = parser.parse_args(argv)
    start = machine.describe()
    base = Path(tempfile.mkdtemp(prefix="journal-bench-", dir=args.dir or machine.ROOT))
    modes = {"per-event": per_event, "stream": stream, f"callers x{args.threads}":
             callers(args.threads)}
    rows = {}
    try:
        for name, write in modes.items():
            # One fsync per event is slow: a tenth of the events says as much.
            n = max(args.events // 10, 100) if name == "per-event" else args.events
            rows[name] = _timed(base / f"{name.split()[0]}.jsonl", write, n)
            row = rows[name]
            print(f"{name:>12}: {row['durable_events_per_s']:>7,} durable events/s,"
                  f" {row['events_per_fsync']:>6} events/fsync, {row['cpu_ms_per_event']} ms"
                  f" CPU/event ({row['events']} events, {row['wall_s']} s)", flush=True)
    finally:
        for file in base.iterdir():
            file.unlink()
        base.rmdir()
    result = {"command": " ".join(["python -m bench.journal_bench", *(argv or sys.argv[1:])]),
              "modes": rows, "machine": machine.finish(start), "pid": os.getpid()}
    print("wrote", machine.write_result("journal", result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
