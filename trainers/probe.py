"""Time a few training steps of a built-in trainer at one dp x mp shape, in every rank.

The planner (orchestrator/planning) measures instead of guessing: it starts
this module as real Horovod ranks, once per candidate shape::

    horovodrun -np 2 -H localhost:2 --gloo python -m trainers.probe JOB.json OUT.json

and fits its cost model to what comes back. A step is timed in its parts,
because the parts scale differently with the shape:

- ``compute_s``: forward, backward and the optimizer update of this rank's
  share of the batch, without communication (scales with the per-rank batch
  and, for the split layers, with 1/mp);
- ``gather_s``: the model-parallel collectives inside forward and backward
  (an allgather of each split layer's output and an allreduce of its input's
  gradient), timed around the real backend calls;
- ``allreduce_s``: the data-parallel gradient average, one fused
  ``grouped_allreduce`` as Horovod's tensor fusion would issue it. It is not
  overlapped with backward here, so the sum of the parts is the step time of
  a rank with no spare core to overlap on (one slot = one core).

Besides the steps, a micro-benchmark of allreduce and allgather at a few
message sizes over all ranks gives the points the alpha-beta-gamma
collective model is fitted to. Peak memory: the rise of the rank's peak
resident set over what it held before the model was built (CPU), or
``torch.cuda.max_memory_allocated`` on a GPU.

Rank 0 writes one JSON object (the slowest rank's time for each part), plain
data so the planner can cache and journal it.
"""

from __future__ import annotations

import json
import os
import resource
import statistics
import sys
import time
from pathlib import Path
from typing import Any

DEFAULT_COMM_BYTES = (4_096, 65_536, 524_288, 2_097_152, 8_388_608)


class _TimedComm:
    """A backend's collectives with its allgather and allreduce calls timed.

    The split layers call collectives through ``Parallel.comm``; swapping in
    this wrapper measures exactly those calls (the real ones run), and
    nothing else the rank does.
    """

    def __init__(self, comm: Any) -> None:
        self._comm = comm
        self.seconds = 0.0
        self.calls = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._comm, name)

    def _timed(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        tick = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            self.seconds += time.perf_counter() - tick
            self.calls += 1

    def allgather(self, *args: Any, **kwargs: Any) -> Any:
        return self._timed(self._comm.allgather, *args, **kwargs)

    def allreduce_sum(self, *args: Any, **kwargs: Any) -> Any:
        return self._timed(self._comm.allreduce_sum, *args, **kwargs)


def _rss_bytes() -> int:
    """Peak resident set of this process so far (Linux reports KiB)."""
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


def _comm_bench(comm: Any, sizes: tuple[int, ...], reps: int) -> list[dict[str, Any]]:
    """Median seconds of an allreduce and an allgather of each size over all ranks."""
    import torch

    size = comm.size()
    everyone = comm.group(tuple(range(size)))
    points: list[dict[str, Any]] = []
    for nbytes in sizes:
        numel = max(1, nbytes // 4)
        full = torch.ones(numel, dtype=torch.float32)
        share = torch.ones(max(1, numel // size), dtype=torch.float32)
        for kind, fn, tensor in (("allreduce", comm.allreduce_sum, full),
                                 ("allgather", comm.allgather, share)):
            times = []
            for rep in range(reps + 2):
                tick = time.perf_counter()
                fn(tensor, everyone, f"probe.{kind}.{nbytes}")
                if rep >= 2:  # the first calls negotiate the tensor name
                    times.append(time.perf_counter() - tick)
            moved = numel * 4 if kind == "allreduce" else share.numel() * 4 * size
            points.append({"kind": kind, "ranks": size, "bytes": moved,
                           "seconds": statistics.median(times)})
    return points


def run_probe(job: dict[str, Any]) -> dict[str, Any] | None:
    """Run the job in this rank; rank 0 returns the measurements, others None.

    ``job``: ``trainer``, ``settings``, ``config`` (as for a trial), ``dp``,
    ``mp``, ``batches`` (per-rank batch sizes to time), ``steps`` (timed
    steps per batch size, after ``warmup``), ``comm_bytes`` and ``comm_reps``.
    """
    import torch
    import torch.nn.functional as F

    from nestor.trainers.builtin import device_for, make_optimizer
    from nestor.trainers.catalog import resolve_options
    from nestor.trainers.data import splits_of
    from nestor.trainers.models import build_model, make_arch, sharded_layers
    from nestor.trainers.parallel import setup

    trainer = job["trainer"]
    dp, mp = int(job["dp"]), int(job["mp"])
    options = resolve_options(trainer, job.get("settings", {}), job.get("config", {}))
    par = setup(dp, mp, job.get("backend"))
    device = device_for(par)
    splits = splits_of(options)
    rss_before = _rss_bytes()
    timed = None
    comm = par.comm
    if comm is not None and mp > 1:
        timed = _TimedComm(comm)
        par.comm = timed  # type: ignore[assignment]  # the split layers' collectives, timed
    arch = make_arch(trainer, options, splits.image_shape, splits.num_classes)
    model = build_model(arch, par, seed=options["seed"]).to(device)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = make_optimizer(options, params, options["lr"])
    if comm is not None and dp > 1:
        _ = comm.allreduce_sum(torch.zeros(1), None, "probe.warm")
    split_names = set(sharded_layers(model))
    split_params = sum(p.numel() for n, p in model.named_parameters() if n in split_names)

    train_x = torch.from_numpy(splits.train.x)
    train_y = torch.from_numpy(splits.train.y)
    rows: list[dict[str, Any]] = []
    for batch in [int(b) for b in job["batches"]]:
        idx = torch.arange(batch) % len(train_y)
        xb, yb = train_x[idx].to(device), train_y[idx].to(device)
        parts: dict[str, list[float]] = {"compute_s": [], "gather_s": [], "allreduce_s": [],
                                         "step_s": []}
        for step in range(int(job.get("warmup", 2)) + int(job["steps"])):
            if timed is not None:
                timed.seconds = 0.0
            tick = time.perf_counter()
            loss = F.cross_entropy(model(xb), yb)
            optimizer.zero_grad()
            loss.backward()
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            backward_done = time.perf_counter()
            reduced = 0.0
            if dp > 1:
                grads = [p.grad for p in params]
                averaged = comm.allreduce_mean(grads, par.dp_set, "probe.grads")
                for p, g in zip(params, averaged, strict=True):
                    p.grad.copy_(g)
                reduced = time.perf_counter() - backward_done
            update_start = time.perf_counter()
            optimizer.step()
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            done = time.perf_counter()
            gathered = timed.seconds if timed is not None else 0.0
            if step >= int(job.get("warmup", 2)):
                parts["gather_s"].append(gathered)
                parts["allreduce_s"].append(reduced)
                parts["compute_s"].append(
                    (backward_done - tick - gathered) + (done - update_start))
                parts["step_s"].append(done - tick)
        if device.type == "cuda":
            peak = int(torch.cuda.max_memory_allocated(device))
        else:
            peak = max(0, _rss_bytes() - rss_before)
        row = {k: statistics.median(v) for k, v in parts.items()}
        row.update({"batch": batch, "peak_memory_bytes": peak})
        rows.append(row)

    points: list[dict[str, Any]] = []
    if comm is not None and par.size > 1:
        points = _comm_bench(comm, tuple(job.get("comm_bytes", DEFAULT_COMM_BYTES)),
                             int(job.get("comm_reps", 10)))

    mine = {"rows": rows, "comm": points}
    everyone = (comm.allgather_object(mine, "probe.results")
                if comm is not None and par.size > 1 else [mine])
    if par.rank != 0:
        return None
    # The slowest rank sets the pace of a synchronous step.
    slowest = []
    for i, row in enumerate(rows):
        merged = dict(row)
        for key in ("compute_s", "gather_s", "allreduce_s", "step_s", "peak_memory_bytes"):
            merged[key] = max(r["rows"][i][key] for r in everyone)
        slowest.append(merged)
    comm_max = [dict(p, seconds=max(r["comm"][i]["seconds"] for r in everyone))
                for i, p in enumerate(points)]
    return {
        "dp": dp, "mp": mp, "device": device.type, "threads": torch.get_num_threads(),
        "rows": slowest, "comm": comm_max,
        "params_rank": sum(p.numel() for p in model.parameters()),
        "split_params_rank": split_params,
        "train_samples": len(splits.train),
    }


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 2:
        print("usage: python -m nestor.trainers.probe JOB.json OUT.json", file=sys.stderr)
        return 2
    job = json.loads(Path(args[0]).read_text())
    result = run_probe(job)
    if result is not None:
        tmp = Path(args[1]).with_suffix(".tmp")
        tmp.write_text(json.dumps(result))
        os.replace(tmp, args[1])
    return 0


if __name__ == "__main__":
    from nestor.trainers.parallel import exit_process

    exit_process(main())
