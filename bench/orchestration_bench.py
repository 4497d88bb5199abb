"""Orchestration benchmarks, measured side by side in one run on one machine.

1. End to end, trivial trials, 2 at a time on 2 slots, the systems interleaved:
   for each trial count, ``--reps`` repetitions (default 3), each running every
   system once in an order rotated by one per repetition (A B C D, B C D A, ...),
   each in a fresh process with cold caches (nestor's cache folder, where its
   MLflow schema is kept, is a new empty one for every run). The systems:
   nestor's command trials (``nestor sweep --cmd "/bin/echo FoM: 0.5"``: a
   process per trial on warm 1-rank gangs), nestor's function trials (``nestor
   run`` of an hpo stage whose trainer is a Python function returning x**2),
   both with the journal's fsync and every run in MLflow when the command exits
   (checked); Ray Tune on its own Ray running the same function as a function
   trainable, with ``reuse_actors=True`` (the nearer match to nestor's warm
   gangs) and by default (a new actor per trial; at most
   ``--tune-new-actor-cap`` trials, about a second each here: its per-trial
   figure is compared); and a plain Optuna ask/tell loop with no scheduling.
   Every run is timed from its command's start to its exit (imports, Ray's start
   and shutdown, MLflow's catching up all included); every trial's end comes
   from the system itself (nestor's journal, Tune's results). Reported per
   system and count: the median and range over the repetitions of the total,
   and beside it where the time goes: start-up (command start to the first
   trial's end), steady state (between the first and the last trial's end, per
   trial after the first) and wind-down (last trial's end to exit; for nestor
   also results-to-exit, what MLflow costs after the results are printed).
   Ratios are taken only at equal trial counts, median against median.
2. The MLflow projection's rate into the run directory's own SQLite store, at
   each store size asked (``--store-sizes``, default 1,000, 10,000 and 100,000
   runs): a journal of that many trivial trials (2 events each) projected from
   nothing, the rate taken over the whole batches that cover the last 1,000 runs
   before the size is reached (also per CPU-second of the process: less
   dependent on what else the machine runs). ``server``: the same into a real
   local ``mlflow server`` started here (``--server-runs``, default 1,000).
3. The projection's lag while a run goes on: the journal of the simulated
   2,048-slot mixed workload (bench/simulate.py, async schedule; journal times
   on the simulator's clock) appended again at ``--lag-speedup`` times its rate
   (default 10) for ``--lag-window-s`` seconds, a projector tailing it; the lag
   of an event is from its append to MLflow showing it (the projector's count
   passing it). Percentiles reported.
4. Slot utilization (busy slot-seconds / available slot-seconds) of a genetic
   search whose trial durations vary tenfold: generational against
   asynchronous schedule, same seed, same slots.
5. mnist: runs and time to a validation-accuracy threshold on mnist5k for
   genetic, Bayesian and random search, every run counted.

    .venv/bin/python bench/orchestration_bench.py [--trials 250,2000,10000] \
        [--parts overhead,projection,lag,utilization,mnist]

Prints tables and writes bench/results/orchestration-PARTS.json (bench.machine).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # bench.machine, when run as a script

TRIVIAL = '''
import time


def trivial(config, ctx):
    return {"score": config["x"] ** 2, "t_end": time.time()}


def sleepy(config, ctx):
    # Durations vary tenfold across the space: 0.2 s to 2 s.
    time.sleep(0.2 + 1.8 * config["u"])
    return {"score": (config["u"] - 0.3) ** 2 + config["v"] ** 2}
'''

SYSTEMS = {
    "nestor": "nestor, command trials (a process per trial on warm gangs)",
    "nestor-fn": "nestor, function trials (warm gangs)",
    "tune-reuse": "ray tune, reuse_actors=True",
    "tune": "ray tune, default (new actor per trial)",
}
OPTUNA = "optuna ask/tell loop (no scheduling)"


def machine() -> str:
    import platform

    return f"{os.cpu_count()} CPU cores, {platform.machine()}, no GPU used"


def run_nestor(spec_text: str, workdir: Path, name: str) -> dict:
    from nestor.orchestrator.commands.run import run_spec

    spec = workdir / f"{name}.yaml"
    spec.write_text(spec_text)
    _, results = run_spec(spec, run_dir=workdir / name)
    return results["stages"][0] | {"total_wall_s": results["wall_time_s"]}


def timed_child(system: str, trials: int, workdir: Path, tag: str = "") -> dict[str, Any]:
    """Ray Tune's run of ``trials`` trivial trials, in this (fresh) process.

    Returns every trial's end (as the trial itself measured it), on the wall
    clock; the parent times the process from its start to its exit.
    """
    import ray

    if system == "nestor":
        raise ValueError("nestor is timed as its own command (nestor_sweep), not in a child")
    from ray import tune

    def objective(config: dict) -> dict:
        return {"score": config["x"] ** 2, "t_end": time.time()}

    t0 = time.time()
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False,
             configure_logging=False)
    tuner = tune.Tuner(
        objective,
        param_space={"x": tune.uniform(-1, 1)},
        tune_config=tune.TuneConfig(num_samples=trials, metric="score", mode="min",
                                    max_concurrent_trials=2,
                                    reuse_actors=system == "tune-reuse"),
        run_config=tune.RunConfig(storage_path=str(workdir / f"{system}-{trials}-{tag}"),
                                  verbose=0),
    )
    grid = tuner.fit()
    ray.shutdown()
    returned = time.time()
    if grid.num_errors or len(grid) != trials:
        raise RuntimeError(f"tune ran {len(grid)} trials, {grid.num_errors} failed;"
                           f" {trials} were asked")
    ends = [float(t) for t in grid.get_dataframe()["t_end"]]
    return {"in_process_t0": t0, "ends": sorted(ends), "in_process_returned": returned}


def phases(raw: dict[str, Any]) -> dict[str, float]:
    """Start-up, steady state and wind-down of one timed run (see the docstring)."""
    ends, n = raw["ends"], len(raw["ends"])
    if n < 2:
        raise ValueError(f"a timed run needs at least 2 trials, but got {n}")
    return {
        "startup_s": ends[0] - raw["t0"],
        "steady_ms_per_trial": 1000 * (ends[-1] - ends[0]) / (n - 1),
        "wind_down_s": raw["returned"] - ends[-1],
        "total_s": raw["returned"] - raw["t0"],
        "total_ms_per_trial": 1000 * (raw["returned"] - raw["t0"]) / n,
    }


COMMAND = "/bin/echo FoM: 0.5"  # a trivial command trial


def nestor_sweep(trials: int, workdir: Path, tag: str = "") -> dict[str, Any]:
    """``nestor sweep`` of ``trials`` trivial command trials, 2 at once, timed from the
    command's start to its exit; checks that every event is in MLflow at exit."""
    run_dir = workdir / f"nestor-{trials}{'-' + tag if tag else ''}"
    nestor = str(Path(sys.executable).parent / "nestor")
    return nestor_timed(
        [nestor, "sweep", "--cmd", COMMAND, "--param", "x=float:0:1", "--algo", "random",
         "--budget", str(trials), "--parallel", "2", "--mode", "min", "--seed", "0",
         "--run-dir", str(run_dir)], trials, run_dir,
        cold_cache_env(workdir, f"cmd-{trials}-{tag}"))


FUNCTION_SPEC = """\
name: overhead
resources: {{slots: 2}}
stages:
  - name: tune
    kind: hpo
    trainer: {{function: "bench_trivial:trivial"}}
    search: {{algorithm: random, budget: {trials}, seed: 0}}
    space: {{x: {{type: float, low: 0, high: 1}}}}
    objective: {{metric: score, mode: min}}
"""


def cold_cache_env(workdir: Path, name: str) -> dict[str, str]:
    """The environment of one timed nestor run: its own empty cache folder, so no run
    finds what an earlier one cached (the MLflow schema, profiles)."""
    cache = Path(tempfile.mkdtemp(prefix=f"cache-{name}-", dir=workdir))
    return dict(os.environ, NESTOR_CACHE_DIR=str(cache), XDG_CACHE_HOME=str(cache))


def nestor_timed(argv: list[str], trials: int, run_dir: Path, env: dict[str, str]
                 ) -> dict[str, Any]:
    """One nestor command timed from its start to its exit; the trials' ends from its
    journal; whether MLflow had every event at exit."""
    t0 = time.time()
    done = subprocess.run(argv, capture_output=True, text=True, check=False, env=env)
    returned = time.time()
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[:3])} of {trials} failed:\n{done.stderr[-3000:]}")
    events = [json.loads(line) for line in (run_dir / "journal.jsonl").read_text().splitlines()]
    ends = sorted(e["time"] for e in events if e["event"] == "trial_finished")
    if len(ends) != trials:
        raise RuntimeError(f"nestor ran {len(ends)} trials; {trials} were asked")
    projected = int((run_dir / "mlflow-projected").read_text())
    if projected != len(events):  # recorded, and said: the figure is not the goal's
        print(f"  nestor {trials}: MLflow had {projected} of {len(events)} events at exit",
              flush=True)
    results_at = next(e["time"] for e in events if e["event"] == "workflow_finished")
    return {"t0": t0, "ends": ends, "returned": returned, "results_at": results_at,
            "events": len(events), "events_in_mlflow_at_exit": projected}


def nestor_function_run(trials: int, workdir: Path, tag: str) -> dict[str, Any]:
    """``nestor run`` of ``trials`` function trials (bench_trivial:trivial), 2 at once."""
    spec = workdir / f"overhead-{trials}-{tag}.yaml"
    spec.write_text(FUNCTION_SPEC.format(trials=trials))
    run_dir = workdir / f"nestor-fn-{trials}-{tag}"
    nestor = str(Path(sys.executable).parent / "nestor")
    return nestor_timed([nestor, "run", str(spec), "--run-dir", str(run_dir)], trials, run_dir,
                        cold_cache_env(workdir, f"fn-{trials}-{tag}"))


def timed(system: str, trials: int, workdir: Path, tag: str = "") -> dict[str, float]:
    """One system's run, in a fresh process, timed from its start to its exit."""
    out = workdir / f"timed-{system}-{trials}{'-' + tag if tag else ''}.json"
    if system == "nestor":
        raw = nestor_sweep(trials, workdir, tag)
    elif system == "nestor-fn":
        raw = nestor_function_run(trials, workdir, tag)
    else:
        env = dict(os.environ, PYTHONPATH=f"{workdir}{os.pathsep}{ROOT}{os.pathsep}"
                   f"{os.environ.get('PYTHONPATH', '')}")
        t0 = time.time()
        done = subprocess.run(
            [sys.executable, __file__, "--child", system, "--trials", str(trials),
             "--workdir", str(workdir), "--child-out", str(out), "--child-tag", tag],
            env=env, capture_output=True, text=True, check=False)
        returned = time.time()
        if done.returncode != 0:
            raise RuntimeError(f"{system} with {trials} trials failed:\n{done.stderr[-3000:]}")
        raw = json.loads(out.read_text()) | {"t0": t0, "returned": returned}
    out.write_text(json.dumps(raw))  # what the run recorded, with the parent's clock: for checks
    result = phases(raw)
    if "results_at" in raw:  # what waiting for MLflow (and Ray's shutdown) costs
        result["results_to_exit_s"] = raw["returned"] - raw["results_at"]
        result["events"] = raw["events"]
        result["events_in_mlflow_at_exit"] = raw["events_in_mlflow_at_exit"]
    result["load_average"] = os.getloadavg()[0]
    print(f"  {system:10s} {trials:6d} trials: start-up {result['startup_s']:.1f} s, steady"
          f" {result['steady_ms_per_trial']:.1f} ms/trial, wind-down"
          f" {result['wind_down_s']:.1f} s, total {result['total_s']:.1f} s"
          f" (load {result['load_average']:.1f})", flush=True)
    return result


def interleaved(systems: list[str], reps: int) -> list[list[str]]:
    """The order of each repetition: the systems rotated by one per repetition, so no
    system always runs first (a cold machine) or after the heaviest."""
    return [systems[r % len(systems):] + systems[:r % len(systems)] for r in range(reps)]


def spread(rows: list[dict[str, float]]) -> dict[str, Any]:
    """Median and range over repetitions of every timed figure, and the runs themselves."""
    import statistics

    keys = [k for k in rows[0] if isinstance(rows[0][k], int | float)]
    summary: dict[str, Any] = {}
    for key in keys:
        values = [float(r[key]) for r in rows]
        summary[key] = statistics.median(values)
        summary[f"{key}_range"] = [min(values), max(values)]
    return summary | {"reps": len(rows), "runs": rows}


def overhead(counts: list[int], tune_cap: int, workdir: Path, reps: int = 3) -> dict[str, Any]:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    runs: dict[str, dict[str, dict[str, Any]]] = {OPTUNA: {}}
    for n in counts:
        study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
        start = time.perf_counter()
        for _ in range(n):
            trial = study.ask()
            x = trial.suggest_float("x", -1, 1)
            study.tell(trial, x**2)
        seconds = time.perf_counter() - start
        runs[OPTUNA][str(n)] = {"startup_s": 0.0, "steady_ms_per_trial": 1000 * seconds / n,
                                "wind_down_s": 0.0, "total_s": seconds,
                                "total_ms_per_trial": 1000 * seconds / n}
    measured: dict[tuple[str, int], list[dict[str, float]]] = {}
    tune_counts = {min(n, tune_cap) for n in counts}  # Tune's default at most at its cap
    for n in sorted(set(counts) | tune_counts):
        systems = [s for s in SYSTEMS if (n in tune_counts if s == "tune" else n in counts)]
        for rep, order in enumerate(interleaved(systems, reps)):
            for system in order:
                measured.setdefault((system, n), []).append(
                    timed(system, n, workdir, tag=f"r{rep}"))
    for (system, n), rows in measured.items():
        runs.setdefault(SYSTEMS[system], {})[str(n)] = spread(rows)
    return {
        "counts": counts, "tune_new_actor_cap": tune_cap, "concurrent": 2, "reps": reps,
        "runs": runs, "ratios": ratios(runs, counts),
        "nestor_command": f"nestor sweep --cmd {COMMAND!r} --param x=float:0:1 --algo random"
                          " --budget N --parallel 2 --mode min --seed 0",
        "nestor_function": "nestor run SPEC: one hpo stage, trainer {function:"
                           " bench_trivial:trivial}, random, budget N, parallel 2",
        "method": "interleaved: for each count, every repetition runs each system once in an"
                  " order rotated by one per repetition; each run a fresh process with a new"
                  " empty nestor cache folder, timed from its command's start to its exit;"
                  " start-up = first trial's end; steady = (last end - first end) / (n - 1);"
                  " wind-down = last end to exit (nestor: every event in MLflow by then);"
                  " figures are medians over the repetitions, with their range",
    }


def ratios(runs: dict[str, dict[str, dict[str, Any]]], counts: list[int]) -> dict[str, Any]:
    """nestor's medians against Tune's at equal trial counts: totals against
    ``reuse_actors``, and per trial against the default (at the default's own count)."""
    out: dict[str, Any] = {}
    reuse, default = runs.get(SYSTEMS["tune-reuse"], {}), runs.get(SYSTEMS["tune"], {})
    for key in ("nestor", "nestor-fn"):
        mine = runs.get(SYSTEMS[key], {})
        for n in counts:
            row = mine.get(str(n))
            if row and str(n) in reuse:
                out[f"{key}/tune-reuse@{n}"] = row["total_s"] / reuse[str(n)]["total_s"]
            if row and str(n) in default:
                out[f"{key}/tune-default per trial@{n}"] = (
                    row["total_ms_per_trial"] / default[str(n)]["total_ms_per_trial"])
        for n in counts:  # per trial at a larger count against the default at its cap
            row = mine.get(str(n))
            for cap, base in default.items():
                if row and int(cap) < n:
                    # Tune's default at 2,000 trials would take over half an hour a run;
                    # a new actor per trial makes its cost per trial flat, so its steady
                    # state at its cap stands for it. Its start-up left out: in its favour.
                    out[f"{key}@{n}/tune-default steady@{cap} per trial"] = (
                        row["total_ms_per_trial"] / base["steady_ms_per_trial"])
    return out


PROJECTION_SPEC = """
    name: projection
    resources: {slots: 2}
    stages:
      - name: tune
        kind: hpo
        trainer: {command: ["true"]}
        search: {algorithm: random, budget: 2, seed: 0}
        space: {x: {type: float, low: 0, high: 1}}
        objective: {metric: FoM, mode: min}
    """


def trivial_journal(run_dir: Path, runs: int) -> None:
    """A journal of ``runs`` trivial trials, each started and finished (2 events)."""
    from nestor.orchestrator.journal.events import (
        StageStarted,
        TrialFinished,
        TrialStarted,
        WorkflowStarted,
    )
    from nestor.orchestrator.journal.journal import Journal

    with Journal(run_dir / "journal.jsonl", fsync=False) as journal:
        journal.record(WorkflowStarted(workflow="projection", slots=2, pid=1, run_key="k"))
        journal.record(StageStarted(stage="tune", stage_kind="hpo", sources=[]))
        for n in range(runs):
            trial = {"id": str(n), "config": {"x": n / runs}, "generation": 0, "deme": 0,
                     "parents": [], "origin": "random"}
            journal.record(TrialStarted(stage="tune", trial=trial, attempt=1, gang=1,
                                        shape="1x1"))
            journal.record(TrialFinished(stage="tune", trial=trial, attempt=1,
                                         status="completed", value=0.5,
                                         metrics={"FoM": 0.5, "wall_time": 0.01},
                                         reason=None, slot_seconds=0.01))


def projected(run_dir: Path, events: int,
              uri: str | None = None) -> list[tuple[float, float, int]]:
    """Project ``run_dir``'s journal from nothing (into ``uri``, else the run
    directory's own store); (wall s, process CPU s, events done) every 0.05 s: a
    batch into the run directory's store takes about 0.2 s, so coarser samples make
    a window's rate a matter of where the samples fall."""
    from nestor.orchestrator.projections.projector import Projector
    from nestor.orchestrator.spec import load_spec_text

    text = textwrap.dedent(PROJECTION_SPEC)
    if uri:
        text += f"tracking: {{uri: '{uri}'}}\n"
    workflow = load_spec_text(text, "<projection>")
    from nestor.orchestrator.projections.tracking import Tracker

    Tracker(run_dir, workflow.name, uri).close()  # the store's schema: made before timing
    began, cpu = time.perf_counter(), time.process_time()
    projector = Projector(run_dir, workflow)
    samples = [(0.0, 0.0, 0)]
    while projector.done < events:  # not ``behind``: it reads the journal's rest each time
        time.sleep(0.05)
        samples.append((time.perf_counter() - began, time.process_time() - cpu,
                        projector.done))
    projector.close()
    return samples


def window_rate(samples: list[tuple[float, float, int]], lo: int,
                hi: int) -> tuple[float, float]:
    """Events/s and events per CPU-second between the last sample before ``lo``
    events and the first at ``hi`` or more: whole batches (a batch of the run
    directory's store is thousands of events), never part of one."""
    start = max((s for s in samples if s[2] < lo), key=lambda s: s[2], default=samples[0])
    end = next(s for s in samples if s[2] >= hi)
    events = end[2] - start[2]
    return events / max(end[0] - start[0], 1e-9), events / max(end[1] - start[1], 1e-9)


def projection_rate(sizes: list[int], workdir: Path, window: int = 1000) -> dict[str, Any]:
    """Events a second into a fresh run directory store, at each store size: over the
    last ``window`` runs before it, or the last tenth of them where that is more
    (several batches, so no one batch's timing decides the figure)."""
    top = max(sizes)
    run_dir = workdir / f"projection-{top}"
    trivial_journal(run_dir, top)
    samples = projected(run_dir, 2 + 2 * top)
    out: dict[str, Any] = {"window_runs": {}, "events_per_run": 2, "rates": {},
                           "events_per_cpu_s": {}}
    for size in sizes:
        runs = max(window, size // 10)
        out["window_runs"][str(size)] = runs
        lo, hi = 2 + 2 * max(0, size - runs), 2 + 2 * size
        rate, per_cpu = window_rate(samples, lo, hi)
        out["rates"][str(size)] = round(rate, 1)
        out["events_per_cpu_s"][str(size)] = round(per_cpu, 1)
        print(f"  projection at {size:7,d} runs: {rate:8.1f} events/s, {per_cpu:8.1f} per"
              f" CPU-second (load {os.getloadavg()[0]:.1f})", flush=True)
    out["total_s"] = round(samples[-1][0], 1)
    out["load_average_at_end"] = os.getloadavg()[0]
    return out


def projection_server(runs: int, workdir: Path) -> dict[str, Any]:
    """Events a second into a real local ``mlflow server`` (SQLite behind it), started
    here: MLflow's REST API, each run's create, log_batch and end in order, a batch's
    runs several at once (``tracking.PARALLEL_RUNS``)."""
    import socket
    import urllib.request

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    home = workdir / "server"
    home.mkdir()
    mlflow = str(Path(sys.executable).parent / "mlflow")
    server = subprocess.Popen(
        [mlflow, "server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1",
         "--backend-store-uri", f"sqlite:///{home / 'mlflow.db'}",
         "--artifacts-destination", str(home / "artifacts")],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=home)
    uri = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                urllib.request.urlopen(f"{uri}/health", timeout=2).read()
                break
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise RuntimeError(f"mlflow server on {uri} did not start") from None
                time.sleep(0.5)
        run_dir = workdir / f"projection-server-{runs}"
        trivial_journal(run_dir, runs)
        samples = projected(run_dir, 2 + 2 * runs, uri)
    finally:
        server.terminate()
        server.wait(timeout=30)
    rate, per_cpu = window_rate(samples, 2, 2 + 2 * runs)
    print(f"  projection into mlflow server, {runs:,d} runs: {rate:8.1f} events/s"
          f" (load {os.getloadavg()[0]:.1f})", flush=True)
    return {"runs": runs, "events_per_s": round(rate, 1),
            "driver_events_per_cpu_s": round(per_cpu, 1),
            "load_average_at_end": os.getloadavg()[0]}


def simulated_stream(workdir: Path) -> list[dict[str, Any]]:
    """The journal of the 2,048-slot mixed workload (async), times on its virtual clock."""
    import argparse as _argparse

    import nestor.orchestrator.journal.journal as journal_module
    from bench import simulate

    class VirtualTime:
        """``time`` for the journal module only: the simulator's clock."""

        def __init__(self) -> None:
            self.clock = time.time

        def __getattr__(self, name: str) -> Any:
            return getattr(time, name)

        def time(self) -> float:
            return self.clock()

    shim = VirtualTime()
    from nestor.orchestrator import backends

    original = backends.SimulatedBackend.__init__

    def remember(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        shim.clock = self.now

    args = _argparse.Namespace(seed=1, rank_failure=0.005, node_mtbf_h=2000.0, repair_h=4.0,
                               nodes=simulate.NODES,
                               allocation_h=24.0, fsync=False)
    mixed = next(w for w in simulate.workloads(quick=True) if w.name == "mixed")
    journal_module.time, backends.SimulatedBackend.__init__ = shim, remember
    try:
        simulate.run_one(mixed, "async", "sweep", args, workdir)
    finally:
        journal_module.time, backends.SimulatedBackend.__init__ = time, original
    path = workdir / "mixed-async-sweep" / "journal.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def projection_lag(workdir: Path, speedup: float, window_s: float) -> dict[str, Any]:
    """Lag from append to MLflow of the mixed workload's events, replayed ``speedup``
    times faster than they came, for ``window_s`` seconds."""
    import threading

    from nestor.orchestrator.journal.journal import Journal
    from nestor.orchestrator.projections.projector import Projector
    from nestor.orchestrator.spec import load_spec_text

    stream = simulated_stream(workdir)
    start = stream[0]["time"]
    replay = [e for e in stream if (e["time"] - start) / speedup <= window_s]
    offset = 0
    run_dir = workdir / "lag"
    run_dir.mkdir()
    workflow = load_spec_text(simulate_spec(), "<lag>")
    projector = Projector(run_dir, workflow)
    appended: list[float] = []
    shown: dict[int, float] = {}
    stop = threading.Event()

    def watch() -> None:  # when MLflow shows each replayed event (index in ``appended``)
        seen = 0
        while not stop.is_set() or seen < len(replay):
            done = projector.done - offset
            now = time.perf_counter()
            for seq in range(seen, min(done, len(appended))):
                shown[seq] = now
            seen = max(seen, min(done, len(appended)))
            time.sleep(0.005)

    journal = Journal(run_dir / "journal.jsonl", on_append=projector.wake)
    first = replay.pop(0)  # the run's start: its store is made before any trial runs
    journal.append(first["event"], **{k: v for k, v in first.items()
                                      if k not in ("seq", "time", "event")})
    projector.flush(timeout_s=600)
    offset = projector.done  # events before the timed replay
    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    began = time.perf_counter()
    start = replay[0]["time"]
    with journal:
        for event in replay:
            due = began + (event["time"] - start) / speedup
            wait = due - time.perf_counter()
            if wait > 0:
                time.sleep(wait)
            fields = {k: v for k, v in event.items() if k not in ("seq", "time", "event")}
            journal.append(event["event"], **fields)
            appended.append(time.perf_counter())
    projector.flush(timeout_s=600)
    stop.set()
    watcher.join(timeout=60)
    projector.close()
    lags = sorted(shown[seq] - appended[seq] for seq in shown)
    duration = appended[-1] - began if appended else 0.0

    def pct(q: float) -> float:
        return round(lags[min(len(lags) - 1, int(q * len(lags)))], 3) if lags else float("nan")

    out = {"speedup": speedup, "window_s": window_s, "events": len(replay),
           "events_per_s": round(len(replay) / max(duration, 1e-9), 1),
           "virtual_s": round(replay[-1]["time"] - start, 1) if replay else 0.0,
           "lag_s": {"p50": pct(0.5), "p90": pct(0.9), "p99": pct(0.99), "max": pct(1.0)},
           "load_average_at_end": os.getloadavg()[0]}
    print(f"  lag, mixed workload at {speedup:g}x for {window_s:g} s: {out['events']} events"
          f" ({out['events_per_s']}/s): p50 {out['lag_s']['p50']} s, p99 {out['lag_s']['p99']}"
          f" s, max {out['lag_s']['max']} s (load {out['load_average_at_end']:.1f})", flush=True)
    return out


def simulate_spec() -> str:
    """The mixed workload's spec (its stage names are what the projector needs)."""
    from bench import simulate

    mixed = next(w for w in simulate.workloads(quick=True) if w.name == "mixed")
    return simulate.spec_text(mixed, "async", mixed.generations)


def utilization(workdir: Path) -> dict:
    out = {}
    for schedule in ("generational", "async"):
        spec = textwrap.dedent(f"""
            name: util-{schedule}
            resources: {{slots: 2}}
            stages:
              - name: tune
                kind: hpo
                trainer: {{function: "bench_trivial:sleepy"}}
                search: {{algorithm: genetic, population: 6, generations: 4, seed: 5,
                          schedule: {schedule}}}
                space:
                  u: {{type: float, low: 0, high: 1}}
                  v: {{type: float, low: -1, high: 1}}
                objective: {{metric: score, mode: min}}
            """)
        stage = run_nestor(spec, workdir, f"util-{schedule}")
        out[schedule] = {
            "wall_s": stage["wall_time_s"],
            "busy_slot_s": stage["slot_seconds"],
            "utilization": stage["slot_seconds"] / (2 * stage["wall_time_s"]),
            "best": stage["best"]["value"],
        }
    return out


def mnist(workdir: Path, budget: int, threshold: float) -> dict:
    out = {}
    search = {
        "genetic": f"{{algorithm: genetic, population: 4, generations: {budget // 4}, seed: 1, "
        "schedule: async}",
        "bayesian": f"{{algorithm: bayesian, budget: {budget}, startup_trials: 4, seed: 1}}",
        "random": f"{{algorithm: random, budget: {budget}, seed: 1}}",
    }
    for algorithm, settings in search.items():
        spec = textwrap.dedent(f"""
            name: mnist-{algorithm}
            resources: {{slots: 2}}
            stages:
              - name: tune
                kind: hpo
                trainer: {{name: cnn, settings: {{dataset: mnist5k, epochs: 1}}}}
                search: {settings}
                space:
                  lr: {{type: float, low: 1.0e-4, high: 0.3, log: true}}
                  batch_size: {{type: int, low: 16, high: 256, log: true}}
                  momentum: {{type: float, low: 0.0, high: 0.95}}
                objective: {{metric: val_accuracy, mode: max, threshold: {threshold}}}
            """)
        stage = run_nestor(spec, workdir, f"mnist-{algorithm}")
        out[algorithm] = {
            "runs": stage["n_runs"],
            "best_val": stage["best"]["value"] if stage["best"] else None,
            "its_test": stage["best"]["test_value"] if stage["best"] else None,
            "time_to_threshold_s": stage["time_to_threshold_s"],
            "wall_s": stage["wall_time_s"],
        }
    return out


def print_overhead(ov: dict[str, Any]) -> None:
    print(f"\nend to end, trivial trials, {ov['concurrent']} at a time ({ov['method']}):")
    print(f"  {'system':42s} {'trials':>7s} {'total s':>8s} {'ms/trial':>9s}"
          f" {'start-up s':>10s} {'steady ms':>10s} {'wind-down s':>11s} {'load':>5s}")
    for label, by_count in ov["runs"].items():
        for n, row in by_count.items():
            low, high = row.get("total_s_range", (row["total_s"], row["total_s"]))
            print(f"  {label:42s} {int(n):7d} {row['total_s']:8.1f} [{low:.1f}-{high:.1f}]"
                  f" {row['total_ms_per_trial']:9.2f} {row['startup_s']:10.1f}"
                  f" {row['steady_ms_per_trial']:10.2f} {row['wind_down_s']:11.1f}"
                  f" {row.get('load_average', float('nan')):5.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", default="250,2000,10000",
                        help="overhead: trial counts, comma-separated (each a run per system)")
    parser.add_argument("--tune-new-actor-cap", type=int, default=1000,
                        help="overhead: most trials for Tune's default (new actor per trial,"
                             " about a second each here)")
    parser.add_argument("--parts",
                        default="overhead,projection,server,lag,utilization,mnist",
                        help="which benchmarks to run, comma-separated")
    parser.add_argument("--store-sizes", default="1000,10000,100000",
                        help="projection: store sizes (runs) to take the rate at")
    parser.add_argument("--server-runs", type=int, default=1000,
                        help="server: runs projected into a local mlflow server")
    parser.add_argument("--lag-speedup", type=float, default=10.0,
                        help="lag: the simulated workload's events replayed this much faster")
    parser.add_argument("--lag-window-s", type=float, default=120.0,
                        help="lag: seconds of replay")
    parser.add_argument("--reps", type=int, default=3,
                        help="overhead: repetitions, the systems interleaved in each")
    parser.add_argument("--mnist-budget", type=int, default=12)
    parser.add_argument("--threshold", type=float, default=0.93)
    parser.add_argument("--tag", default="",
                        help="write orchestration-PARTS-TAG.json (a run kept beside others)")
    parser.add_argument("--child", choices=sorted(SYSTEMS), help=argparse.SUPPRESS)
    parser.add_argument("--workdir", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--child-out", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--child-tag", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    os.environ.setdefault("MLFLOW_LOGGING_LEVEL", "WARNING")
    if args.child:
        raw = timed_child(args.child, int(args.trials), args.workdir, args.child_tag)
        args.child_out.write_text(json.dumps(raw))
        return
    counts = sorted({int(n) for n in args.trials.split(",") if n.strip()})
    if not counts or min(counts) < 2:
        parser.error(f"--trials must list counts of at least 2, but got {args.trials!r}")
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        (workdir / "bench_trivial.py").write_text(TRIVIAL)
        os.environ["PYTHONPATH"] = f"{workdir}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"
        sys.path.insert(0, str(workdir))
        parts = set(args.parts.split(","))
        from bench import machine as machine_info

        detail = machine_info.describe()
        report: dict = {"machine": machine(), "load_average_at_start": os.getloadavg(),
                        "machine_detail": detail}
        if "overhead" in parts:
            report["overhead"] = overhead(counts, args.tune_new_actor_cap, workdir, args.reps)
        if "projection" in parts:
            sizes = sorted({int(n) for n in args.store_sizes.split(",") if n.strip()})
            report["projection"] = projection_rate(sizes, workdir)
        if "server" in parts:
            report["projection_server"] = projection_server(args.server_runs, workdir)
        if "lag" in parts:
            report["lag"] = projection_lag(workdir, args.lag_speedup, args.lag_window_s)
        if "utilization" in parts:
            report["utilization"] = utilization(workdir)
        if "mnist" in parts:
            report["mnist5k"] = mnist(workdir, args.mnist_budget, args.threshold)
    report["machine_detail"] = machine_info.finish(detail)
    print(f"machine: {report['machine']}; load average at start"
          f" {report['load_average_at_start'][0]:.2f}")
    if "overhead" in report:
        print_overhead(report["overhead"])
    if "utilization" in report:
        print("\nslot utilization, genetic 6x4, durations 0.2-2 s, 2 slots:")
        for schedule, row in report["utilization"].items():
            print(f"  {schedule:12s} utilization {row['utilization']:.2f}"
                  f"  wall {row['wall_s']:.1f} s  busy {row['busy_slot_s']:.1f} slot-s"
                  f"  best {row['best']:.4f}")
    if "mnist5k" in report:
        print(f"\nmnist5k, threshold val_accuracy {args.threshold}:")
        for algorithm, row in report["mnist5k"].items():
            print(f"  {algorithm:9s} runs {row['runs']:3d}  best val {row['best_val']}"
                  f"  its test {row['its_test']}  to threshold {row['time_to_threshold_s']} s"
                  f"  wall {row['wall_s']:.0f} s")
    name = f"orchestration-{'-'.join(sorted(parts))}" + (f"-{args.tag}" if args.tag else "")
    out = machine_info.write_result(name, report)
    print(f"\nwritten: {out}")


if __name__ == "__main__":
    main()
