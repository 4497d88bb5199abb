"""A node of 8 GPUs, faked on this CPU machine: what a rank does with the GPUs it is
granted (trainers.gpu). torch's CUDA calls are patched to say what a GPU node
says (a CUDA build, 8 devices, set_device recorded); no kernel ever runs on one.

- a rank granted a GPU that cannot use it fails, naming the check and `nestor
  doctor`, instead of training on the CPU in silence;
- Horovod's GPU collectives need NCCL (``nccl_built``), not merely ``cuda_built``;
- a function trainer's ``ctx.device`` is its local rank's GPU, already current;
- a command trainer of one rank sees ``LOCAL_RANK`` and only its own GPU;
- a packed rank's memory cap applies to function trainers too.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import gpu_fns
import pytest
import torch

from nestor.trainers import TrainerRef, TrialRequest, run_trial
from nestor.trainers.comm import HorovodComm
from nestor.trainers.command import own_device_env
from nestor.trainers.function import run_function
from nestor.trainers.gpu import (
    GPU_DRIVER_NODES,
    GRANTED_ENV,
    SHARE_ENV,
    gpu_problem,
    select_device,
)
from nestor.trainers.parallel import Parallel


@pytest.fixture
def eight_gpus(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, list[Any]]]:
    """torch as on a CUDA node with 8 GPUs; what the rank asked of them is recorded."""
    calls: dict[str, list[Any]] = {"set_device": [], "memory_fraction": []}
    current = {"index": 0}

    def set_device(index: Any) -> None:
        calls["set_device"].append(index)
        current["index"] = int(index)

    monkeypatch.setattr(torch.version, "cuda", "13.0")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 8)
    monkeypatch.setattr(torch.cuda, "set_device", set_device)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: current["index"])
    monkeypatch.setattr(torch.cuda, "set_per_process_memory_fraction",
                        lambda share, index=None: calls["memory_fraction"].append((share, index)))
    monkeypatch.setenv(GRANTED_ENV, "1")
    monkeypatch.delenv(SHARE_ENV, raising=False)
    tf32 = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    yield calls
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = tf32


def test_a_granted_gpu_torch_cannot_use_fails_the_trial_naming_the_check(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setenv(GRANTED_ENV, "1")
    result = run_trial(TrialRequest("t", TrainerRef.builtin("mlp"),
                                    settings={"dataset": "digits", "epochs": 1}))
    assert result.status == "failed"
    assert "granted a GPU but cannot use it" in result.reason
    # this machine's torch is the CPU build: that is the check that fails first
    assert "CPU-only build" in result.reason or "is_available() is False" in result.reason
    assert "nestor doctor" in result.reason


def test_a_cuda_build_with_no_usable_gpu_says_is_available(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.version, "cuda", "13.0")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setenv(GRANTED_ENV, "1")
    result = run_trial(TrialRequest("t", TrainerRef.python("gpu_fns:record_device")))
    assert result.status == "failed"
    assert "torch.cuda.is_available() is False" in result.reason
    assert "nestor doctor" in result.reason


def test_without_a_granted_gpu_the_cpu_is_recorded_as_the_device(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(GRANTED_ENV, raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    result = run_trial(TrialRequest("t", TrainerRef.builtin("mlp"),
                                    settings={"dataset": "digits", "epochs": 1}))
    assert result.ok, result.reason
    assert result.metrics["device_gpu"] == 0.0 and result.metrics["device_index"] == -1.0


def test_horovod_needs_nccl_for_gpu_tensors_not_just_cuda(eight_gpus: dict) -> None:
    hvd = SimpleNamespace(cuda_built=lambda: True, nccl_built=lambda: 0)
    comm = HorovodComm(hvd)
    assert not comm.gpu_tensors()
    par = Parallel(2, 1, rank=0, comm=comm)
    assert "Horovod was built without NCCL" in (gpu_problem(par) or "")
    with pytest.raises(Exception, match="nestor doctor"):
        select_device(par)
    assert HorovodComm(SimpleNamespace(nccl_built=lambda: 22907)).gpu_tensors()


def test_a_function_trainer_on_local_rank_3_gets_cuda_3_already_set(
        eight_gpus: dict) -> None:
    gpu_fns.SEEN.clear()
    par = Parallel(1, 1, rank=0, local_rank=3, local_size=8)
    result = run_function(TrialRequest("f", TrainerRef.python("gpu_fns:record_device")),
                          par, None, None)
    assert result.ok, result.reason
    seen = gpu_fns.SEEN
    assert seen == [{"device": torch.device("cuda", 3), "current": 3}]
    assert eight_gpus["set_device"] == [3]
    assert result.metrics["device_gpu"] == 1.0 and result.metrics["device_index"] == 3.0
    assert torch.backends.cuda.matmul.allow_tf32 and torch.backends.cudnn.allow_tf32


def test_a_packed_function_trainer_has_its_memory_capped(
        eight_gpus: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SHARE_ENV, "0.25")
    gpu_fns.SEEN.clear()
    result = run_function(TrialRequest("f", TrainerRef.python("gpu_fns:record_device")),
                          Parallel(1, 1), None, None)
    assert result.ok, result.reason
    assert eight_gpus["memory_fraction"] == [(0.25, 0)]
    assert gpu_fns.SEEN[0]["device"] == torch.device("cuda", 0)


def test_a_one_rank_command_sees_local_rank_and_only_its_own_gpu(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert own_device_env({"CUDA_VISIBLE_DEVICES": "4,5", "NESTOR_GANG_LOCAL_RANK": "0"}, 1) \
        == {"LOCAL_RANK": "0", "CUDA_VISIBLE_DEVICES": "4"}
    assert own_device_env({"CUDA_VISIBLE_DEVICES": "4,5"}, 2) == {}  # a launcher: its node's
    script = tmp_path / "show.py"
    script.write_text("import os\nprint('FoM:', os.environ['LOCAL_RANK'],"
                      " os.environ['CUDA_VISIBLE_DEVICES'], sep='')\n")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "6,7")
    result = run_trial(TrialRequest("c", TrainerRef.command(f"python3 {script}",
                                                            result_pattern=r"FoM:(\S+)")))
    assert result.ok, result.reason
    assert result.metrics["result"] == 6.0  # LOCAL_RANK 0, CUDA_VISIBLE_DEVICES 6


def test_a_command_trial_records_the_gpu_nestor_gave_it_as_its_device(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    script = tmp_path / "show.py"
    script.write_text("import os, sys\nprint('FoM:', os.environ['CUDA_VISIBLE_DEVICES'], sep='')\n"
                      "sys.exit(int(os.environ.get('FAIL', '0')))\n")
    command = TrainerRef.command(f"python3 {script}", result_pattern=r"FoM:(\S+)")
    # local rank 2 of a gang granted a node's GPUs 4-7: its GPU is 6, cuda:2 in the rank
    monkeypatch.setenv(GRANTED_ENV, "1")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5,6,7")
    monkeypatch.setenv("NESTOR_GANG_LOCAL_RANK", "2")
    result = run_trial(TrialRequest("c", command))
    assert result.ok, result.reason
    assert result.metrics["result"] == 6.0  # the command saw only its own GPU
    assert result.metrics["device_gpu"] == 1.0 and result.metrics["device_index"] == 2.0
    monkeypatch.setenv("FAIL", "1")  # a failed trial says where it ran too
    failed = run_trial(TrialRequest("c", command))
    assert failed.status == "failed"
    assert failed.metrics["device_gpu"] == 1.0 and failed.metrics["device_index"] == 2.0
    monkeypatch.delenv("FAIL")
    monkeypatch.delenv(GRANTED_ENV)  # GPUs visible but none granted: the CPU
    result = run_trial(TrialRequest("c", command))
    assert result.ok, result.reason
    assert result.metrics["device_gpu"] == 0.0 and result.metrics["device_index"] == -1.0


NO_TORCH_TRIAL = """
import sys
from nestor.trainers import TrainerRef, TrialRequest, run_trial
from nestor.trainers.comm import HorovodComm

assert HorovodComm.alone() is None and "horovod.torch" not in sys.modules
result = run_trial(TrialRequest("t", TrainerRef.python("no_torch_fns:{name}"),
                                config={{"x": 3.0}}))
print(result.status, result.metrics["device_gpu"], result.metrics["device_index"],
      result.metrics.get("seen", "-"), "torch" in sys.modules)
"""


@pytest.mark.parametrize(("name", "printed"), [
    ("square", "ok 0.0 -1.0 - False"),  # never asks for the device: torch never imported
    ("asks", "ok 0.0 -1.0 1.0 True"),   # asks: gets the CPU, torch imported then
])
def test_a_function_trial_on_a_node_without_gpus_imports_torch_only_if_it_asks(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, printed: str) -> None:
    """A trivial trial on a CPU node does not pay torch's import (about 1.5 s a rank
    process); one that asks for ``ctx.device`` gets the CPU. In a fresh interpreter:
    this one has torch imported already."""
    if any(Path(node).exists() for node in GPU_DRIVER_NODES):
        pytest.skip("this node has a GPU driver: its ranks resolve the device first")
    (tmp_path / "no_torch_fns.py").write_text(
        "def square(config, ctx):\n    return {'score': config['x'] ** 2}\n\n"
        "def asks(config, ctx):\n    return {'seen': float(ctx.device.type == 'cpu')}\n")
    monkeypatch.delenv(GRANTED_ENV, raising=False)
    done = subprocess.run([sys.executable, "-c", NO_TORCH_TRIAL.format(name=name)],
                          cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(tmp_path)},
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == printed
