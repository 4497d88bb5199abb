"""A node lost mid-sweep, on a real Ray cluster of 4 logical nodes on this host.

A helper process starts ``ray.cluster_utils.Cluster``: a head with no CPUs and
4 worker nodes of 1 CPU each (their own raylets), so every 2-rank trial's
gang spans two nodes. ``nestor run --address`` joins it. Once trials run, the
test SIGKILLs the raylet of a node that holds a rank, as a node crash does:
that trial's attempt fails, is retried on the nodes left, and the sweep
finishes with nothing lost and no rank left running. Checked from outside:
the ranks' own log (pid and node of every rank), the journal, /proc.
"""

from __future__ import annotations

import re
import secrets
import subprocess
import textwrap
import time
from pathlib import Path

import psutil
import pytest
from nestor_harness import NESTOR, events, finished, kill_tagged, tagged_env
from rank_helpers import lose_node, rank_log, ray_cluster

pytestmark = pytest.mark.slow

NODES = 4

TRAINER = """
import json, os, time

import ray
import torch


def train(config, ctx):
    node = ray.get_runtime_context().get_node_id()
    with open(os.environ["RANK_LOG"], "a") as log:
        log.write(json.dumps({"trial": config["x"], "rank": ctx.rank, "pid": os.getpid(),
                              "node": node}) + "\\n")
    time.sleep(float(os.environ.get("RANK_SLEEP", "4")))
    total = ctx.hvd.allreduce(torch.tensor([1.0]), op=ctx.hvd.Sum).item()
    return {"val_accuracy": total / 2 - abs(config["x"])}
"""



def test_a_node_lost_mid_sweep_retries_its_trial_on_the_others_and_loses_nothing(
        tmp_path: Path) -> None:
    (tmp_path / "nodes_trainer.py").write_text(TRAINER)
    spec = tmp_path / "nodes.yaml"
    spec.write_text(textwrap.dedent(f"""
        name: nodes
        resources: {{slots: {NODES}}}
        stages:
          - name: tune
            kind: hpo
            trainer: {{function: "nodes_trainer:train"}}
            parallel: {{data: 2}}
            search: {{algorithm: random, budget: 6, seed: 5}}
            space: {{x: {{type: float, low: -1, high: 1}}}}
            trial: {{retries: 2}}
        """))
    log = tmp_path / "ranks.log"
    env = tagged_env(tmp_path, PYTHONPATH=str(tmp_path), RANK_LOG=str(log),
                     RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=secrets.token_hex(32))
    cluster_nodes = [{"num_cpus": 1, "resources": {f"node{i}": 1}} for i in range(NODES)]
    driver = None
    try:
        with ray_cluster(env, cluster_nodes) as info:
            run_dir = tmp_path / "run"
            driver = subprocess.Popen([NESTOR, "run", str(spec), "--run-dir", str(run_dir),
                                       "--address", info["address"]], env=env,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            deadline = time.monotonic() + 240
            victim = None
            while victim is None and driver.poll() is None and time.monotonic() < deadline:
                ranks = rank_log(log)
                if len(ranks) >= 2:
                    victim = ranks[0]
                time.sleep(0.1)
            assert victim is not None, "no trial started"
            lose_node(info["raylets"][victim["node"]])
            _, stderr = driver.communicate(timeout=400)
            assert driver.returncode == 0, stderr

            done = finished(run_dir)
            assert len(done) == 6 and all(e["status"] == "completed" for e in done.values()), done
            failed = [e for e in events(run_dir) if e["event"] == "trial_attempt_failed"]
            assert failed, "the lost node failed no attempt"
            ranks = rank_log(log)
            hit = victim["trial"]
            # The attempt on the lost node failed because a rank's actor died (the
            # backend's own words, naming the rank and its gang), not for any other
            # reason that happens to mention a rank.
            hit_failed = [e for e in failed if e["trial"]["config"]["x"] == hit]
            assert hit_failed and all(re.fullmatch(r"rank [01] of gang \d+ died: .+", e["reason"])
                                      for e in hit_failed), failed
            retried = [r for r in ranks if r["trial"] == hit and r["pid"] != victim["pid"]]
            assert retried and all(r["node"] != victim["node"] for r in retried[-2:]), ranks
            by_trial: dict[float, set[str]] = {}
            for r in ranks:
                by_trial.setdefault(r["trial"], set()).add(r["node"])
            assert any(len(nodes) == 2 for nodes in by_trial.values())  # gangs span nodes
            # Nothing left running: every rank that ever ran is gone.
            alive = [r for r in ranks if psutil.pid_exists(r["pid"])
                     and psutil.Process(r["pid"]).status() != psutil.STATUS_ZOMBIE]
            assert not alive, alive
            print(f"\nnode loss: {len(failed)} attempt(s) failed ({failed[0]['reason']!r}),"
                  f" {len(done)} trials completed")
    finally:
        if driver is not None and driver.poll() is None:
            driver.kill()
        kill_tagged(env["NESTOR_TEST_TAG"])
