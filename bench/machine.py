"""What machine a benchmark ran on, and where its results go.

Every results file states, under ``machine``, the command that wrote it, the
commit it ran on (and whether the tree was dirty), the CPU, cores, memory, the
GPU (or none) and the load average at start and end: on a shared machine the
load says how much to trust a figure, and figures are only compared within one
file. ``write_result`` adds what a benchmark did not record itself, so every
benchmark gets it by the call it already makes.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
# Set by bench/steps.py for every step of one ``make bench-quick`` / ``make bench``:
# results that share a run id came from one run, on one machine, at one commit.
RUN_ENV, SIZE_ENV = "NESTOR_BENCH_RUN", "NESTOR_BENCH_SIZE"


def run() -> dict[str, str]:
    """The run id and size (quick, full) this benchmark is a step of; {} when it was
    started by hand, not by bench/steps.py."""
    found = {"run": os.environ.get(RUN_ENV), "size": os.environ.get(SIZE_ENV)}
    return {k: v for k, v in found.items() if v}


def cores() -> int:
    """Cores this process may use (the affinity mask, not the host's count)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def gpus() -> list[str]:
    """GPU names from ``nvidia-smi``; [] where there is none or no driver."""
    if shutil.which("nvidia-smi") is None:
        return []
    try:
        done = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [line.strip() for line in done.stdout.splitlines() if line.strip()] \
        if done.returncode == 0 else []


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def commit() -> dict[str, Any]:
    """The commit the benchmark ran on, and whether the tree differed from it
    (``dirty``: a figure from uncommitted code cannot be rerun from the hash). Changes
    to what no benchmark runs (tests/, Markdown, the results and report themselves)
    do not count."""
    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True,
                                  timeout=30, check=False)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    head = git("rev-parse", "HEAD")
    if head is None and (ROOT / "SOURCE.json").is_file():  # a bundle's nestor-src
        recorded = json.loads((ROOT / "SOURCE.json").read_text())
        return {"commit": recorded["commit"], "dirty": recorded["dirty"], "source": "bundle"}
    status = git("status", "--porcelain", "--untracked-files=no", "--", ".",
                 ":(exclude)bench/results", ":(exclude)bench/figures", ":(exclude)tests",
                 ":(exclude,glob)**/*.md")
    return {"commit": head or "unknown", "dirty": bool(status) if status is not None else None}


def command(argv: list[str] | None = None) -> str:
    """How the benchmark was started, as one would retype it from the repository root."""
    argv = list(sys.argv if argv is None else argv)
    if argv and argv[0].endswith(".py"):
        path = Path(argv[0]).resolve()
        head = (f"python {path.relative_to(ROOT)}" if path.is_relative_to(ROOT)
                else f"python {argv[0]}")
        spec = getattr(sys.modules.get("__main__"), "__spec__", None)
        if spec is not None and spec.name == f"bench.{path.stem}":  # run as python -m
            head = f"python -m bench.{path.stem}"
        return " ".join([head, *argv[1:]])
    return " ".join(["python", *argv])


def blas() -> list[dict[str, Any]]:
    """The BLAS (and OpenMP) libraries numpy and scipy call, each with its version,
    the CPU kernel it picked (``architecture``: OpenBLAS chooses one per CPU, and
    ``OPENBLAS_CORETYPE`` overrides it) and its threads. A search whose model fits
    (lq-CMA-ES, GPs, TPE's Parzen estimators) can draw differently on another kernel:
    floating-point sums in another order change a seed's path, so a figure is
    tied to the kernel it was made on."""
    try:
        import numpy  # noqa: F401  (loads the BLAS threadpoolctl reports)
        from threadpoolctl import threadpool_info
    except ImportError:
        return []
    return [{"library": i.get("internal_api"), "version": i.get("version"),
             "kernel": i.get("architecture"), "threads": i.get("num_threads"),
             "coretype_env": os.environ.get("OPENBLAS_CORETYPE")}
            for i in threadpool_info() if i.get("user_api") == "blas"]


def describe() -> dict[str, Any]:
    """The machine now, with the command and the commit; call :func:`finish` with it
    when the benchmark ends (``write_result`` does, where a result has no machine)."""
    found = gpus()
    return {
        "command": command(),
        **commit(),
        **run(),
        "host": platform.node(),
        "cores": cores(),
        "cpu": _cpu_model(),
        "memory_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
        "gpu": ", ".join(found) if found else "none",
        "blas": blas(),
        "started": time.strftime("%Y-%m-%d %H:%M:%S"),
        "load_average_at_start": list(os.getloadavg()),
    }


def finish(start: dict[str, Any]) -> dict[str, Any]:
    return start | {"finished": time.strftime("%Y-%m-%d %H:%M:%S"),
                    "load_average_at_end": list(os.getloadavg())}


def provenance(result: dict[str, Any]) -> dict[str, Any]:
    """What a results file must say about where it came from: the command, the
    commit (and dirty flag), the machine and its load. Taken from the result's own
    ``machine`` (``describe()`` at the start, ``finish`` at the end) where it has one;
    otherwise the machine now, its load at the end only. (orchestration_bench keeps a
    one-line ``machine`` and the dict in ``machine_detail``.)"""
    recorded = next((m for m in (result.get("machine"), result.get("machine_detail"))
                     if isinstance(m, dict) and "cores" in m), None)
    if recorded is None:
        recorded = finish(describe())
    elif "load_average_at_end" not in recorded:
        recorded = finish(recorded)
    return {"command": command(), **commit(), **run()} | recorded


def write_result(name: str, result: dict[str, Any]) -> Path:
    """Write bench/results/NAME.json with its provenance under ``machine`` (command,
    commit, machine, load); returns its path relative to the repository."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    result = result | {"machine": provenance(result)}
    path.write_text(json.dumps(result, indent=2) + "\n")
    return path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
