"""Gangs across nodes, on a real Ray cluster of 4 logical nodes on this host.

A helper process starts ``ray.cluster_utils.Cluster`` (a head with no CPUs and
4 nodes of 3 CPUs, each its own raylet), joins it, and starts gangs through
``GangPool`` as the engine does. Every rank runs the trainers' own
``trainers.parallel.setup`` and reports its model-parallel group (the ranks of
its Horovod ``mp_set``, proved by an allgather inside that set) and the Ray
node it runs on. The test checks from outside that each group sits on one node
while the gang as a whole spans several, and that a group too big for every
node fails at once with a message that says so.

Under the old placement (one PACK bundle per rank) a 2 x 2 gang on 3-CPU
nodes lands 3 + 1, and ranks 2 and 3, one model-parallel group, straddle two
nodes: these tests fail there.
"""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
import textwrap
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from nestor_harness import NESTOR, events, finished, kill_tagged, tagged_env
from rank_helpers import ray_cluster

pytestmark = pytest.mark.slow

NODES, CPUS, GPUS = 4, 3, 2
ROOT = Path(__file__).resolve().parents[2]

SCRIPT = f"""
import json, os, sys, time
import ray
from ray.cluster_utils import Cluster

cluster = Cluster(initialize_head=True, head_node_args={{"num_cpus": 0,
                                                         "include_dashboard": False}})
for _ in range({NODES}):
    cluster.add_node(num_cpus={CPUS}, num_gpus={GPUS})  # logical GPUs: Ray hands out ids
cluster.wait_for_nodes()
ray.init(address=cluster.address, log_to_driver=False, configure_logging=False)


def where(dp, mp):
    import horovod.torch as hvd
    import torch
    from nestor.trainers.parallel import setup

    par = setup(dp, mp)
    group = list(par.mp_ranks)
    if par.mp_set is not None:  # the trainers' own model-parallel process set
        group = hvd.allgather(torch.tensor([par.rank]), process_set=par.mp_set).tolist()
    return {{"rank": par.rank, "mp_ranks": list(par.mp_ranks), "mp_set": group,
             "local_rank": par.local_rank, "pid": os.getpid(),
             "node": ray.get_runtime_context().get_node_id(),
             "gpu_ids": [str(i) for i in ray.get_gpu_ids()],
             "visible": os.environ.get("CUDA_VISIBLE_DEVICES")}}


def emit(**record):
    print(json.dumps(record), flush=True)


from nestor.orchestrator.backends.ray.gangs import GangPool, GangStartError, Shape

try:
    with GangPool(slots={NODES * CPUS}, placement_timeout_s=60) as pool:
        for dp, mp, runs in ((2, 2, 2), (3, 2, 1)):
            for run in range(runs):
                began = time.monotonic()
                gang = pool.acquire(Shape(dp, mp))
                startup_s = time.monotonic() - began
                gang.submit(where, dp, mp)
                emit(shape=[dp, mp], run=run, gang=gang.id, started=pool.started,
                     startup_s=startup_s, ranks=gang.collect(timeout_s=240))
                pool.release(gang)
            pool.discard(gang)
        began = time.monotonic()
        try:
            pool.acquire(Shape(1, {CPUS + 1}))
            emit(too_big="started")
        except GangStartError as exc:
            emit(too_big=str(exc), seconds=time.monotonic() - began, gangs=len(pool.gangs))
    with GangPool(slots={NODES * GPUS}, use_gpu=True, placement_timeout_s=60) as pool:
        gang = pool.acquire(Shape(2, 2))
        gang.submit(where, 2, 2)
        emit(gpu=True, ranks=gang.collect(timeout_s=240))
finally:
    ray.shutdown()
    cluster.shutdown()
"""


@pytest.fixture(scope="module")
def placed(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    """What the helper process printed: one record per gang run, then the too-big case."""
    tmp = tmp_path_factory.mktemp("placement")
    env = tagged_env(tmp, PYTHONPATH=str(ROOT), RAY_AUTH_MODE="token",
                     RAY_AUTH_TOKEN=secrets.token_hex(32))
    try:
        done = subprocess.run([sys.executable, "-c", SCRIPT], env=env, cwd=ROOT,
                              capture_output=True, text=True, timeout=540, check=False)
    finally:
        kill_tagged(env["NESTOR_TEST_TAG"])
    records = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert done.returncode == 0 and records, done.stderr[-3000:]
    for record in records:
        print(json.dumps({k: v for k, v in record.items() if k != "ranks"}))
    return records


def runs(placed: list[dict[str, Any]], dp: int, mp: int) -> list[dict[str, Any]]:
    found = [r for r in placed if r.get("shape") == [dp, mp]]
    assert found, f"no {dp}x{mp} gang ran: {placed}"
    return found


@pytest.mark.parametrize(("dp", "mp"), [(2, 2), (3, 2)])
def test_a_model_parallel_group_never_straddles_two_nodes(
        placed: list[dict[str, Any]], dp: int, mp: int) -> None:
    for record in runs(placed, dp, mp):
        ranks = sorted(record["ranks"], key=lambda r: r["rank"])
        assert [r["rank"] for r in ranks] == list(range(dp * mp))
        nodes_of: dict[tuple[int, ...], set[str]] = defaultdict(set)
        for rank in ranks:
            assert rank["mp_set"] == rank["mp_ranks"]  # Horovod's set is the trainers' group
            nodes_of[tuple(rank["mp_ranks"])].add(rank["node"])
        assert len(nodes_of) == dp
        straddling = {group: nodes for group, nodes in nodes_of.items() if len(nodes) > 1}
        assert not straddling, f"{dp}x{mp}: model-parallel groups split across nodes: {straddling}"
        # Horovod's local ranks follow the node: a group's ranks are neighbours on it.
        for group in nodes_of:
            local = [ranks[r]["local_rank"] for r in group]
            assert local == sorted(local) and len(set(local)) == len(local)


@pytest.mark.parametrize(("dp", "mp"), [(2, 2), (3, 2)])
def test_a_gang_no_node_can_hold_spans_nodes(
        placed: list[dict[str, Any]], dp: int, mp: int) -> None:
    assert dp * mp > CPUS  # no single node holds the gang
    for record in runs(placed, dp, mp):
        nodes = {r["node"] for r in record["ranks"]}
        assert len(nodes) == dp, f"{dp}x{mp} gang on {len(nodes)} nodes"  # one group per node


def test_a_warm_gang_spanning_nodes_is_reused(placed: list[dict[str, Any]]) -> None:
    first, second = runs(placed, 2, 2)
    assert first["gang"] == second["gang"] and second["started"] == 1
    assert [r["pid"] for r in first["ranks"]] == [r["pid"] for r in second["ranks"]]
    assert second["startup_s"] < 1.0  # no placement, no rendezvous


def test_on_gpu_nodes_a_rank_s_own_gpu_is_the_one_its_local_rank_picks(
        placed: list[dict[str, Any]]) -> None:
    """Ray hands each rank a GPU; Horovod's local rank is what trainers turn into
    ``cuda:<local rank>``. Every rank sees its node's GPUs of this gang in
    local-rank order, so that index is its own GPU (logical GPUs here: the
    same code path as on a GPU node, short of CUDA)."""
    (record,) = [r for r in placed if r.get("gpu")]
    ranks = sorted(record["ranks"], key=lambda r: r["rank"])
    assert {tuple(r["mp_ranks"]) for r in ranks} == {(0, 1), (2, 3)}
    for group in ((0, 1), (2, 3)):
        assert len({ranks[r]["node"] for r in group}) == 1  # a group on one node
    for rank in ranks:
        visible = rank["visible"].split(",")
        assert len(visible) == 2 and len(rank["gpu_ids"]) == 1, rank
        assert visible[rank["local_rank"]] == rank["gpu_ids"][0], rank


def test_a_group_no_node_can_hold_fails_at_once_naming_mp_and_the_largest_node(
        placed: list[dict[str, Any]]) -> None:
    (record,) = [r for r in placed if "too_big" in r]
    message = record["too_big"]
    assert f"mp={CPUS + 1}" in message and "largest node" in message, message
    assert f"has {CPUS} CPUs" in message, message
    assert record["seconds"] < 10  # not the 60 s placement timeout
    assert record["gangs"] == 0


# The same cluster, joined by ``nestor run --address``: the engine's own path.
TRAINER = """
import json, os, time

import ray
import torch


def train(config, ctx):
    group = ctx.hvd.allgather(torch.tensor([ctx.rank]), process_set=ctx.mp_set).tolist()
    with open(os.environ["RANK_LOG"], "a") as log:
        log.write(json.dumps({"trial": config["x"], "rank": ctx.rank, "mp_set": group,
                              "pid": os.getpid(),
                              "node": ray.get_runtime_context().get_node_id()}) + "\\n")
    time.sleep(1)
    total = ctx.hvd.allreduce(torch.tensor([1.0]), op=ctx.hvd.Sum).item()
    return {"val_accuracy": total / ctx.size - abs(config["x"])}
"""


def test_a_dp_x_mp_sweep_run_by_nestor_keeps_every_group_on_one_node(tmp_path: Path) -> None:
    """Six 2 x 2 trials, 12 slots: the scheduler's slot count allows three gangs at
    once, but 3-CPU nodes hold one 2-rank group each, so only two fit. Every
    trial completes without a failed attempt, its groups on one node each."""
    (tmp_path / "groups_trainer.py").write_text(TRAINER)
    spec = tmp_path / "groups.yaml"
    spec.write_text(textwrap.dedent(f"""
        name: groups
        resources: {{slots: {NODES * CPUS}}}
        stages:
          - name: tune
            kind: hpo
            trainer: {{function: "groups_trainer:train"}}
            parallel: {{data: 2, model: 2}}
            search: {{algorithm: random, budget: 6, seed: 3}}
            space: {{x: {{type: float, low: -1, high: 1}}}}
        """))
    log = tmp_path / "ranks.log"
    env = tagged_env(tmp_path, PYTHONPATH=str(tmp_path), RANK_LOG=str(log),
                     RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=secrets.token_hex(32))
    try:
        with ray_cluster(env, [{"num_cpus": CPUS}] * NODES) as cluster:
            address = cluster["address"]
            run_dir = tmp_path / "run"
            began = time.monotonic()
            driver = subprocess.run([NESTOR, "run", str(spec), "--run-dir", str(run_dir),
                                     "--address", address], env=env, capture_output=True,
                                    text=True, timeout=400, check=False)
            took = time.monotonic() - began
            assert driver.returncode == 0, driver.stderr[-3000:]
        done = finished(run_dir)
        assert len(done) == 6 and all(e["status"] == "completed" for e in done.values()), done
        failed = [e for e in events(run_dir) if e["event"] == "trial_attempt_failed"]
        assert not failed, failed
        ranks = [json.loads(line) for line in log.read_text().splitlines()]
        assert len(ranks) == 6 * 4
        by_trial: dict[float, list[dict[str, Any]]] = defaultdict(list)
        for rank in ranks:
            by_trial[rank["trial"]].append(rank)
        for trial, its in by_trial.items():
            groups: dict[tuple[int, ...], set[str]] = defaultdict(set)
            for rank in its:
                groups[tuple(rank["mp_set"])].add(rank["node"])
            assert set(groups) == {(0, 1), (2, 3)}, its
            assert all(len(nodes) == 1 for nodes in groups.values()), (trial, groups)
            assert len({r["node"] for r in its}) == 2  # and the gang spans two nodes
        print(f"\n6 trials of 2x2 on {NODES} nodes of {CPUS} CPUs: {took:.1f} s,"
              f" {len({r['pid'] for r in ranks})} rank processes")
    finally:
        kill_tagged(env["NESTOR_TEST_TAG"])
