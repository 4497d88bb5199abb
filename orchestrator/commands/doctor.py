"""`nestor doctor`: what this machine will train with, and what is wrong with it.

A GPU node set up with the CPU build of torch, or with a Horovod built without
NCCL, still runs every trial: slowly, on the CPU, and without saying so. That
is the mistake this command exists to catch before a sweep spends an
allocation on it. It reports, from the very Python that runs trials:

- torch: version, build (CPU or CUDA, and which CUDA), whether CUDA works;
- NCCL: the version torch carries, and the ``nvidia-nccl-*`` package;
- Horovod: the operations it was built with (``nccl_built``, ``gloo_built``,
  ``mpi_built``, ``cuda_built``);
- GPUs on this node (``nvidia-smi -L``, the NVIDIA driver's own list, and what
  torch sees), and the driver's version;
- the Ray cluster, where one is reachable (``--address``, ``RAY_ADDRESS``, or
  one started on this machine): its nodes with their CPUs and GPUs. It never
  starts one: the probe runs ``ray.init(address=...)`` in a child process with
  a time limit, because a cluster with token authentication makes a driver
  without the token wait for ever;
- what every rank will receive from here: the site's ``NCCL_*``,
  ``GLOO_SOCKET_IFNAME``, ``UCX_*`` and ``FI_*``, and the stall timeouts.

>>> report = gather()                                   # doctest: +SKIP
>>> report["warnings"]                                  # doctest: +SKIP
['this node has 4 GPUs, but torch 2.13.0+cpu is a CPU-only build: ...']
"""

from __future__ import annotations

import platform
import re
import shutil
import subprocess
import sys
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from nestor.orchestrator.backends.ray import probe

RESETUP = "rerun set-up on this node (NESTOR_FORCE_SETUP=1 make setup)"



def run_tool(argv: list[str], timeout: float = 20.0) -> subprocess.CompletedProcess[str] | None:
    """Run a tool (argv, no shell); None where it is missing, hangs or cannot start."""
    if shutil.which(argv[0]) is None:
        return None
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None


def nvidia_gpus() -> dict[str, Any]:
    """The GPUs the NVIDIA driver lists on this node (``nvidia-smi -L``, what set-up
    reads too), the driver version and the newest CUDA it supports."""
    info: dict[str, Any] = {"nvidia_smi": shutil.which("nvidia-smi"), "names": [],
                            "driver": None, "driver_cuda": None, "error": None}
    listed = run_tool(["nvidia-smi", "-L"])
    if listed is None:
        info["error"] = "nvidia-smi not found" if info["nvidia_smi"] is None else "nvidia-smi hung"
        return info
    if listed.returncode != 0:
        said = (listed.stderr or listed.stdout).strip().splitlines()
        info["error"] = said[0] if said else f"nvidia-smi -L exited with {listed.returncode}"
        return info
    info["names"] = [m.group(1).strip() for m in
                     re.finditer(r"^GPU \d+: (.*?)(?: \(UUID:.*)?$", listed.stdout, re.M)]
    header = run_tool(["nvidia-smi"])
    if header is not None and header.returncode == 0:
        if found := re.search(r"Driver Version:\s*([\d.]+)", header.stdout):
            info["driver"] = found.group(1)
        if found := re.search(r"CUDA Version:\s*([\d.]+)", header.stdout):
            info["driver_cuda"] = found.group(1)
    return info


def _package(name: str) -> str | None:
    try:
        return version(name)
    except PackageNotFoundError:
        return None


def torch_info() -> dict[str, Any]:
    """torch's build and what it sees; imported here, in the trials' own Python."""
    try:
        import torch
        import torch.distributed as dist
    except Exception as exc:  # not installed, or a broken CUDA library
        return {"version": None, "error": f"{type(exc).__name__}: {exc}"}
    cuda = torch.version.cuda
    info: dict[str, Any] = {
        "version": torch.__version__,
        "build": "CUDA" if cuda else "CPU",
        "cuda": cuda,
        "cuda_available": bool(cuda) and torch.cuda.is_available(),
        "devices": torch.cuda.device_count() if cuda else 0,
        "nccl": None,
        "gloo_available": dist.is_available() and dist.is_gloo_available(),
        "nccl_available": dist.is_available() and dist.is_nccl_available(),
    }
    if cuda:
        try:
            info["nccl"] = ".".join(str(part) for part in torch.cuda.nccl.version())
        except Exception:  # a CUDA build without NCCL
            info["nccl"] = None
    info["nccl_packages"] = {name: v for name in ("nvidia-nccl-cu13", "nvidia-nccl-cu12")
                             if (v := _package(name))}
    return info


def _nccl_code(code: int) -> str:
    """NCCL_VERSION_CODE to text: 22907 (2.29.7; codes since 2.9 are X*10000+Y*100+Z)."""
    if code >= 10000:
        return f"{code // 10000}.{code % 10000 // 100}.{code % 100}"
    return f"{code // 1000}.{code % 1000 // 100}.{code % 100}"


def horovod_info() -> dict[str, Any]:
    """Horovod's version and the operations its library was built with."""
    try:
        import horovod
        import horovod.torch as hvd
    except Exception as exc:
        return {"version": None, "error": f"{type(exc).__name__}: {exc}"}
    nccl = int(hvd.nccl_built())
    return {
        "version": horovod.__version__,
        "nccl_built": bool(nccl),
        "nccl": _nccl_code(nccl) if nccl else None,
        "gloo_built": bool(hvd.gloo_built()),
        "mpi_built": bool(hvd.mpi_built()),
        "cuda_built": bool(hvd.cuda_built()),
    }


def warnings_for(report: dict[str, Any]) -> list[str]:
    """What will make a GPU node train on its CPU, or not train at all."""
    warnings = []
    gpus = len(report["gpus"]["names"])
    torch, hvd = report["torch"], report["horovod"]
    if torch.get("version") is None:
        warnings.append(f"torch cannot be imported ({torch.get('error')}): {RESETUP}")
    if hvd.get("version") is None:
        warnings.append(f"Horovod cannot be imported ({hvd.get('error')}): {RESETUP}; or give"
                        " stages `backend: torch` (torch.distributed), which needs no Horovod")
    if gpus:
        if torch.get("build") == "CPU":
            warnings.append(
                f"this node has {gpus} GPU(s), but torch {torch['version']} is a CPU-only build:"
                f" every rank will train on the CPU; {RESETUP} (it installs the CUDA build where"
                " nvidia-smi lists a GPU)")
        elif torch.get("build") == "CUDA" and not torch.get("cuda_available"):
            warnings.append(
                f"this node has {gpus} GPU(s) and torch is built for CUDA {torch['cuda']}, but"
                f" torch cannot use them (driver {report['gpus']['driver']} supports CUDA"
                f" {report['gpus']['driver_cuda']}): update the NVIDIA driver")
        if hvd.get("version") is not None and not hvd.get("nccl_built"):
            warnings.append(
                f"this node has {gpus} GPU(s), but Horovod {hvd['version']} was built without"
                f" NCCL: GPU gradients would go through the CPU; {RESETUP}")
    ray = report.get("ray") or {}
    if ray.get("run_dir") and not ray["run_dir"]["shared"]:
        warnings.append(ray["run_dir"]["error"])
    if gpus and ray.get("reachable"):
        here = [node for node in ray["nodes"] if not node["gpus"]]
        if here and len(here) == len(ray["nodes"]):
            warnings.append(
                f"this node has {gpus} GPU(s), but no node of the Ray cluster at"
                f" {ray['address']} offers any: start Ray with its GPUs (`ray start"
                " --num-gpus N`, and CUDA_VISIBLE_DEVICES not empty)")
    return warnings


def rank_env() -> dict[str, str]:
    """What every rank of a gang started from here receives besides its place in the
    gang (orchestrator.backends.ray.gangs.ranks_env): the site's NCCL_*, GLOO_SOCKET_IFNAME,
    UCX_* and FI_* from this environment, and the stall timeouts. A stage's
    ``trial.env`` adds its own per trial."""
    from nestor.orchestrator.backends.ray.gangs import ranks_env

    return dict(sorted(ranks_env().items()))


def gather(address: str | None = None, *, ray: bool = True,
           run_dir: Path | None = None) -> dict[str, Any]:
    """Everything `nestor doctor` prints, as one JSON-able dict."""
    report: dict[str, Any] = {
        "python": {"version": platform.python_version(), "executable": sys.executable},
        "host": platform.node(),
        "gpus": nvidia_gpus(),
        "torch": torch_info(),
        "horovod": horovod_info(),
        "ray": probe.ray_cluster(address, run_dir=run_dir) if ray else None,
        "rank_env": rank_env(),
    }
    report["warnings"] = warnings_for(report)
    return report


def _yes(flag: bool | None) -> str:
    return "[green]yes[/]" if flag else "[dim]no[/]"


def render(report: dict[str, Any], out: Any) -> None:
    """The report as text on a rich console; warnings last, in red."""
    from rich.markup import escape
    from rich.table import Table

    table = Table(box=None, show_header=False, pad_edge=False)
    table.add_column(style="bold")
    table.add_column()
    py = report["python"]
    table.add_row("python", escape(f"{py['version']} ({py['executable']})"))
    torch = report["torch"]
    if torch.get("version") is None:
        table.add_row("torch", f"[red]not importable[/]: {escape(str(torch.get('error')))}")
    else:
        build = (f"CUDA {torch['cuda']}, CUDA usable: {_yes(torch['cuda_available'])}"
                 if torch["build"] == "CUDA" else "CPU only")
        table.add_row("torch", f"{escape(torch['version'])} ({build})")
        nccl = torch["nccl"] or ("none (CPU build)" if torch["build"] == "CPU" else "none")
        packages = ", ".join(f"{k} {v}" for k, v in torch["nccl_packages"].items())
        table.add_row("NCCL", escape(nccl + (f"; package {packages}" if packages else "")))
        table.add_row("torch.distributed",
                      f"gloo {_yes(torch['gloo_available'])}, nccl {_yes(torch['nccl_available'])}")
    hvd = report["horovod"]
    if hvd.get("version") is None:
        table.add_row("Horovod", f"[red]not importable[/]: {escape(str(hvd.get('error')))}")
    else:
        nccl = f" ({hvd['nccl']})" if hvd["nccl"] else ""
        table.add_row("Horovod", f"{hvd['version']}: nccl_built {_yes(hvd['nccl_built'])}{nccl},"
                      f" gloo_built {_yes(hvd['gloo_built'])}, mpi_built {_yes(hvd['mpi_built'])},"
                      f" cuda_built {_yes(hvd['cuda_built'])}")
    gpus = report["gpus"]
    if gpus["names"]:
        names = ", ".join(sorted(set(gpus["names"])))
        driver = (f"; driver {gpus['driver']} (CUDA {gpus['driver_cuda']})"
                  if gpus["driver"] else "")
        seen = f"; torch sees {torch.get('devices', 0)}"
        table.add_row("GPUs on this node", escape(f"{len(gpus['names'])} x {names}{driver}{seen}"))
    else:
        why = gpus["error"] or "nvidia-smi -L lists none"
        table.add_row("GPUs on this node", escape(f"0 ({why})"))
    ray = report["ray"]
    if ray is None:
        table.add_row("Ray cluster", "not asked (--no-ray)")
    elif not ray["reachable"]:
        where = f" at {ray['asked']}" if ray["asked"] else ""
        table.add_row("Ray cluster", escape(f"none reachable{where} ({ray['error']});"
                                            " `nestor run` starts its own on this machine"))
    else:
        nodes = ray["nodes"]
        cpus = sum(node["cpus"] for node in nodes)
        gpu_total = sum(node["gpus"] for node in nodes)
        per_node = sorted({node["gpus"] for node in nodes})
        table.add_row("Ray cluster", escape(
            f"{ray['address']}: {len(nodes)} node(s), {cpus:g} CPUs, {gpu_total:g} GPUs"
            f" (GPUs per node: {', '.join(f'{g:g}' for g in per_node)})"))
        if ray.get("run_dir"):
            seen = ray["run_dir"]
            table.add_row("run directory", escape(
                f"{seen['path']}: " + (f"seen by all {seen['nodes']} nodes" if seen["shared"]
                                       else "[not seen by every node: see the warning]")))
    sent = report.get("rank_env") or {}
    table.add_row("ranks receive", escape(", ".join(f"{k}={v}" for k, v in sent.items())
                                          or "nothing"))
    out.print(table)
    for warning in report["warnings"]:
        out.print(f"[bold red]WARNING[/]: {escape(warning)}", soft_wrap=True)
    if not report["warnings"]:
        out.print("[green]no problems found[/]")
