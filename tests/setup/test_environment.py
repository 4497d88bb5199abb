"""The set-up that `make demo` and `make test` rely on, checked for real."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
VENV_BIN = Path(sys.executable).parent


def run(argv: list[str], timeout: float = 120, **kwargs) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False,
                          **kwargs)


def test_horovod_was_built_with_pytorch_and_gloo() -> None:
    result = run([str(VENV_BIN / "horovodrun"), "--check-build"])
    assert result.returncode == 0, result.stderr
    assert re.search(r"\[X\] PyTorch", result.stdout)
    assert re.search(r"Available Controllers:.*?\[X\] Gloo", result.stdout, re.S)


ALLREDUCE = """
import horovod.torch as hvd, torch
hvd.init()
total = hvd.allreduce(torch.tensor([float(hvd.rank() + 1)]), op=hvd.Sum)
print(f"rank {hvd.rank()} of {hvd.size()}: sum {total.item():g}", flush=True)
"""


@pytest.mark.slow
def test_two_horovod_ranks_allreduce_over_gloo(tmp_path: Path) -> None:
    script = tmp_path / "allreduce.py"
    script.write_text(ALLREDUCE)
    result = run(
        [str(VENV_BIN / "horovodrun"), "--gloo", "-np", "2", "-H", "localhost:2",
         sys.executable, str(script)],
        timeout=180,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert sorted(re.findall(r"rank (\d) of 2: sum 3", result.stdout)) == ["0", "1"]


def test_pyproject_pins_match_the_lock() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    lock = {}
    for line in (ROOT / "requirements.lock").read_text().splitlines():
        if line and not line.startswith("#"):
            name, version = line.split("==")
            lock[name.lower().replace("_", "-")] = version.split("+")[0]
    pins = project["dependencies"] + [
        pin for group in project["optional-dependencies"].values() for pin in group]
    for pin in pins:
        if pin.startswith("torch"):
            continue  # a range: test_the_torch_range_holds_every_torch_set_up_installs
        name, version = pin.split("==")
        name = re.sub(r"\[.*\]", "", name).lower().replace("_", "-")
        assert lock.get(name) == version, f"{pin} but requirements.lock has {lock.get(name)}"


def test_the_torch_range_holds_every_torch_set_up_installs() -> None:
    """pyproject states the torch versions nestor is tested with as a range; each torch a
    lock pins (requirements.lock's, the CUDA build's, each requirements-torchX.Y.lock's
    of `make test-short SHORT_TORCH=X.Y`) lies in it, and its ends are locks set-up installs."""
    from packaging.specifiers import SpecifierSet
    from packaging.version import Version

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    [torch_pin] = [pin for pin in project["dependencies"] if pin.startswith("torch")]
    allowed = SpecifierSet(torch_pin.removeprefix("torch"))
    locks = [ROOT / "requirements.lock", ROOT / "requirements-cuda.lock",
             *sorted(ROOT.glob("requirements-torch*.lock"))]
    versions = []
    for lock in locks:
        [line] = [line for line in lock.read_text().splitlines() if line.startswith("torch=")]
        versions.append(Version(re.sub(r"^torch=+", "", line).split("+")[0]))
        assert versions[-1] in allowed, f"{lock.name}: {line} is outside {torch_pin}"
    assert len(locks) >= 4, "the short run's torch locks (requirements-torchX.Y.lock)"
    oldest = min(versions)
    assert f">={oldest.major}.{oldest.minor}" in torch_pin, (torch_pin, oldest)


def test_the_benches_published_searchers_are_pinned_and_installed() -> None:
    """bench/many_at_once_bench.py and auto_heldout_bench.py run nevergrad's NGOpt and
    DeepHyper's CBO beside nestor's searches: `make setup` installs both from the lock, so
    a fresh clone runs them."""
    from bench.many_at_once_bench import available

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    for package, search in (("nevergrad", "ngopt"), ("deephyper", "cbo")):
        bench_pins = project["optional-dependencies"]["bench"]
        assert any(pin.startswith(f"{package}==") for pin in bench_pins), package
        assert available(search), f"{package} does not import in this venv: rerun make setup"
    # bench/own_code_bench.py and multifidelity_auto_bench.py drive Syne Tune's ASHA and
    # BOHB: pinned in requirements-peers.lock (installed without xgboost), and importable.
    peers = (ROOT / "requirements-peers.lock").read_text().splitlines()
    assert "syne-tune==0.16.0" in peers
    assert not any(line.startswith(("xgboost==", "nvidia-nccl-cu12==")) for line in
                   (ROOT / "requirements.lock").read_text().splitlines())
    from syne_tune.optimizer.baselines import ASHA, BOHB  # noqa: F401


@pytest.mark.parametrize("module", ["nestor.search", "nestor.orchestrator.commands.cli",
                                    "nestor.trainers", "nestor.trainers.catalog"])
def test_light_imports_stay_light(module: str) -> None:
    code = (
        f"import sys, {module}\n"
        "heavy = [m for m in ('torch', 'ray', 'mlflow', 'horovod', 'optuna') if m in sys.modules]\n"
        "print(','.join(heavy))"
    )
    result = run([sys.executable, "-c", code])
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "", f"importing {module} pulled in {result.stdout.strip()}"


def test_search_never_imports_ray_mlflow_or_horovod() -> None:
    offenders = []
    for path in (ROOT / "search").rglob("*.py"):
        for line in path.read_text().splitlines():
            if re.match(r"\s*(import|from)\s+(ray|mlflow|horovod)\b", line):
                offenders.append(f"{path.relative_to(ROOT)}: {line.strip()}")
    assert offenders == []


def test_trainers_never_import_search_algorithms_or_mlflow() -> None:
    offenders = []
    for path in (ROOT / "trainers").rglob("*.py"):
        for line in path.read_text().splitlines():
            if re.match(r"\s*(import|from)\s+(search|mlflow|optuna|deap)\b", line):
                offenders.append(f"{path.relative_to(ROOT)}: {line.strip()}")
    assert offenders == []


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--help"], "nestor tunes and orchestrates"),
        (["validate", "--help"], "exit\nstatus is 2"),
        (["trainers", "--help"], "built-in trainers"),
        (["--version"], "nestor, version 0.1.0"),
    ],
)
def test_console_command_explains_itself(argv: list[str], expected: str) -> None:
    result = run([str(VENV_BIN / "nestor"), *argv])
    assert result.returncode == 0, result.stderr
    assert expected.replace("\n", " ") in " ".join(result.stdout.split())


def test_trainers_command_lists_catalog() -> None:
    from nestor.trainers.catalog import DATASETS, TRAINERS

    result = run([str(VENV_BIN / "nestor"), "trainers"])
    assert result.returncode == 0, result.stderr
    for name in [*DATASETS, *TRAINERS]:
        assert name in result.stdout


def test_second_setup_is_a_no_op() -> None:
    result = run(["bash", str(ROOT / "scripts" / "setup.sh")], timeout=600)
    assert result.returncode == 0, result.stderr
    assert "building Horovod" not in result.stderr
    assert "creating" not in result.stderr
