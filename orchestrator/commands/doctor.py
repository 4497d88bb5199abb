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

import json
import os
import platform
import re
import shutil
import socket
import subprocess
import sys
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

RAY_PROBE_TIMEOUT_S = 20.0
RESETUP = "rerun set-up on this node (NESTOR_FORCE_SETUP=1 make setup)"

_RAY_PROBE = r"""
import json, sys
import ray
try:
    ray.init(address=sys.argv[1], log_to_driver=False, logging_level="ERROR")
except Exception as exc:
    said = (str(exc).splitlines() or [""])[0]
    print(json.dumps({"error": f"{type(exc).__name__}: {said}"}))
    sys.exit(0)
nodes = []
for node in ray.nodes():
    if not node.get("Alive"):
        continue
    res = node.get("Resources", {})
    nodes.append({"node_id": node["NodeID"], "address": node.get("NodeManagerAddress"),
                  "cpus": res.get("CPU", 0), "gpus": res.get("GPU", 0)})
found = {"address": ray.get_runtime_context().gcs_address, "nodes": nodes}
if len(sys.argv) > 2:  # --run-dir: does every node see it?
    from pathlib import Path
    from orchestrator.backends.ray.visibility import RunDirNotShared, check_run_dir_shared
    try:
        views = check_run_dir_shared(Path(sys.argv[2]))
        found["run_dir"] = {"path": sys.argv[2], "shared": True, "nodes": len(views)}
    except RunDirNotShared as exc:
        found["run_dir"] = {"path": sys.argv[2], "shared": False, "error": str(exc)}
    except OSError as exc:
        found["run_dir"] = {"path": sys.argv[2], "shared": False,
                            "error": f"cannot write a marker there: {exc}"}
print(json.dumps(found))
"""


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


def local_ray_address() -> str | None:
    """The cluster last started on this machine, as ``ray.init(address="auto")`` finds
    it (Ray's own record, left behind even when that cluster is gone)."""
    record = Path(os.environ.get("RAY_TMPDIR", "/tmp")) / "ray" / "ray_current_cluster"
    try:
        return record.read_text().strip() or None
    except OSError:
        return None


def _listening(address: str, timeout_s: float = 2.0) -> bool:
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]") or "127.0.0.1", int(port)),
                                      timeout=timeout_s):
            return True
    except (OSError, ValueError):
        return False


def ray_cluster(address: str | None, timeout_s: float = RAY_PROBE_TIMEOUT_S,
                run_dir: Path | None = None) -> dict[str, Any]:
    """The Ray cluster at ``address`` (or RAY_ADDRESS, or the one last started on this
    machine), asked from a child process that gives up after ``timeout_s``; with
    ``run_dir``, also whether every node sees that directory
    (``orchestrator.backends.ray.visibility``).

    Nothing is started, and nothing is waited for where no one listens: a GCS port
    that refuses the connection is answered at once."""
    target = address or os.environ.get("RAY_ADDRESS") or local_ray_address()
    if target is None:
        return {"reachable": False, "asked": None,
                "error": "none given (--address or RAY_ADDRESS) and none started here"}
    if target.count(":") == 1 and not target.startswith(("ray://", "http")) \
            and not _listening(target):
        return {"reachable": False, "asked": target, "error": "nothing listens there"}
    try:
        extra = [str(Path(run_dir).resolve())] if run_dir is not None else []
        done = subprocess.run([sys.executable, "-c", _RAY_PROBE, target, *extra],
                              capture_output=True, text=True, check=False,
                              timeout=timeout_s + (30 if run_dir is not None else 0))
    except subprocess.TimeoutExpired:
        return {"reachable": False, "asked": target,
                "error": f"it listens but did not let this driver in within {timeout_s:.0f} s"
                         " (a cluster with token authentication needs RAY_AUTH_MODE=token and"
                         " its RAY_AUTH_TOKEN)"}
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return {"reachable": False, "asked": target, "error": tail}
    found = json.loads(lines[-1])
    if "error" in found:
        return {"reachable": False, "asked": target, "error": found["error"]}
    return {"reachable": True, "asked": target, **found}


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


def node_builds(timeout_s: float = 120.0) -> list[dict[str, Any]]:
    """The torch and Horovod builds on each live node of the connected Ray cluster
    that offers GPUs, as its ranks import them: one zero-CPU task per node."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    def build() -> dict[str, Any]:  # nested: sent by value, the node need not import this
        import socket

        found: dict[str, Any] = {"host": socket.gethostname()}
        try:
            import torch

            found.update(torch=torch.__version__, torch_cuda=torch.version.cuda)
        except Exception as exc:
            found.update(torch=None, torch_error=f"{type(exc).__name__}: {exc}")
        try:
            import horovod
            import horovod.torch as hvd

            found.update(horovod=horovod.__version__, nccl_built=bool(hvd.nccl_built()))
        except Exception:  # no Horovod: the torch backend needs none
            found.update(horovod=None)
        return found

    probe = ray.remote(num_cpus=0)(build)
    nodes = [n for n in ray.nodes() if n.get("Alive") and n["Resources"].get("GPU")]
    refs = [probe.options(scheduling_strategy=NodeAffinitySchedulingStrategy(
        n["NodeID"], soft=False)).remote() for n in nodes]
    return [{**found, "gpus": node["Resources"]["GPU"]}
            for found, node in zip(ray.get(refs, timeout=timeout_s), nodes, strict=True)]


def build_problems(builds: list[dict[str, Any]], backends: set[str]) -> list[str]:
    """What would make ranks granted GPUs unable to use them, per node.

    >>> build_problems([{"host": "n1", "gpus": 8, "torch": "2.13.0+cpu", "torch_cuda": None,
    ...                  "horovod": None}], {"torch"})
    ['n1 (8 GPUs): torch 2.13.0+cpu is a CPU-only build']
    """
    problems = []
    for node in builds:
        where = f"{node['host']} ({node['gpus']:g} GPUs)"
        if node.get("torch") is None:
            problems.append(f"{where}: torch cannot be imported ({node.get('torch_error')})")
        elif not node.get("torch_cuda"):
            problems.append(f"{where}: torch {node['torch']} is a CPU-only build")
        if "horovod" in backends and node.get("horovod") and not node.get("nccl_built"):
            problems.append(f"{where}: Horovod {node['horovod']} was built without NCCL")
    return problems


def rank_env() -> dict[str, str]:
    """What every rank of a gang started from here receives besides its place in the
    gang (orchestrator.backends.ray.gangs.ranks_env): the site's NCCL_*, GLOO_SOCKET_IFNAME,
    UCX_* and FI_* from this environment, and the stall timeouts. A stage's
    ``trial.env`` adds its own per trial."""
    from orchestrator.backends.ray.gangs import ranks_env

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
        "ray": ray_cluster(address, run_dir=run_dir) if ray else None,
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
