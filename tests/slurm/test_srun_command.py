"""A multi-rank command trainer under ``srun``, in a workflow that ``nestor submit`` runs.

Inside the job, each trial's gang holds 2 slots and its rank 0 runs
``srun --overlap -n {np} python sum.py`` (``--overlap``: the job's Ray steps
hold the allocation's CPUs). Slurm starts the ranks; they meet over Gloo at
the ``MASTER_ADDR``/``MASTER_PORT`` nestor gave the launcher (srun passes
the environment on), each adds ``rank + 1``, and rank 0 prints the sum: 3.0
only when both ranks took part. Each rank also prints its Slurm node: on a
2-node job srun puts one task on each.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from _slurm_helpers import nestor, node_count, submitted_id, wait_job
from rank_helpers import command_sweep_spec

pytestmark = pytest.mark.slow

SUM = """
import os, sys
import torch
import torch.distributed as dist

rank, size = int(os.environ["SLURM_PROCID"]), int(os.environ["SLURM_NTASKS"])
dist.init_process_group("gloo", rank=rank, world_size=size)
total = torch.tensor([float(rank + 1)])
dist.all_reduce(total)
print(f"rank {rank} of {size} on {os.environ.get('SLURMD_NODENAME')}", flush=True)
if rank == 0:
    x = float(sys.argv[1].split("=")[1])
    print(f"FoM: {total.item() + x}", flush=True)
dist.destroy_process_group()
"""


def test_srun_starts_a_command_trainers_ranks_in_a_submitted_sweep(
        tmp_path: Path, local_slurm: dict[str, str]) -> None:
    script = tmp_path / "sum.py"
    script.write_text(SUM)
    command = ["srun", "--overlap", "-n", "{np}", sys.executable, str(script)]
    spec = tmp_path / "spec.yaml"
    spec.write_text(command_sweep_spec("srunsweep", command))
    run_dir = tmp_path / "run"
    nodes = min(node_count(local_slurm), 2)
    job = submitted_id(nestor("submit", str(spec), "--nodes", str(nodes), "--time", "10:00",
                              "--run-dir", str(run_dir), env=local_slurm))
    state = wait_job(job, local_slurm, timeout=400)
    output = (run_dir / f"slurm-{job}.out").read_text()
    assert state == "COMPLETED", output[-4000:]
    events = [json.loads(line) for line in (run_dir / "journal.jsonl").read_text().splitlines()]
    started = [e for e in events if e["event"] == "trial_started"]
    finished = [e for e in events if e["event"] == "trial_finished"]
    assert {e["shape"] for e in started} == {"2x1"}
    # 1 + 2 from the two Slurm tasks' allreduce, plus the trial's own x
    assert sorted(e["value"] for e in finished) == [13.0, 23.0], finished
    for event in finished:
        out = Path(event["logs"]["stdout"]).read_text()
        assert "rank 0 of 2" in out and "rank 1 of 2" in out, out
        if nodes == 2:  # srun put one task on each of the job's Slurm nodes
            assert "on nestor1" in out and "on nestor2" in out, out
