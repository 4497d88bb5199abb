"""Small trials packed several to a GPU (``resources.gpus_per_trial: 0.25``), on a
real Ray cluster whose node has one logical GPU (Ray hands out GPU ids and
fractions exactly as on a GPU node; no CUDA is needed to schedule them).

Four one-rank trials that each take a quarter of the GPU run at the same time,
each told its share (the built-in trainer caps its CUDA memory to it) and shown
only the GPU it shares. With a whole GPU per slot they ran one at a time.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import textwrap
from pathlib import Path

import pytest
from nestor_harness import NESTOR, finished, kill_tagged, tagged_env
from rank_helpers import ray_cluster

pytestmark = pytest.mark.slow

TRAINER = """
import json, os, time

import torch

# A GPU node, faked when the rank imports this trainer (before nestor picks the
# rank's device): a rank granted a GPU it cannot use would fail its trial.
CAPS = []
torch.version.cuda = "13.0"
torch.cuda.is_available = lambda: True
torch.cuda.device_count = lambda: 1
torch.cuda.set_device = lambda index: None
torch.cuda.set_per_process_memory_fraction = lambda share, index=None: CAPS.append(share)


def train(config, ctx):
    began = time.time()
    time.sleep(10)  # long enough to overlap on a loaded machine; one at a time never would
    with open(os.environ["RANK_LOG"], "a") as log:
        log.write(json.dumps({"trial": config["x"], "began": began, "ended": time.time(),
                              "share": os.environ.get("NESTOR_GPU_SHARE"), "caps": CAPS,
                              "device": str(ctx.device),
                              "gpus": os.environ.get("CUDA_VISIBLE_DEVICES")}) + "\\n")
    return {"val_accuracy": -abs(config["x"])}
"""


def run_on(cluster: dict, spec: Path, run_dir: Path,
           env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """`nestor run` of ``spec`` on the test's cluster."""
    return subprocess.run([NESTOR, "run", str(spec), "--run-dir", str(run_dir),
                           "--address", cluster["address"]], env=env,
                          capture_output=True, text=True, timeout=400, check=False)


def test_four_quarter_gpu_trials_share_one_gpu_at_once(tmp_path: Path) -> None:
    (tmp_path / "packed_trainer.py").write_text(TRAINER)
    spec = tmp_path / "packed.yaml"
    spec.write_text(textwrap.dedent("""
        name: packed
        resources: {gpus_per_trial: 0.25}
        stages:
          - name: tune
            kind: hpo
            trainer: {function: "packed_trainer:train"}
            search: {algorithm: random, budget: 4, seed: 1}
            space: {x: {type: float, low: -1, high: 1}}
        """))
    log = tmp_path / "ranks.log"
    # The GPU is logical only: the start check of the nodes' builds would refuse it
    # (test_a_cpu_build_is_refused_where_gpus_are_granted); the trainer fakes CUDA.
    env = tagged_env(tmp_path, PYTHONPATH=os.pathsep.join([str(tmp_path), *filter(None, [
                         os.environ.get("PYTHONPATH")])]), RANK_LOG=str(log),
                     RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=secrets.token_hex(32),
                     NESTOR_GPU_CHECK="0")
    try:
        with ray_cluster(env, [{"num_cpus": 4, "num_gpus": 1}]) as cluster:
            run_dir = tmp_path / "run"
            driver = run_on(cluster, spec, run_dir, env)
        assert driver.returncode == 0, driver.stderr[-3000:]
        done = finished(run_dir)
        assert len(done) == 4 and all(e["status"] == "completed" for e in done.values())
        ranks = [json.loads(line) for line in log.read_text().splitlines()]
        assert len(ranks) == 4
        assert {r["share"] for r in ranks} == {"0.25"}
        # a function trainer's memory is capped to its share too, on its own cuda:0
        assert all(r["caps"] == [0.25] and r["device"] == "cuda:0" for r in ranks), ranks
        assert len({r["gpus"] for r in ranks}) == 1 and "," not in ranks[0]["gpus"]
        # all four at once: each began before any of them ended
        assert max(r["began"] for r in ranks) < min(r["ended"] for r in ranks), ranks
    finally:
        kill_tagged(env["NESTOR_TEST_TAG"])


def test_a_cpu_build_is_refused_where_gpus_are_granted(tmp_path: Path) -> None:
    """This machine's torch is the CPU build: `nestor run` on a cluster that grants the
    ranks GPUs checks each GPU node's build once, and refuses before any trial."""
    spec = tmp_path / "gpu.yaml"
    spec.write_text(textwrap.dedent("""
        name: gpu
        stages:
          - name: tune
            kind: hpo
            trainer: {name: mlp, settings: {dataset: digits, epochs: 1}}
            search: {algorithm: random, budget: 2, seed: 1}
            space: {lr: {type: float, low: 0.01, high: 0.1}}
        """))
    env = tagged_env(tmp_path, RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=secrets.token_hex(32))
    try:
        with ray_cluster(env, [{"num_cpus": 2, "num_gpus": 2}]) as cluster:
            run_dir = tmp_path / "run"
            driver = run_on(cluster, spec, run_dir, env)
        assert driver.returncode != 0
        said = " ".join(driver.stderr.split())
        assert "the ranks are granted GPUs, but cannot use them" in said, driver.stderr[-2000:]
        assert "(2 GPUs): torch 2.13.0+cpu is a CPU-only build" in said
        assert "Horovod 0.28.1 was built without NCCL" in said
        assert "nestor doctor" in said
        assert not finished(run_dir)  # no trial ran
    finally:
        kill_tagged(env["NESTOR_TEST_TAG"])
