"""`make bench-gpu`: what one GPU does with nestor, checked in under five minutes.

Run on a GPU node from the offline bundle (README, "Cluster nodes without internet"):

    make bench-gpu BENCH_PY=~/nestor-env/bin/python     # bench/results/gpu-check.json
    python -m bench.gpu_check --cpu --results /tmp/r      # the rehearsal: all but CUDA

Steps, each printed as it goes and each given its share of the time (the whole check
stops itself at ``--deadline``, 270 s by default, well within five minutes; a step that
runs out of its time is recorded as timed out and the next one starts):

1. ``environment``: torch and its CUDA build, cuDNN, NCCL, the driver and the GPUs
   (``nvidia-smi``), and Ray's view of the node (``ray.cluster_resources()``);
2. ``throughput``: the built-in trainers (mlp, cnn) on mnist5k, fp32 and bf16, with the
   training split kept on the GPU and with batches copied from pinned host memory
   (trainers/feed.py chooses by size; here both are forced): samples/s after the first
   epoch, and the peak GPU memory;
3. ``packing``: 4 one-rank trials packed on one GPU (``gpus_per_trial: 0.25``) against
   the same 4 one at a time, through ``nestor run``: wall time and GPU utilisation;
4. ``sweep``: a ``nestor sweep`` end to end, every trial recording ``device_gpu`` 1, its
   runs in the MLflow store;
5. ``own_code``: a user's function trainer and a user's command trainer, written as a user
   writes them (torch on ``ctx.device``; a script that picks ``cuda`` when torch sees one),
   two trials of each packed on one GPU through one ``nestor run``: every trial must
   record ``device_gpu`` 1 and say from inside the user's code that its tensors were on
   the GPU;
6. ``dp2``: on two or more GPUs, dp 2 over NCCL on the torch backend (and Horovod where
   it is installed) against dp 1: scaling efficiency, throughput(2) / (2 x throughput(1)).

``--cpu`` rehearses every step on the CPU (device_gpu 0, Gloo, slots for GPU shares)
with tiny sizes, so that everything but CUDA has run before a GPU is at hand
(tests/bench/test_gpu_check.py). Its results go to ``--results`` as
``gpu-check-rehearsal.json``; only a GPU run writes ``gpu-check.json``, which
bench/report.py renders.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from bench.machine import RESULTS, ROOT, describe, provenance

RESULT_NAME, REHEARSAL_NAME = "gpu-check", "gpu-check-rehearsal"
STEPS = ("environment", "throughput", "packing", "sweep", "own_code", "dp2")
SHARES = {"environment": 0.1, "throughput": 0.27, "packing": 0.23, "sweep": 0.12,
          "own_code": 0.13, "dp2": 0.15}
"""Each step's share of the deadline; time a step leaves unused goes to the later ones."""


class Clock:
    """The check's one deadline, and how much of it a step may use."""

    def __init__(self, deadline: float) -> None:
        self.start, self.deadline = time.monotonic(), deadline

    def elapsed(self) -> float:
        return time.monotonic() - self.start

    def left(self) -> float:
        return self.deadline - self.elapsed()

    def budget(self, step: str) -> float:
        """The step's share of the time left, given the shares of the steps after it."""
        later = STEPS[STEPS.index(step):]
        return max(0.0, self.left() * SHARES[step] / sum(SHARES[s] for s in later))


def say(clock: Clock, text: str) -> None:
    print(f"[gpu-check {clock.elapsed():5.0f}s] {text}", flush=True)


def run(argv: list[str], timeout: float, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    """A child in its own process group, killed with all it started (Ray's processes,
    ranks) when its time is up: raises TimeoutError then."""
    child = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             start_new_session=True, **kwargs)
    try:
        out, _ = child.communicate(timeout=max(timeout, 1.0))
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGKILL)
        child.communicate()
        raise TimeoutError(f"{' '.join(map(str, argv[:4]))} ... ran past its {timeout:.0f} s"
                           ) from None
    return subprocess.CompletedProcess(argv, child.returncode, out, "")


class Utilisation:
    """GPU utilisation sampled by ``nvidia-smi`` every 200 ms while a step runs."""

    def __init__(self, enabled: bool) -> None:
        self.samples: list[float] = []
        self.child: subprocess.Popen[str] | None = None
        if enabled:
            self.child = subprocess.Popen(
                ["nvidia-smi", "--query-gpu=utilization.gpu", "--format=csv,noheader,nounits",
                 "-lms", "200"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
            threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.child is not None and self.child.stdout is not None
        for line in self.child.stdout:
            try:  # one line per GPU: the busiest counts
                self.samples.append(float(line.strip()))
            except ValueError:
                continue

    def stop(self) -> dict[str, float | None]:
        if self.child is not None:
            self.child.kill()
            self.child.wait()
        if not self.samples:
            return {"gpu_util_mean": None, "gpu_util_max": None}
        return {"gpu_util_mean": round(sum(self.samples) / len(self.samples), 1),
                "gpu_util_max": max(self.samples)}


# --- the steps ------------------------------------------------------------------------

RAY_VIEW = """
import json, ray
ray.init(include_dashboard=False, log_to_driver=False, configure_logging=False)
print("RAY " + json.dumps({"cluster_resources": ray.cluster_resources(),
                           "ray": ray.__version__}))
ray.shutdown()
"""


def nccl_version(torch: Any) -> str | None:
    """NCCL's version as torch reports it (a tuple, or one number in older releases)."""
    try:
        found = torch.cuda.nccl.version()
    except (AttributeError, RuntimeError):
        return None
    return ".".join(map(str, found)) if isinstance(found, tuple) else str(found)


def environment(args: argparse.Namespace, clock: Clock) -> dict[str, Any]:
    import torch

    found: dict[str, Any] = {
        "python": sys.version.split()[0], "torch": torch.__version__,
        "cuda_build": torch.version.cuda, "cuda_available": torch.cuda.is_available(),
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "gpus": [], "driver": None,
    }
    if torch.cuda.is_available():
        found["nccl"] = nccl_version(torch)
        for index in range(torch.cuda.device_count()):
            p = torch.cuda.get_device_properties(index)
            found["gpus"].append({"name": p.name, "capability": f"{p.major}.{p.minor}",
                                  "memory_gib": round(p.total_memory / 2**30, 1)})
        smi = run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"], 30)
        found["driver"] = smi.stdout.split("\n")[0].strip() or None
    elif not args.cpu:
        raise RuntimeError("torch sees no GPU (torch.cuda.is_available() is False; torch"
                           f" {torch.__version__}, CUDA build {torch.version.cuda}): run this"
                           " on a GPU node with the node's CUDA build of torch, or --cpu")
    say(clock, f"torch {found['torch']} (CUDA build {found['cuda_build']}), driver"
               f" {found['driver']}, GPUs {[g['name'] for g in found['gpus']] or 'none'}")
    view = run([args.python, "-c", RAY_VIEW], clock.budget("environment"), cwd=args.work)
    line = next((x for x in view.stdout.splitlines() if x.startswith("RAY ")), None)
    if line is None:
        raise RuntimeError(f"Ray did not start: {view.stdout[-1500:]}")
    found.update(json.loads(line[4:]))
    say(clock, f"Ray {found['ray']} sees {found['cluster_resources']}")
    return found


WORKER = """
import json, sys, time
import torch
import nestor.trainers.feed as feed
from nestor.trainers._run import run_trial
from nestor.trainers._types import TrainerRef, TrialRequest
settings, variants = json.loads(sys.argv[1]), json.loads(sys.argv[2])
for v in variants:
    feed.DEVICE_SHARE = 0.25 if v["data"] == "device" else 0.0
    if torch.cuda.is_available():
        torch.cuda.empty_cache(); torch.cuda.reset_peak_memory_stats()
    request = TrialRequest(trial_id=f"{v['trainer']}-{v['precision']}-{v['data']}",
                           trainer=TrainerRef.builtin(v["trainer"]),
                           settings={**settings, "precision": v["precision"]},
                           config={"lr": 0.01, "batch_size": v["batch_size"]}, backend="torch")
    tick = time.perf_counter()
    result = run_trial(request).to_dict()
    rows = result.get("history") or []
    steady = rows[1:] or rows
    v.update(status=result.get("status"), reason=result.get("reason"),
             wall_s=round(time.perf_counter() - tick, 2),
             samples_per_s=round(sum(r["samples_per_second"] for r in steady) / len(steady), 1)
             if steady else None,
             device_gpu=(result.get("metrics") or {}).get("device_gpu"),
             peak_gpu_mib=round(torch.cuda.max_memory_allocated() / 2**20, 1)
             if torch.cuda.is_available() else None)
    print("VARIANT " + json.dumps(v), flush=True)
"""


def throughput(args: argparse.Namespace, clock: Clock) -> dict[str, Any]:
    settings = ({"dataset": "synthetic", "epochs": 2, "max_train_samples": 256} if args.cpu
                else {"dataset": "mnist5k", "epochs": 6})
    variants = [{"trainer": t, "precision": p, "data": d, "batch_size": 128}
                for t in ("mlp", "cnn") for p in ("fp32", "bf16") for d in ("device", "pinned")]
    say(clock, f"{len(variants)} trainings ({', '.join(f'{k} {v}' for k, v in settings.items())})")
    rows: list[dict[str, Any]] = []
    budget = clock.budget("throughput")
    child = subprocess.Popen([args.python, "-c", WORKER, json.dumps(settings),
                              json.dumps(variants)], cwd=ROOT, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True, start_new_session=True)
    timer = threading.Timer(budget, lambda: os.killpg(child.pid, signal.SIGKILL))
    timer.start()
    tail: list[str] = []
    try:
        assert child.stdout is not None
        for line in child.stdout:
            if line.startswith("VARIANT "):
                row = json.loads(line[8:])
                rows.append(row)
                say(clock, f"  {row['trainer']} {row['precision']} data on {row['data']}:"
                           f" {row['samples_per_s']} samples/s, peak {row['peak_gpu_mib']} MiB,"
                           f" device_gpu {row['device_gpu']} ({row['status']})")
            else:
                tail = [*tail[-30:], line]
        child.wait()
    finally:
        timer.cancel()
    result: dict[str, Any] = {"settings": settings, "rows": rows}
    if len(rows) < len(variants):
        result["timed_out" if child.returncode == -signal.SIGKILL else "error"] = (
            f"{len(rows)} of {len(variants)} variants ran in {budget:.0f} s:"
            f" {''.join(tail)[-800:]}")
    return result


def spec_yaml(name: str, slots: int, share: float, settings: dict[str, Any], budget: int) -> str:
    spec = {"name": name, "resources": {"slots": slots, "gpus_per_trial": share},
            "stages": [{"name": "trials", "kind": "hpo", "backend": "torch",
                        "trainer": {"name": "cnn", "settings": settings},
                        "parallel": {"data": 1, "model": 1},
                        "search": {"algorithm": "random", "budget": budget, "seed": 0},
                        "space": {"lr": {"type": "float", "low": 0.01, "high": 0.1}},
                        "objective": {"metric": "val_accuracy", "mode": "max"}}]}
    return json.dumps(spec)  # YAML reads JSON


def trials_of(run_dir: Path) -> list[dict[str, Any]]:
    data = json.loads((run_dir / "results.json").read_text())
    return [t for stage in data["stages"] for t in stage["trials"]]


def timeline(run_dir: Path) -> dict[str, Any]:
    """When the trials ran, from the journal: the run's start to the first trial, each
    trial's seconds, and how many ran at once at most (packing helps only if they overlap
    and the GPU work, not each trial's start-up, fills them)."""
    from nestor.orchestrator.journal.journal import read_events

    events = read_events(run_dir / "journal.jsonl")
    begun = next(e["time"] for e in events if e["event"] == "workflow_started")
    started = {e["trial"]["id"]: e["time"] for e in events if e["event"] == "trial_started"}
    ended = {e["trial"]["id"]: e["time"] for e in events if e["event"] == "trial_finished"}
    spans = [(started[t], ended[t]) for t in started if t in ended]
    at_once = max((sum(a <= s < b for a, b in spans) for s, _ in spans), default=0)
    return {"to_first_trial_s": round(min((s for s, _ in spans), default=begun) - begun, 1),
            "trial_s": [round(b - a, 1) for a, b in sorted(spans)], "at_once_max": at_once,
            "trials_end_to_exit_s": None if not spans else round(
                max(e["time"] for e in events) - max(b for _, b in spans), 1)}


def store_runs(run_dir: Path) -> int:
    """Runs in the run directory's MLflow store (sqlite), read without MLflow."""
    with sqlite3.connect(run_dir / "mlflow.db") as db:
        return int(db.execute("select count(*) from runs").fetchone()[0])


def nestor(args: argparse.Namespace) -> str:
    return str(Path(args.python).parent / "nestor")


def packing(args: argparse.Namespace, clock: Clock) -> dict[str, Any]:
    settings = ({"dataset": "synthetic", "epochs": 1, "max_train_samples": 256} if args.cpu
                else {"dataset": "mnist5k", "epochs": 30})
    # 30 epochs: a trial's GPU work (about 3 s on an H200) outlasts its start-up, so that
    # what packing saves is the GPU's idle share, not only the gangs' start-up (at 3 epochs
    # a trial was under 1 s of work: 4 trials took 38 s packed or not, 2026-11-28)
    shapes = {"packed": (4, 0.25), "one_at_a_time": (1, 1.0)}
    found: dict[str, Any] = {"settings": settings, "trials": 4}
    for label, (slots, share) in shapes.items():
        budget = clock.budget("packing") / (2 if label == "packed" else 1)
        spec = args.work / f"packing-{label}.yaml"
        spec.write_text(spec_yaml(f"packing-{label}", slots, share, settings, 4))
        run_dir = args.work / f"packing-{label}"
        util = Utilisation(not args.cpu)
        tick = time.monotonic()
        try:
            done = run([nestor(args), "run", str(spec), "--run-dir", str(run_dir)], budget,
                       cwd=args.work)
        finally:
            usage = util.stop()
        wall = time.monotonic() - tick
        if done.returncode != 0:
            raise RuntimeError(f"nestor run ({label}) exited {done.returncode}:"
                               f" {done.stdout[-1500:]}")
        trials = trials_of(run_dir)
        found[label] = {"slots": slots, "gpus_per_trial": share, "wall_s": round(wall, 1),
                        "trials_ok": sum(t.get("status") == "completed" for t in trials), **usage,
                        "timeline": timeline(run_dir)}
        line = found[label]["timeline"]
        say(clock, f"  {label}: 4 trials in {wall:.1f} s, GPU utilisation mean"
                   f" {usage['gpu_util_mean']} % (max {usage['gpu_util_max']}); first trial"
                   f" after {line['to_first_trial_s']} s, trials {line['trial_s']} s, at most"
                   f" {line['at_once_max']} at once")
    found["speedup"] = round(found["one_at_a_time"]["wall_s"] / found["packed"]["wall_s"], 2)
    return found


def sweep(args: argparse.Namespace, clock: Clock) -> dict[str, Any]:
    run_dir = args.work / "sweep"
    settings = ["dataset=synthetic", "epochs=1"] if args.cpu else ["dataset=mnist5k", "epochs=2"]
    argv = [nestor(args), "sweep", "--trainer", "mlp",
            *[part for s in settings for part in ("--set", s)], "--param",
            "lr=float:0.01:0.1:log", "--algo", "random", "--budget", "3", "--backend",
            "torch", "--run-dir", str(run_dir)]
    tick = time.monotonic()
    done = run(argv, clock.budget("sweep"), cwd=args.work)
    wall = time.monotonic() - tick
    if done.returncode != 0:
        raise RuntimeError(f"nestor sweep exited {done.returncode}: {done.stdout[-1500:]}")
    trials = trials_of(run_dir)
    gpu = [(t.get("metrics") or {}).get("device_gpu") for t in trials]
    found = {"wall_s": round(wall, 1), "trials": len(trials), "device_gpu": gpu,
             "mlflow_runs": store_runs(run_dir), "command": " ".join(argv[1:])}
    want = 0.0 if args.cpu else 1.0
    found["ok"] = bool(trials) and all(g == want for g in gpu) and found["mlflow_runs"] >= len(
        trials)
    say(clock, f"  {len(trials)} trials in {wall:.1f} s, device_gpu {gpu}, MLflow store"
               f" {found['mlflow_runs']} runs")
    if not found["ok"]:
        raise RuntimeError(f"the sweep's trials must each record device_gpu {want:g} and have"
                           f" an MLflow run: {found}")
    return found


USER_FUNCTION = """
import torch


def train(config, ctx):
    torch.manual_seed(0)
    x = torch.randn(8192, 64, device=ctx.device)
    y = x @ torch.randn(64, 1, device=ctx.device)
    model = torch.nn.Linear(64, 1).to(ctx.device)
    opt = torch.optim.SGD(model.parameters(), lr=config["lr"])
    for epoch in range(config["epochs"]):
        loss = ((model(x) - y) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        ctx.report({"loss": loss.item()}, step=epoch + 1)
    return {"loss": loss.item(), "on_gpu": float(next(model.parameters()).is_cuda)}
"""

USER_COMMAND = """
import argparse

import torch

parser = argparse.ArgumentParser()
parser.add_argument("--lr", type=float, default=0.01)
parser.add_argument("--epochs", type=int, default=20)
args = parser.parse_args()
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
torch.manual_seed(0)
x = torch.randn(8192, 64, device=device)
y = x @ torch.randn(64, 1, device=device)
model = torch.nn.Linear(64, 1).to(device)
opt = torch.optim.SGD(model.parameters(), lr=args.lr)
for epoch in range(args.epochs):
    loss = ((model(x) - y) ** 2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(f"FoM: {loss.item():.6f}", flush=True)
print(f"nestor.metric on_gpu={float(next(model.parameters()).is_cuda)}", flush=True)
"""


def own_code_spec(python: str, share: float) -> str:
    """Two stages, a function trainer's and a command trainer's, two trials each, packed
    two to a GPU: what a user's own code meets on a GPU node."""
    common = {"kind": "hpo", "backend": "torch", "parallel": {"data": 1, "model": 1},
              "search": {"algorithm": "random", "budget": 2, "seed": 0},
              "space": {"lr": {"type": "float", "low": 0.01, "high": 0.1, "log": True}},
              "objective": {"metric": "loss", "mode": "min"}}
    stages = [{"name": "function", **common,
               "trainer": {"function": "user_train:train", "settings": {"epochs": 20}}},
              {"name": "command", **common, "objective": {"metric": "FoM", "mode": "min"},
               "trainer": {"command": [python, "user_fit.py"], "settings": {"epochs": 20}}}]
    return json.dumps({"name": "own-code", "resources": {"slots": 2, "gpus_per_trial": share},
                       "stages": stages})


def finished_metric(run_dir: Path, name: str) -> dict[tuple[str, str], float | None]:
    """Each trial's last value of a metric its code returned or logged (``nestor.metric``
    line, ``ctx.log_metrics``), by (stage, trial id): trial ids repeat across stages.
    As its ``trial_finished`` event holds it, read the engine's way
    (``outcome.last_logged``)."""
    from nestor.orchestrator.engine.outcome import last_logged
    from nestor.orchestrator.journal.journal import read_events

    found: dict[tuple[str, str], float | None] = {}
    for event in read_events(run_dir / "journal.jsonl"):
        if event["event"] == "trial_finished":
            returned = (event.get("metrics") or {}).get(name)
            value = last_logged(event.get("logged"), name) if returned is None else returned
            found[event["stage"], event["trial"]["id"]] = None if value is None else float(value)
    return found


def own_code(args: argparse.Namespace, clock: Clock) -> dict[str, Any]:
    (args.work / "user_train.py").write_text(USER_FUNCTION)
    (args.work / "user_fit.py").write_text(USER_COMMAND)
    spec = args.work / "own-code.yaml"
    spec.write_text(own_code_spec(args.python, 0.5))
    run_dir = args.work / "own-code"
    tick = time.monotonic()
    done = run([nestor(args), "run", str(spec), "--run-dir", str(run_dir)],
               clock.budget("own_code"), cwd=args.work,
               env={**os.environ, "PYTHONPATH": str(args.work)})
    wall = time.monotonic() - tick
    if done.returncode != 0:
        raise RuntimeError(f"nestor run exited {done.returncode}: {done.stdout[-1500:]}")
    data = json.loads((run_dir / "results.json").read_text())
    want = 0.0 if args.cpu else 1.0
    found: dict[str, Any] = {"wall_s": round(wall, 1), "mlflow_runs": store_runs(run_dir),
                             "gpus_per_trial": 0.5, "stages": {}}
    on_gpu = finished_metric(run_dir, "on_gpu")
    for stage in data["stages"]:
        trials = stage["trials"]
        row = {"trials": len(trials),
               "completed": sum(t.get("status") == "completed" for t in trials),
               "device_gpu": [(t.get("metrics") or {}).get("device_gpu") for t in trials],
               "on_gpu": [on_gpu.get((stage["name"], t["id"])) for t in trials]}
        found["stages"][stage["name"]] = row
        say(clock, f"  {stage['name']} trainer: {row['completed']} of {row['trials']} trials"
                   f" completed, device_gpu {row['device_gpu']}, the user's code on the GPU"
                   f" {row['on_gpu']}")
    rows = found["stages"].values()
    found["ok"] = (set(found["stages"]) == {"function", "command"} and all(
        r["trials"] == r["completed"] == 2 and r["device_gpu"] == r["on_gpu"] == [want] * 2
        for r in rows) and found["mlflow_runs"] >= 4)
    if not found["ok"]:
        raise RuntimeError(f"each user trainer's trials must complete, record device_gpu"
                           f" {want:g} and run their tensors there: {found}")
    return found


def dp2(args: argparse.Namespace, clock: Clock, gpus: int) -> dict[str, Any]:
    if not args.cpu and gpus < 2:
        say(clock, f"  skipped: {gpus} GPU (NCCL needs a GPU per rank)")
        return {"skipped": f"{gpus} GPU: NCCL puts one rank on a GPU, so dp 2 needs two"}
    from bench.trainers_bench import run_trial

    backends = ["torch"]
    if (Path(args.python).parent / "horovodrun").exists():
        backends.append("horovod")
    settings = ({"dataset": "synthetic", "epochs": 2, "batch_per_rank": True,
                 "max_train_samples": 256} if args.cpu
                else {"dataset": "mnist5k", "epochs": 6, "batch_per_rank": True})
    config = {"lr": 0.01, "batch_size": 128}
    found: dict[str, Any] = {"settings": settings, "backends": {}}
    if "horovod" not in backends:
        found["horovod"] = "not installed (the bundle was built without --horovod)"
    ends = clock.elapsed() + clock.budget("dp2")
    runs = [(backend, dp) for backend in backends for dp in (1, 2)]
    for backend in backends:
        row: dict[str, Any] = {}
        for dp in (1, 2):
            share = (ends - clock.elapsed()) / len(runs[runs.index((backend, dp)):])
            if share < 3:
                raise TimeoutError(f"dp2: no time left for {backend} dp {dp}")
            try:
                result = run_trial(dp, dp, 1, settings, config, share, backend)
            except subprocess.TimeoutExpired:
                raise TimeoutError(f"{backend} dp {dp} ran past its {share:.0f} s") from None
            rows = result["history"][1:] or result["history"]
            row[f"dp{dp}_samples_per_s"] = round(
                sum(r["samples_per_second"] for r in rows) / len(rows), 1)
        row["efficiency"] = round(row["dp2_samples_per_s"] / (2 * row["dp1_samples_per_s"]), 3)
        found["backends"][backend] = row
        say(clock, f"  {backend}: dp 1 {row['dp1_samples_per_s']} samples/s, dp 2"
                   f" {row['dp2_samples_per_s']}: efficiency {row['efficiency']:.0%}")
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cpu", action="store_true",
                        help="the rehearsal: every step on the CPU, tiny sizes")
    parser.add_argument("--deadline", type=float, default=270.0,
                        help="seconds the whole check may take (default 270)")
    parser.add_argument("--results", type=Path,
                        help="where the results file goes (default bench/results; with"
                             " --cpu, a temporary folder)")
    parser.add_argument("--python", default=sys.executable,
                        help="the python whose nestor and trainers run (default: this one)")
    args = parser.parse_args(argv)
    clock = Clock(args.deadline)
    results = args.results or (Path(tempfile.mkdtemp(prefix="gpu-check-")) if args.cpu
                               else RESULTS)
    name = REHEARSAL_NAME if args.cpu else RESULT_NAME
    out: dict[str, Any] = {"mode": "cpu rehearsal" if args.cpu else "gpu",
                           "deadline_s": args.deadline, "steps": {}, "machine": describe()}
    say(clock, f"{out['mode']}: {', '.join(STEPS)}; stops itself at {args.deadline:.0f} s")
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as tmp:
        args.work = Path(tmp)
        gpus = 0
        for step in STEPS:
            tick = time.monotonic()
            say(clock, f"{step} ({clock.budget(step):.0f} s of {clock.left():.0f} s left)")
            try:
                if clock.left() < 5:
                    raise TimeoutError("no time left")
                if step == "environment":
                    found = environment(args, clock)
                    gpus = len(found["gpus"])
                elif step == "dp2":
                    found = dp2(args, clock, gpus)
                else:
                    found = globals()[step](args, clock)
                found["status"] = "timed out" if "timed_out" in found else (
                    "failed" if "error" in found else "skipped" if "skipped" in found else "ok")
            except TimeoutError as exc:
                found = {"status": "timed out", "timed_out": str(exc)}
            except Exception as exc:  # recorded, and the next step still runs
                found = {"status": "failed", "error": f"{type(exc).__name__}: {exc}"}
            found["step_s"] = round(time.monotonic() - tick, 1)
            out["steps"][step] = found
            if found["status"] not in ("ok", "skipped"):
                say(clock, f"{step}: {found['status']}:"
                           f" {found.get('error') or found.get('timed_out')}"[:2000])
            out["elapsed_s"] = round(clock.elapsed(), 1)
            path = write(results, name, out)
            if step == "environment" and found["status"] != "ok" and not args.cpu:
                break  # without a GPU the rest would measure the CPU under a GPU's name
    failed = [s for s, f in out["steps"].items() if f["status"] not in ("ok", "skipped")]
    say(clock, f"done in {clock.elapsed():.0f} s: {path}"
               + (f"; not ok: {', '.join(failed)}" if failed else "; every step ok"))
    return 1 if failed else 0


def write(results: Path, name: str, out: dict[str, Any]) -> Path:
    """The results so far (after every step, so a killed check leaves what it did)."""
    results.mkdir(parents=True, exist_ok=True)
    path = results / f"{name}.json"
    machine = provenance(out)
    bundle = ROOT.parent / "manifest.json"  # run from a bundle's nestor-src/: no git there
    if machine.get("commit") == "unknown" and bundle.is_file():
        built = json.loads(bundle.read_text())
        machine |= {"commit": built.get("commit") or "unknown", "dirty": None,
                    "bundle": {k: built.get(k) for k in ("tag", "torch", "horovod", "built")}}
    path.write_text(json.dumps(out | {"machine": machine}, indent=2) + "\n")
    return path


if __name__ == "__main__":
    sys.exit(main())
