"""`nestor doctor`, run as a user runs it: on this machine's real build (CPU torch,
Horovod with Gloo), on a fake GPU node (an `nvidia-smi` on PATH that lists two
GPUs, with the same CPU build: the mistake the command exists to catch), and
against a real Ray cluster."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest

FAKE_NVIDIA_SMI = """#!/bin/sh
if [ "$1" = "-L" ]; then
  echo "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-00000000-0000-0000-0000-000000000000)"
  echo "GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-00000000-0000-0000-0000-000000000001)"
  exit 0
fi
cat <<'EOF'
+-----------------------------------------------------------------------------------------+
| NVIDIA-SMI 580.82.07              Driver Version: 580.82.07      CUDA Version: 13.0     |
+-----------------------------------------+------------------------+----------------------+
EOF
"""

CPU_ONLY = shutil.which("nvidia-smi") is None


def doctor(*args: str, env: dict[str, str] | None = None,
           timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "nestor.orchestrator.commands.cli", "doctor",
                           *args],
                          capture_output=True, text=True, env=env or dict(os.environ),
                          timeout=timeout, check=False)


def as_json(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    return json.loads(done.stdout)


@pytest.fixture
def gpu_node(tmp_path: Path) -> dict[str, str]:
    """The environment of a node with two GPUs as far as nvidia-smi says."""
    (tmp_path / "nvidia-smi").write_text(FAKE_NVIDIA_SMI)
    (tmp_path / "nvidia-smi").chmod(0o755)
    return dict(os.environ, PATH=f"{tmp_path}{os.pathsep}{os.environ['PATH']}")


@pytest.mark.skipif(not CPU_ONLY, reason="checks the CPU-only build of a machine without GPUs")
def test_this_machine_cpu_torch_and_horovod_with_gloo() -> None:
    done = doctor("--no-ray", "--format", "json", "--strict")
    assert done.returncode == 0, done.stderr
    report = as_json(done)
    assert report["torch"]["version"] == version("torch") == "2.13.0+cpu"
    assert report["torch"]["build"] == "CPU" and report["torch"]["cuda"] is None
    assert report["torch"]["gloo_available"] is True
    assert report["horovod"] == {"version": "0.28.1", "nccl_built": False, "nccl": None,
                                 "gloo_built": True, "mpi_built": False, "cuda_built": False}
    assert report["gpus"]["names"] == [] and report["gpus"]["error"] == "nvidia-smi not found"
    assert report["ray"] is None
    assert report["warnings"] == []

    text = doctor("--no-ray").stdout
    assert "torch              2.13.0+cpu (CPU only)" in text
    assert "Horovod            0.28.1: nccl_built no, gloo_built yes, mpi_built no" in text
    assert "GPUs on this node  0 (nvidia-smi not found)" in text
    assert "no problems found" in text


def test_a_gpu_with_a_cpu_only_build_warns_loudly(gpu_node: dict[str, str]) -> None:
    done = doctor("--no-ray", "--format", "json", env=gpu_node)
    assert done.returncode == 0, done.stderr
    report = as_json(done)
    assert report["gpus"]["names"] == ["NVIDIA H100 80GB HBM3"] * 2
    assert report["gpus"]["driver"] == "580.82.07" and report["gpus"]["driver_cuda"] == "13.0"
    warnings = report["warnings"]
    assert len(warnings) == 2, warnings
    assert warnings[0].startswith("this node has 2 GPU(s), but torch 2.13.0+cpu is a CPU-only"
                                  " build: every rank will train on the CPU")
    assert warnings[1].startswith("this node has 2 GPU(s), but Horovod 0.28.1 was built without"
                                  " NCCL")
    assert "WARNING: this node has 2 GPU(s)" in done.stderr  # JSON on stdout, alarm on stderr

    strict = doctor("--no-ray", "--strict", env=gpu_node)
    assert strict.returncode == 1
    assert "GPUs on this node  2 x NVIDIA H100 80GB HBM3; driver 580.82.07 (CUDA 13.0);" \
           " torch sees 0" in strict.stdout
    assert strict.stdout.count("WARNING") == 2
    assert "NESTOR_FORCE_SETUP=1 make setup" in strict.stdout


def test_no_cluster_where_nothing_listens() -> None:
    done = doctor("--format", "json", "--address", "127.0.0.1:1", timeout=60)
    assert done.returncode == 0, done.stderr
    assert as_json(done)["ray"] == {"reachable": False, "asked": "127.0.0.1:1",
                                    "error": "nothing listens there"}


CLUSTER = """
import json, sys
from ray.cluster_utils import Cluster

cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1,
                                                        "include_dashboard": False})
cluster.add_node(num_cpus=2, num_gpus=1)
cluster.wait_for_nodes()
print(json.dumps({"address": cluster.address}), flush=True)
sys.stdin.read()
cluster.shutdown()
"""


@pytest.mark.slow  # 26 s here, most of it the cluster's start
def test_a_ray_cluster_its_nodes_cpus_and_gpus() -> None:
    env = dict(os.environ, RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=secrets.token_hex(32))
    cluster = subprocess.Popen([sys.executable, "-c", CLUSTER], env=env, stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, text=True)
    try:
        address = json.loads(cluster.stdout.readline())["address"]
        done = doctor("--format", "json", "--address", address, env=env)
        assert done.returncode == 0, done.stderr
        ray = as_json(done)["ray"]
        assert ray["reachable"] is True, ray
        assert ray["address"] == address
        assert sorted((node["cpus"], node["gpus"]) for node in ray["nodes"]) == [(1, 0), (2, 1)]
        text = doctor("--address", address, env=env).stdout
        assert f"Ray cluster        {address}: 2 node(s), 3 CPUs, 1 GPUs (GPUs per node: 0, 1)" \
               in text
    finally:
        cluster.stdin.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            cluster.wait(timeout=60)
