"""What machine a benchmark ran on, and where its results go.

Every results file states the cores, the GPU (or none) and the load average
at start and end: on a shared machine the load says how much to trust a
figure, and figures are only compared within one file.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"


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


def describe() -> dict[str, Any]:
    """The machine now; call :func:`finish` with it when the benchmark ends."""
    found = gpus()
    return {
        "host": platform.node(),
        "cores": cores(),
        "cpu": _cpu_model(),
        "memory_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
        "gpu": ", ".join(found) if found else "none",
        "started": time.strftime("%Y-%m-%d %H:%M:%S"),
        "load_average_at_start": list(os.getloadavg()),
    }


def finish(start: dict[str, Any]) -> dict[str, Any]:
    return start | {"finished": time.strftime("%Y-%m-%d %H:%M:%S"),
                    "load_average_at_end": list(os.getloadavg())}


def write_result(name: str, result: dict[str, Any]) -> Path:
    """Write bench/results/NAME.json; returns its path relative to the repository."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps(result, indent=2))
    return path.relative_to(ROOT)
