"""Install an offline nestor bundle into a virtual environment: no network, no pip,
no compiler; it copies files (seconds).

Travels inside the bundle as ``install.py`` (scripts/bundle.py puts it there); run it
with the node's python, the one that has torch:

    tar -xJf nestor-bundle-cp312.tar.xz
    tar -xJf nestor-bundle-cp312-scientific.tar.xz        # only where the node lacks numpy,
                                                          # scipy, scikit-learn or matplotlib
    nestor-bundle-cp312/install.sh ~/nestor-env            # python3 on PATH
    nestor-bundle-cp312/install.sh ~/nestor-env /path/to/python3.12 [--scientific]

A new VENV is made with ``--system-site-packages``, so that the node's torch (and its
CUDA libraries) shows through; when this python is itself a virtual environment's, the
new one sees that environment's packages instead (a ``.pth`` line). An existing VENV (one
that already has torch, say) gets the bundle added. Standard library only: it runs
before anything else is installed.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def fail(message: str) -> None:
    print(f"install: error: {message}", file=sys.stderr)
    sys.exit(2)


def make_venv(venv: Path) -> None:
    """A venv that sees the packages of the environment this python belongs to (its
    torch): the system's site-packages, or, where this python is itself a venv's, that
    venv's site-packages and none of the system's."""
    in_venv = sys.prefix != sys.base_prefix
    subprocess.run([sys.executable, "-m", "venv", "--without-pip",
                    *([] if in_venv else ["--system-site-packages"]), str(venv)], check=True)
    if in_venv:
        (site_of(venv) / "_nestor_base_env.pth").write_text(
            sysconfig.get_paths()["purelib"] + "\n")


def site_of(venv: Path) -> Path:
    tag = f"python{sys.version_info[0]}.{sys.version_info[1]}"
    return venv / "lib" / tag / "site-packages"


def write_scripts(venv: Path, scripts: dict[str, str]) -> None:
    """The console scripts, as pip writes them, for this venv's python."""
    python = venv / "bin" / "python"
    for name, target in scripts.items():
        module, _, attr = target.partition(":")
        head, _, rest = attr.partition(".")
        call = f"{head}{'.' + rest if rest else ''}"
        path = venv / "bin" / name
        path.write_text(f"#!{python}\nimport sys\nfrom {module} import {head}\n"
                        f"sys.exit({call}())\n")
        path.chmod(0o755)
    for script in sorted((HERE / "scripts").glob("*")) if (HERE / "scripts").is_dir() else []:
        text = script.read_bytes()
        if text.startswith(b"#!python"):
            text = f"#!{python}".encode() + text[len(b"#!python"):]
        (venv / "bin" / script.name).write_bytes(text)
        (venv / "bin" / script.name).chmod(0o755)


def scientific(venv: Path, site: Path, manifest: dict, force: bool) -> None:
    """The scientific stack (numpy, scipy, scikit-learn, matplotlib ...) from the bundle's
    second archive where the node lacks any of it (or when asked, ``--scientific``: say,
    the node's numpy is too old), else the node's own."""
    probe = subprocess.run(
        [str(venv / "bin" / "python"), "-c",
         "import importlib.util as u, sys\n"
         "print(' '.join(m for m in sys.argv[1:] if u.find_spec(m) is None))",
         *manifest["scientific_imports"]], capture_output=True, text=True, check=True)
    missing = probe.stdout.split()
    if not missing and not force:
        print("install: the node's numpy, scipy, scikit-learn and matplotlib are used")
        return
    part = HERE / "scientific" / "site-packages"
    if not part.is_dir():
        why = f"this python lacks {', '.join(missing)}" if missing else "--scientific asks"
        fail(f"{why}: unpack {manifest['scientific_archive']} beside"
             f" {HERE.name}.tar.xz (tar -xJf it in the same folder) and run install.sh again")
    shutil.copytree(part, site, dirs_exist_ok=True, symlinks=True)
    print(f"install: the bundle's scientific stack installed ({', '.join(manifest['scientific'])})")


def byte_compile(venv: Path, paths: list[Path]) -> None:
    """Compile what was copied to bytecode once, on all cores, as pip does when it installs.

    The archive carries sources only. Without ``.pyc`` files every process (the driver,
    each Ray worker, each rank) compiles what it imports, again in every process where
    ``PYTHONDONTWRITEBYTECODE`` is set or the folder is read-only: on the first H200 node
    that was 5,421 compiles, 9.6 s, in one ``nestor run``'s driver alone (2026-11-28).
    Only what the bundle copied is compiled, not an existing venv's own packages. A file
    that does not compile (a template, say) is left as it is."""
    started = time.monotonic()
    done = subprocess.run([str(venv / "bin" / "python"), "-m", "compileall", "-q", "-j", "0",
                           *map(str, paths)], capture_output=True, text=True, check=False)
    compiled = sum(1 for path in paths for _ in path.rglob("*.pyc"))
    print(f"install: {compiled} modules compiled to bytecode in"
          f" {time.monotonic() - started:.1f} s"
          + ("" if done.returncode == 0 else " (some files are not Python; left as sources)"))


def main(argv: list[str]) -> int:
    if len(argv) < 1 or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if argv else 2
    started = time.monotonic()
    manifest = json.loads((HERE / "manifest.json").read_text())
    here = f"{sys.version_info[0]}.{sys.version_info[1]}"
    if here != manifest["python"]:
        fail(f"this bundle is for Python {manifest['python']}, but {sys.executable} is"
             f" {here}; run it with a python{manifest['python']} or build a bundle for"
             f" {here} (make bundle PYTHON={here})")
    argv = [a for a in argv if a != "--scientific"] + [a for a in argv if a == "--scientific"]
    venv = Path(argv[0]).absolute()
    if not (venv / "bin" / "python").exists():
        if venv.exists() and any(venv.iterdir()):
            fail(f"{venv} exists and is not a virtual environment; name a new directory"
                 " or an existing venv")
        make_venv(venv)
    site = site_of(venv)
    if not site.is_dir():
        fail(f"{venv} is a virtual environment of another Python (no {site})")
    shutil.copytree(HERE / "site-packages", site, dirs_exist_ok=True, symlinks=True)
    scientific(venv, site, manifest, force="--scientific" in argv)
    if (HERE / "data").is_dir():  # wheels' data files (nestor's Slurm templates)
        shutil.copytree(HERE / "data", venv, dirs_exist_ok=True, symlinks=True)
    write_scripts(venv, manifest["console_scripts"])
    copied = [site / entry.name for part in (HERE / "site-packages",
                                             HERE / "scientific" / "site-packages")
              if part.is_dir() for entry in part.iterdir()
              if entry.is_dir() or entry.suffix == ".py"]
    byte_compile(venv, [path for path in copied if path.exists()])
    check = subprocess.run(
        [str(venv / "bin" / "python"), "-c",
         "import importlib.util as u, nestor.orchestrator, ray, mlflow\n"
         "torch = u.find_spec('torch')\n"
         "print('ray', ray.__version__, 'mlflow', mlflow.__version__,"
         " 'torch', 'found' if torch else 'MISSING')"],
        capture_output=True, text=True, check=False)
    if check.returncode != 0:
        fail(f"the installed bundle does not import:\n{check.stderr}")
    print(f"install: {venv} ready in {time.monotonic() - started:.1f} s ({check.stdout.strip()})")
    if "MISSING" in check.stdout:
        print("install: warning: this python has no torch; install the node's torch into"
              f" {venv} or run install.sh with the python that has it", file=sys.stderr)
    print(f"install: use {venv}/bin/nestor; the GPU check: cd {HERE / 'nestor-src'} &&"
          f" make bench-gpu BENCH_PY={venv}/bin/python")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
