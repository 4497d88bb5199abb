"""The offline bundle (scripts/bundle.py): built for this machine's Python, it stays
within its size goal, installs with no network into a clean venv that holds only torch,
and a `nestor sweep` runs from it end to end, its runs in the MLflow store.

The build needs the package index (its downloads are cached in ~/.cache/nestor/bundle);
everything after it runs in a network namespace with no network where ``unshare`` may
make one (as root, or with user namespaces), so nothing on the node's side can reach an
index."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
GOAL = 40 * 2**20

TORCH_CLOSURE = """
import importlib.metadata as md, json, re
from packaging.requirements import Requirement
seen, todo, tops = set(), ["torch"], set()
while todo:
    name = todo.pop()
    if name in seen:
        continue
    seen.add(name)
    dist = md.distribution(name)
    for f in dist.files or []:
        if not str(f).startswith(".."):
            tops.add(str(f).split("/")[0])
    for text in dist.requires or []:
        r = Requirement(text)
        if r.marker is None or r.marker.evaluate({"extra": ""}):
            todo.append(r.name)
print(json.dumps(sorted(tops)))
"""


def offline() -> list[str]:
    """A prefix that runs a command without network (loopback only), or [] where this
    machine cannot make a network namespace."""
    probe = ["unshare", "-rn", "sh", "-c", "ip link set lo up"]
    if shutil.which("unshare") and shutil.which("ip") and subprocess.run(
            probe, capture_output=True, check=False).returncode == 0:
        return ["unshare", "-rn", "sh", "-c", 'ip link set lo up && exec "$@"', "offline"]
    return []


def torch_only_venv(path: Path) -> Path:
    """A venv of this Python with no system site-packages and only torch and what torch
    requires (links to this venv's copies: a node's preinstalled torch)."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True)
    site = next((path / "lib").glob("python3.*/site-packages"))
    tops = json.loads(subprocess.run([sys.executable, "-c", TORCH_CLOSURE], capture_output=True,
                                     text=True, check=True).stdout)
    here = Path(next(p for p in sys.path if p.endswith("site-packages")))
    for top in tops:
        if (here / top).exists():
            (site / top).symlink_to(here / top)
    return path / "bin" / "python"


@pytest.mark.slow
@pytest.mark.timeout(3600)  # xz of ~390 MiB: minutes on a quiet machine, 35 on 2 busy cores
def test_the_bundle_installs_offline_beside_torch_and_runs_a_sweep(tmp_path: Path) -> None:
    version = f"{sys.version_info[0]}.{sys.version_info[1]}"
    archive = tmp_path / "bundle.tar.xz"
    built = subprocess.run([sys.executable, str(ROOT / "scripts" / "bundle.py"), "--python",
                            version, "--out", str(archive)],
                           capture_output=True, text=True, check=False, timeout=3000)
    assert built.returncode == 0, built.stderr[-3000:]
    size = archive.stat().st_size
    assert size <= GOAL, f"the bundle is {size / 2**20:.1f} MiB, over its 40 MiB goal"
    scientific = tmp_path / "bundle-scientific.tar.xz"
    with tarfile.open(archive) as tar:
        names = tar.getnames()
        tar.extractall(tmp_path / "unpacked", filter="data")
    bundle = tmp_path / "unpacked" / f"nestor-bundle-cp{version.replace('.', '')}"
    assert not any("/site-packages/torch/" in n for n in names), "torch must be left out"
    assert not any(f"/site-packages/{part}/" in n for n in names
                   for part in ("ray/jars", "ray/rllib", "ray/serve", "ray/tune", "ray/data",
                                "ray/train", "numpy", "scipy"))
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert "mlflow_skinny" in manifest["distributions"]
    assert "mlflow" not in manifest["distributions"]
    assert {"numpy", "scipy", "scikit_learn", "matplotlib"} <= set(manifest["scientific"])

    torch_python = torch_only_venv(tmp_path / "torch-env")
    hidden = subprocess.run([str(torch_python), "-c", "import ray"], capture_output=True,
                            check=False, cwd=tmp_path)
    assert hidden.returncode != 0, "the torch-only venv must not see ray before the bundle"
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "VIRTUAL_ENV") and not k.startswith("PIP_")}
    env["PATH"] = "/usr/bin:/bin"  # no .venv/bin: only what the bundle installs
    env["PYTHONDONTWRITEBYTECODE"] = "1"  # as on the GPU node: imports write no bytecode
    node = tmp_path / "node-env"
    prefix = offline()
    install = [*prefix, str(bundle / "install.sh"), str(node), str(torch_python)]
    # The torch-only venv has no numpy: the scientific archive is needed, and asked for.
    refused = subprocess.run(install, capture_output=True, text=True, check=False,
                             cwd=tmp_path, env=env, timeout=300)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "lacks numpy" in refused.stderr and scientific.name in refused.stderr, refused.stderr
    with tarfile.open(scientific) as tar:
        tar.extractall(tmp_path / "unpacked", filter="data")
    installed = subprocess.run(install, capture_output=True, text=True, check=False,
                               cwd=tmp_path, env=env, timeout=300)
    assert installed.returncode == 0, installed.stderr[-3000:]
    assert "torch found" in installed.stdout, installed.stdout
    assert "scientific stack installed" in installed.stdout, installed.stdout
    # Bytecode for what was copied (sources only travel): without it each process compiles
    # what it imports, 9.6 s of a driver's start on the first GPU node.
    compiled = subprocess.run(
        [str(node / "bin" / "python"), "-c",
         "import importlib.util as u, sys\n"
         "for name in sys.argv[1:]:\n"
         "    spec = u.find_spec(name)\n"
         "    print(name, __import__('os').path.exists(u.cache_from_source(spec.origin)))",
         "nestor.orchestrator.commands.cli", "ray._private.worker", "mlflow.tracking.client",
         "sqlalchemy.orm.session", "optuna.samplers", "numpy.linalg"],
        capture_output=True, text=True, check=True, cwd=tmp_path, env=env)
    assert "False" not in compiled.stdout, compiled.stdout

    where = subprocess.run([str(node / "bin" / "python"), "-c",
                            "import nestor, torch; print(nestor.__file__);"
                            " print(torch.__file__)"],
                           capture_output=True, text=True, check=True, cwd=tmp_path, env=env)
    nestor_at, torch_at = where.stdout.split()
    assert nestor_at.startswith(str(node)), "nestor must come from the bundle, not the checkout"
    assert torch_at.startswith(str(tmp_path / "torch-env")), torch_at

    run_dir = tmp_path / "run"
    swept = subprocess.run(
        [*prefix, str(node / "bin" / "nestor"), "sweep", "--trainer", "mlp", "--set",
         "dataset=synthetic", "--set", "epochs=1", "--param", "lr=float:0.01:0.1:log",
         "--algorithm", "random", "--budget", "3", "--backend", "torch", "--run-dir", str(run_dir)],
        capture_output=True, text=True, check=False, cwd=tmp_path, env=env, timeout=600)
    assert swept.returncode == 0, swept.stdout[-3000:] + swept.stderr[-3000:]
    (stage,) = json.loads((run_dir / "results.json").read_text())["stages"]
    assert stage["n_trials"] == 3 and stage["n_failed"] == 0
    with sqlite3.connect(run_dir / "mlflow.db") as db:
        runs = db.execute("select count(*) from runs where status = 'FINISHED'").fetchone()[0]
        metrics = db.execute("select count(*) from metrics where key = 'val_accuracy'"
                             ).fetchone()[0]
    assert runs >= 3 and metrics >= 3, (runs, metrics)


def _bundle_module():
    import importlib.util

    spec = importlib.util.spec_from_file_location("bundle", ROOT / "scripts" / "bundle.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_requirements_leave_torch_out_and_take_the_lighter_mlflow_and_ray() -> None:
    bundle = _bundle_module()
    reqs = bundle.requirements("preinstalled")
    names = {r.split("==")[0] for r in reqs}
    assert all("==" in r for r in reqs), reqs  # at the lock's versions
    assert "torch" not in names and "mlflow" not in names and "ray" in names
    assert {"mlflow-skinny", "sqlalchemy", "alembic", "cryptography", "databricks-sdk"} <= names
    assert "torch" in {r.split("==")[0] for r in bundle.requirements("include")}


def test_install_refuses_another_python_and_says_which(tmp_path: Path) -> None:
    fake = tmp_path / "nestor-bundle-cp399"
    fake.mkdir()
    shutil.copy2(ROOT / "scripts" / "bundle_install.py", fake / "install.py")
    (fake / "manifest.json").write_text(json.dumps({"python": "3.99"}))
    done = subprocess.run([sys.executable, str(fake / "install.py"), str(tmp_path / "env")],
                          capture_output=True, text=True, check=False, timeout=60)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "this bundle is for Python 3.99" in done.stderr
    assert f"make bundle PYTHON={sys.version_info[0]}.{sys.version_info[1]}" in done.stderr
    assert not (tmp_path / "env").exists()
