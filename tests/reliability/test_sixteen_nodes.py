"""Model-parallel groups stay on one node on 16 real Ray nodes, three of them lost.

A helper process starts ``ray.cluster_utils.Cluster``: a head with no CPUs and
16 worker nodes of 3 CPUs (each its own raylet, with a ``nodeN`` resource).
``nestor run --address`` joins it and runs a sweep of dp 2 x mp 2 trials; a
model-parallel group (2 ranks) fits a node once, so every gang spans two
nodes. At three random moments the test SIGKILLs the raylet (and everything
it started) of a node that holds ranks, as a node crash does. Every rank
reports its node and its Horovod model-parallel set; from those reports the
test checks that no group ever spanned two nodes, that every trial completed
(the lost attempts were retried on the nodes left), and that no rank process
is left running.

Under a placement of one PACK bundle per rank, a 4-rank gang on 3-CPU nodes
lands 3 + 1 and its second group straddles two nodes: this test fails there.
Heavy on a 2-core machine (16 raylets): the trials are trivial, two gangs run
at once.
"""

from __future__ import annotations

import os
import random
import secrets
import subprocess
import textwrap
import time
from collections import defaultdict
from pathlib import Path

import psutil
import pytest
from nestor_harness import NESTOR, events, finished, kill_tagged, tagged_env
from rank_helpers import lose_node, rank_log, ray_cluster

pytestmark = pytest.mark.slow

NODES, CPUS, LOST, TRIALS = 16, 3, 3, 8
ROOT = Path(__file__).resolve().parents[2]

TRAINER = """
import json, os, time

import ray
import torch


def train(config, ctx):
    group = ctx.hvd.allgather(torch.tensor([ctx.rank]), process_set=ctx.mp_set).tolist()
    pids = ctx.hvd.allgather(torch.tensor([os.getpid()]), process_set=ctx.mp_set).tolist()
    with open(os.environ["RANK_LOG"], "a") as log:
        log.write(json.dumps({"trial": config["x"], "rank": ctx.rank, "mp_set": group,
                              "pid": os.getpid(), "group_pids": pids,
                              "node": ray.get_runtime_context().get_node_id()}) + "\\n")
    time.sleep(3)
    total = ctx.hvd.allreduce(torch.tensor([1.0]), op=ctx.hvd.Sum).item()
    return {"val_accuracy": total / ctx.size - abs(config["x"])}
"""



def test_sixteen_nodes_three_lost_no_group_straddles_nothing_lost_no_rank_left(
        tmp_path: Path) -> None:
    (tmp_path / "sixteen_trainer.py").write_text(TRAINER)
    spec = tmp_path / "sixteen.yaml"
    spec.write_text(textwrap.dedent(f"""
        name: sixteen
        resources: {{slots: 8}}
        stages:
          - name: tune
            kind: hpo
            trainer: {{function: "sixteen_trainer:train"}}
            parallel: {{data: 2, model: 2}}
            search: {{algorithm: random, budget: {TRIALS}, seed: 7}}
            space: {{x: {{type: float, low: -1, high: 1}}}}
            trial: {{retries: {LOST + 1}, timeout: 240}}
        """))
    log = tmp_path / "ranks.log"
    # This checkout's nestor, ahead of any other installed (a worktree's tests test it).
    env = tagged_env(tmp_path, PYTHONPATH=os.pathsep.join([str(tmp_path), str(ROOT)]),
                     RANK_LOG=str(log),
                     RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=secrets.token_hex(32))
    nodes = [{"num_cpus": CPUS, "resources": {f"node{i}": 1}} for i in range(NODES)]
    seed = secrets.randbits(32)
    rng = random.Random(seed)
    print(f"\nseed {seed}")
    driver = None
    try:
        with ray_cluster(env, nodes) as info:
            run_dir = tmp_path / "run"
            driver = subprocess.Popen([NESTOR, "run", str(spec), "--run-dir", str(run_dir),
                                       "--address", info["address"]], env=env,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                      text=True)
            lost: list[str] = []
            deadline = time.monotonic() + 600
            while len(lost) < LOST and driver.poll() is None and time.monotonic() < deadline:
                time.sleep(rng.uniform(0.5, 6.0))  # a random moment
                running = {r["node"] for r in rank_log(log)} - set(lost)
                if running:
                    victim = rng.choice(sorted(running))
                    lose_node(info["raylets"][victim])
                    lost.append(victim)
            _, stderr = driver.communicate(timeout=900)
            assert driver.returncode == 0, stderr[-3000:]
        assert len(lost) == LOST, f"the sweep ended before {LOST} nodes were lost: {lost}"

        done = finished(run_dir)
        assert len(done) == TRIALS, done
        assert all(e["status"] == "completed" for e in done.values()), done
        failed = [e for e in events(run_dir) if e["event"] == "trial_attempt_failed"]
        ranks = rank_log(log)
        groups: dict[tuple[int, ...], set[str]] = defaultdict(set)  # by its ranks' pids
        for rank in ranks:
            assert rank["mp_set"] in ([0, 1], [2, 3]), rank  # the trainers' own groups
            groups[tuple(sorted(rank["group_pids"]))].add(rank["node"])
        straddling = {k: v for k, v in groups.items() if len(v) > 1}
        assert not straddling, f"model-parallel groups split across nodes: {straddling}"
        by_trial: dict[float, set[str]] = defaultdict(set)
        for rank in ranks:
            by_trial[rank["trial"]].add(rank["node"])
        assert all(len(nodes) >= 2 for nodes in by_trial.values())  # gangs span nodes
        alive = [r for r in ranks if psutil.pid_exists(r["pid"])
                 and psutil.Process(r["pid"]).status() != psutil.STATUS_ZOMBIE]
        assert not alive, alive
        print(f"{NODES} nodes, {LOST} lost: {len(done)} trials completed, {len(failed)}"
              f" attempt(s) failed and retried, {len({r['pid'] for r in ranks})} rank"
              f" processes, {len(groups)} model-parallel groups, each on one node")
    finally:
        if driver is not None and driver.poll() is None:
            driver.kill()
        kill_tagged(env["NESTOR_TEST_TAG"])
