"""scripts/setup.sh picks the torch build for the machine: CUDA where nvidia-smi
lists a GPU, the CPU build elsewhere. `--print-plan` runs the very decision the
install takes and prints it, so a fake nvidia-smi on PATH reaches the GPU branch
here without installing CUDA."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
SETUP = ROOT / "scripts" / "setup.sh"

TWO_GPUS = """#!/bin/sh
[ "$1" = "-L" ] || exit 2
echo "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-00000000-0000-0000-0000-000000000000)"
echo "GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-00000000-0000-0000-0000-000000000001)"
"""
NO_DRIVER = """#!/bin/sh
echo "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver." >&2
exit 9
"""


def fake_tool(folder: Path, name: str, body: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(body)
    (folder / name).chmod(0o755)


def fake_cuda(tmp_path: Path) -> Path:
    home = tmp_path / "cuda-13.0"
    fake_tool(home / "bin", "nvcc", "#!/bin/sh\necho 'release 13.0'\n")
    (home / "include").mkdir()
    (home / "include" / "cuda_runtime.h").write_text("/* fake */\n")
    return home


def plan(tmp_path: Path, nvidia_smi: str | None, **env: str) -> dict[str, list[str]]:
    """Run setup.sh --print-plan with nvidia_smi (a script body) first on PATH."""
    fakebin = tmp_path / "bin"
    fakebin.mkdir(exist_ok=True)
    if nvidia_smi is not None:
        fake_tool(fakebin, "nvidia-smi", nvidia_smi)
    environ = {k: v for k, v in os.environ.items()
               if k not in {"CUDA_HOME", "CUDA_PATH", "NCCL_HOME", "HOROVOD_NCCL_HOME",
                            "NESTOR_TORCH_FLAVOUR"}}
    environ.update(env, PATH=f"{fakebin}{os.pathsep}{os.environ['PATH']}",
                   NESTOR_CACHE_DIR=str(tmp_path / "cache"))
    result = subprocess.run([str(SETUP), "--print-plan"], capture_output=True, text=True,
                            env=environ, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    out: dict[str, list[str]] = {}
    for line in result.stdout.splitlines():
        key, _, value = line.partition("=")
        out.setdefault(key, []).append(value)
    assert not (tmp_path / "cache").exists(), "--print-plan must change nothing"
    return out


def lock_pins(name: str) -> list[str]:
    return [line for line in (ROOT / name).read_text().splitlines()
            if line and not line.startswith("#")]


@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="this machine has nvidia-smi")
def test_without_nvidia_smi_the_cpu_build_as_before(tmp_path: Path) -> None:
    out = plan(tmp_path, None)
    assert out["gpus"] == ["0"] and out["flavour"] == ["cpu"]
    assert out["torch"] == ["torch==2.13.0"]  # the CPU wheel on disk, as CI installs it
    assert out["lock"] == ["requirements.lock"]
    assert out["nccl"] == ["none"]
    assert not any("NCCL" in flag or "GPU" in flag for flag in out["horovod_env"])
    cache = tmp_path / "cache/wheels/horovod-0.28.1-torch2.13.0-cpu"
    assert out["horovod_wheel_cache"] == [str(cache)]
    assert "torch_wheel_cache" not in out  # the wheel on disk, nothing to keep


def test_nvidia_smi_without_a_driver_is_no_gpu(tmp_path: Path) -> None:
    out = plan(tmp_path, NO_DRIVER, CUDA_HOME=str(fake_cuda(tmp_path)))
    assert out["gpus"] == ["0"] and out["flavour"] == ["cpu"]


def test_a_gpu_gets_cuda_torch_and_horovod_with_nccl_from_the_pip_package(tmp_path: Path) -> None:
    cuda = fake_cuda(tmp_path)
    out = plan(tmp_path, TWO_GPUS, CUDA_HOME=str(cuda))
    assert out["gpus"] == ["2"] and out["flavour"] == ["cuda"]
    assert out["lock"] == ["requirements.lock", "requirements-cuda.lock"]
    assert "torch===2.13.0" in out["pin"]  # `===`: never the 2.13.0+cpu wheel
    assert "nvidia-nccl-cu13==2.29.7" in out["pin"]
    assert out["nccl"] == ["pip:nvidia-nccl-cu13==2.29.7"]
    nccl = ROOT / ".venv/lib/python3.11/site-packages/nvidia/nccl"
    env = dict(flag.split("=", 1) for flag in out["horovod_env"])
    assert env["HOROVOD_GPU_OPERATIONS"] == "NCCL" and env["HOROVOD_GPU"] == "CUDA"
    assert env["HOROVOD_BUILD_CUDA_CC_LIST"] == "75,80,86,89,90,100,120"  # what nvcc 13 builds
    assert env["HOROVOD_NCCL_LINK"] == "SHARED"  # the package has no libnccl_static.a
    assert env["HOROVOD_NCCL_HOME"] == str(nccl)
    assert env["HOROVOD_NCCL_INCLUDE"] == f"{nccl}/include"
    assert env["HOROVOD_NCCL_LIB"] == f"{nccl}/lib"
    assert env["HOROVOD_CUDA_HOME"] == str(cuda)
    assert env["HOROVOD_WITH_GLOO"] == "1"  # Gloo stays: CPU tensors and the controller
    assert out["horovod_wheel_cache"][0].endswith("horovod-0.28.1-torch2.13.0-cuda-pip")
    assert "problem" not in out


def test_a_system_nccl_is_used_where_there_is_one(tmp_path: Path) -> None:
    system = tmp_path / "nccl-2.27"
    (system / "include").mkdir(parents=True)
    (system / "include" / "nccl.h").write_text("/* fake */\n")
    out = plan(tmp_path, TWO_GPUS, CUDA_HOME=str(fake_cuda(tmp_path)), NCCL_HOME=str(system))
    assert out["nccl"] == [f"system:{system}"]
    env = dict(flag.split("=", 1) for flag in out["horovod_env"])
    assert env["HOROVOD_NCCL_HOME"] == str(system)
    assert "HOROVOD_NCCL_LIB" not in env and "HOROVOD_NCCL_LINK" not in env
    assert out["horovod_wheel_cache"][0].endswith("-cuda-system")


def test_cuda_can_be_chosen_on_a_login_node_without_a_gpu(tmp_path: Path) -> None:
    """Set-up on a login node for a venv that GPU nodes share: no GPU here, CUDA wanted."""
    cuda = fake_cuda(tmp_path)
    out = plan(tmp_path, None, CUDA_HOME=str(cuda), NESTOR_TORCH_FLAVOUR="cuda")
    assert out["gpus"] == ["0"] and out["flavour"] == ["cuda"]
    assert out["reason"] == ["NESTOR_TORCH_FLAVOUR=cuda (nvidia-smi lists 0 GPU(s) here)"]
    assert "torch===2.13.0" in out["pin"]
    env = dict(flag.split("=", 1) for flag in out["horovod_env"])
    assert env["HOROVOD_GPU_OPERATIONS"] == "NCCL" and env["HOROVOD_CUDA_HOME"] == str(cuda)
    assert "problem" not in out


def test_the_plan_says_why_and_warns_where_no_gpu_is_seen(tmp_path: Path) -> None:
    out = plan(tmp_path, NO_DRIVER)
    assert out["flavour"] == ["cpu"]
    assert "nvidia-smi lists no GPU on this node" in out["reason"][0]
    assert "NESTOR_TORCH_FLAVOUR=cuda" in out["reason"][0]
    assert plan(tmp_path, TWO_GPUS, CUDA_HOME=str(fake_cuda(tmp_path)))["reason"] == [
        "nvidia-smi lists 2 GPU(s) on this node"]


def test_the_flavour_can_be_forced_and_is_checked(tmp_path: Path) -> None:
    assert plan(tmp_path, TWO_GPUS, NESTOR_TORCH_FLAVOUR="cpu")["flavour"] == ["cpu"]
    result = subprocess.run([str(SETUP), "--print-plan"], capture_output=True, text=True,
                            env={**os.environ, "NESTOR_TORCH_FLAVOUR": "rocm"}, timeout=60,
                            check=False)
    assert result.returncode == 1
    assert "NESTOR_TORCH_FLAVOUR must be cpu or cuda, but got 'rocm'" in result.stderr


def test_the_two_locks_pin_the_same_torch() -> None:
    cpu = [pin for pin in lock_pins("requirements.lock") if pin.startswith("torch==")]
    cuda = [pin for pin in lock_pins("requirements-cuda.lock") if pin.startswith("torch")]
    assert cpu == ["torch==2.13.0+cpu"] and cuda == ["torch===2.13.0"]
    assert any(pin.startswith("nvidia-nccl-cu13==") for pin in lock_pins("requirements-cuda.lock"))


# --- another Python, another torch (`make test-short`) ---------------------------------

def fake_python(tmp_path: Path, version: str) -> None:
    """A `pythonX.Y` on PATH that says it is X.Y: the plan asks it nothing else."""
    fake_tool(tmp_path / "bin", f"python{version}", f"#!/bin/sh\necho {version}\n")


def test_python_312_with_torch_211_installs_the_torch_lock_over_the_base_lock(
        tmp_path: Path) -> None:
    fake_python(tmp_path, "3.12")
    out = plan(tmp_path, None, NESTOR_PYTHON="3.12", NESTOR_TORCH="2.11",
               NESTOR_VENV=".venv-py3.12-torch2.11")
    assert out["python"] == [str(tmp_path / "bin/python3.12")]
    assert out["python_version"] == ["3.12"]
    assert out["venv"] == [str(ROOT / ".venv-py3.12-torch2.11")]
    assert out["flavour"] == ["cpu"] and out["nccl"] == ["none"]
    assert out["lock"] == ["requirements.lock", "requirements-torch2.11.lock"]
    assert out["pin"][0] == "torch===2.11.0" and "setuptools==81.0.0" in out["pin"]
    assert not any("NCCL" in flag or "GPU" in flag for flag in out["horovod_env"])
    # Horovod's wheel is built per Python and torch; cp311's keeps its old name.
    assert out["horovod_wheel_cache"] == [
        str(tmp_path / "cache/wheels/horovod-0.28.1-torch2.11.0-cpu-cp312")]
    # PyPI's torch and the CUDA libraries it pins (3 GB), kept per torch, Python and lock.
    assert out["torch_wheel_cache"][0].startswith(
        str(tmp_path / "cache/wheels/torch-2.11.0-cp312-"))


def test_torch_213_on_another_python_is_pypis_build_of_the_cuda_lock(tmp_path: Path) -> None:
    """The CPU wheel of torch 2.13 on this machine's disk is cp311 only."""
    fake_python(tmp_path, "3.13")
    out = plan(tmp_path, None, NESTOR_PYTHON="python3.13")
    assert out["python_version"] == ["3.13"] and out["flavour"] == ["cpu"]
    assert out["lock"] == ["requirements.lock", "requirements-cuda.lock"]
    assert out["horovod_wheel_cache"][0].endswith("horovod-0.28.1-torch2.13.0-cpu-cp313")


def test_an_older_torch_on_a_gpu_node_builds_horovod_against_its_nccl(tmp_path: Path) -> None:
    out = plan(tmp_path, TWO_GPUS, CUDA_HOME=str(fake_cuda(tmp_path)), NESTOR_TORCH="2.11.0")
    assert out["flavour"] == ["cuda"]
    assert out["nccl"] == ["pip:nvidia-nccl-cu13==2.28.9"]
    assert out["horovod_wheel_cache"][0].endswith("horovod-0.28.1-torch2.11.0-cuda-pip")


def refusal(tmp_path: Path, **env: str) -> str:
    environ = {**os.environ, **env, "PATH": f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}"}
    result = subprocess.run([str(SETUP), "--print-plan"], capture_output=True, text=True,
                            env=environ, timeout=60, check=False)
    assert result.returncode == 1 and result.stdout == "", result.stdout
    assert "Traceback" not in result.stderr
    return result.stderr.strip()


def test_a_python_or_torch_set_up_cannot_install_is_refused_by_name(tmp_path: Path) -> None:
    fake_python(tmp_path, "3.10")
    assert refusal(tmp_path, NESTOR_PYTHON="3.10") == (
        f"[setup] error: Python 3.11, 3.12 or 3.13 is required, but {tmp_path}/bin/python3.10"
        " is 3.10; set NESTOR_PYTHON to one (a version such as 3.12, or a path)")
    assert "no Python 3.99 found" in refusal(tmp_path, NESTOR_PYTHON="3.99")
    assert refusal(tmp_path, NESTOR_TORCH="2.5") == (
        "[setup] error: NESTOR_TORCH=2.5: no requirements-torch2.5.lock; the torch versions"
        " set-up knows are 2.13 (the default) 2.11 2.6")
    assert refusal(tmp_path, NESTOR_TORCH="2.11.1") == (
        "[setup] error: NESTOR_TORCH=2.11.1, but the lock for torch 2.11 pins 2.11.0")


def test_each_torch_lock_replaces_exactly_the_base_lines_it_pins() -> None:
    """scripts/lock_overlay.py leaves out of requirements.lock the packages an overlay pins
    (pip refuses two pins of one package) and nothing else; each overlay pins torch with
    `===`, which the CPU wheel `X.Y.Z+cpu` on this machine's disk never matches."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("lock_overlay", ROOT / "scripts/lock_overlay.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    base = (ROOT / "requirements.lock").read_text()
    overlays = [ROOT / "requirements-cuda.lock", *sorted(ROOT.glob("requirements-torch*.lock"))]
    assert [path.name for path in overlays[1:]] == ["requirements-torch2.11.lock",
                                                     "requirements-torch2.6.lock"]
    for path in overlays:
        overlay = path.read_text()
        pinned = {module.package(line) for line in overlay.splitlines()} - {""}
        kept = module.without_overlay(base, overlay)
        dropped = [line for line in base.splitlines() if line not in kept]
        assert {module.package(line) for line in dropped} == pinned & {
            module.package(line) for line in base.splitlines()}, path.name
        assert "torch" in {module.package(line) for line in dropped}, path.name
        torch_pin = next(p for p in lock_pins(path.name) if module.package(p) == "torch")
        assert torch_pin.startswith("torch==="), path.name
    torch211 = (ROOT / "requirements-torch2.11.lock").read_text()
    assert {module.package(line) for line in base.splitlines()
            if line not in module.without_overlay(base, torch211)} == {"torch", "setuptools"}
