"""The seed's combined table at 128 nodes, as simulated workflows (a simulation, not a run).

Cray's CUG 2018 talk ("Scaling Deep Learning without Impacting Batchsize")
multiplied speed-ups measured apart: random search on 1 node at batch 100
1x, HPO 11x, HPO + data parallelism 38x, HPO + data + model parallelism 56x
on 128 nodes at a global batch of 400. Here each row is a whole workflow run
by nestor's real StageScheduler on the simulated backend (a virtual clock):
128 nodes x ``--slots-per-node`` slots (default: the profiled machine's
cores), every trial lasting what the **calibrated cost model** predicts for
its shape (``orchestrator.planning.cost_model_trials``), with the contention
of the ranks that share its node. So the table shows what the cost model,
plus scheduling (gang start-up, generation barriers, packing), predicts; it
measures nothing on 128 real nodes.

The workload: per-rank batch 100, global batch cap 400 (the seed's), the
profiled CNN on mnist5k (``--epochs`` per run), a generational genetic search
of generations of ``--populations`` trials (one table each: 32, where the
seed's kind of shape, dp 4 x mp 2, fills the 256 slots with one generation;
128, one trial per node, where the widest shapes no longer fit at once).
Rows, each the best shape the cost model finds under the row's restriction
(``nestor plan``'s table, plus model-parallel groups within a node, as the
simulated cluster places them):

- random search: the same number of runs one after another on one slot of
  one node (1x1, batch 100): the 1x row;
- DP+MP: the same runs one after another, each on its best wider shape (on
  the nodes one trial takes);
- HPO, HPO+MP, HPO+DP, HPO+DP+MP: generations of the population's trials at
  once on the 128 nodes, at 1x1, mp > 1 only, dp > 1 only, and any shape
  (what ``parallel: auto`` chooses);
- HPO+DP+MP with mp >= 2 and dp >= 2: the seed's kind of shape, forced.

Reported per row: simulated time to finish all runs (virtual seconds), the
speed-up over the random-search row, the cost model's own closed-form
prediction (``nestor plan``'s predicted s) beside it, and utilization: busy
slot-seconds over the 128 nodes' slot-seconds (and over the slots the row's
runs could use). The cost model's parameters are written beside the table.

    .venv/bin/python -m bench.simulate_planning            # 8 generations of 32, of 128
    .venv/bin/python -m bench.simulate_planning --quick    # 2 generations
    .venv/bin/python -m bench.simulate_planning --profile PATH   # another profile record

Writes bench/results/simulate-planning.json.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import math
import tempfile
import textwrap
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from bench import machine
from bench.machine import ROOT, write_result

PROFILE = ROOT / "tests" / "orchestrator" / "planning" / "data" / "cnn-mnist5k-2core.json"
NODES = 128
PER_RANK_BATCH, GLOBAL_MAX = 100, 400  # the seed's batch 100 and cap 400
SEED_TABLE = {"random search": 1.0, "HPO": 11.0, "HPO+DP": 38.0, "HPO+DP+MP": 56.0}


@dataclasses.dataclass(frozen=True)
class RowSpec:
    label: str
    concurrent: bool  # generations of trials at once (HPO) or one run after another
    allowed: Callable[[Any], bool]


def row_specs() -> list[RowSpec]:
    """``nestor plan``'s rows, and the seed's kind of HPO+DP+MP shape forced."""
    from nestor.orchestrator.planning._table import ROWS

    rows = [RowSpec(label, concurrent, allowed) for label, concurrent, allowed in ROWS]
    rows.append(RowSpec("HPO+DP+MP (dp, mp >= 2)", True, lambda s: s.dp > 1 and s.mp > 1))
    return rows


def load_model(path: Path, epochs: int) -> tuple[Any, dict[str, Any]]:
    """The cost model calibrated to a recorded profile, and the record."""
    from nestor.orchestrator.planning import Profile, calibrate, model_size
    from nestor.trainers.catalog import resolve_options

    record = json.loads(Path(path).read_text())
    profile = Profile.from_record(record)
    options = resolve_options(profile.trainer, dict(profile.options),
                              {"batch_size": PER_RANK_BATCH, "epochs": epochs})
    return calibrate(profile, model_size(profile.trainer, options)), record


def choose_rows(model: Any, *, nodes: int, slots_per_node: int, runs: int, population: int,
                epochs: int) -> list[dict[str, Any]]:
    """Each row's shape, trials at once, slots it runs on, and the closed-form prediction."""
    from nestor.orchestrator.planning import Goal, Limits, evaluate

    slots = nodes * slots_per_node
    out = []
    for spec in row_specs():
        if spec.label == "random search":
            limits = Limits(slots=1, per_rank_batch=PER_RANK_BATCH, global_batch_max=GLOBAL_MAX)
        else:
            limits = Limits(slots=slots, per_rank_batch=PER_RANK_BATCH,
                            global_batch_max=GLOBAL_MAX)
        goal = Goal(runs=runs, epochs=epochs, generation=population if spec.concurrent else 1)
        feasible, _ = evaluate(model, limits, goal)
        # A model-parallel group never straddles two nodes (as the simulated cluster places it).
        best = next((c for c in feasible if spec.allowed(c.shape)
                     and c.shape.mp <= slots_per_node), None)
        out.append({"label": spec.label, "concurrent": spec.concurrent, "candidate": best})
    return out


def spec_text(label: str, shape: Any, *, concurrent: bool, population: int, generations: int
              ) -> str:
    """One row's workflow: a genetic HPO stage (generational), or a random search of
    as many runs for the one-after-another rows."""
    if concurrent:
        search = (f"{{algorithm: genetic, population: {population}, generations: {generations},"
                  f" schedule: generational, seed: 1}}")
    else:
        search = f"{{algorithm: random, budget: {population * generations}, seed: 1}}"
    return textwrap.dedent(f"""\
        name: sim-combined
        stages:
          - name: tune
            kind: hpo
            trainer: {{function: "nestor.orchestrator.simulate:simulated_trial"}}
            parallel: {{data: {shape.dp}, model: {shape.mp}}}
            search: {search}
            space:
              lr: {{type: float, low: 1.0e-3, high: 0.5, log: true}}
              momentum: {{type: float, low: 0.0, high: 0.99}}
            objective: {{metric: val_accuracy, mode: max}}
        """)  # row: {label}


def climbable(config: Mapping[str, Any]) -> float:
    """A metric a genetic search can climb (the runs' count, not their values, matters here)."""
    numbers = [float(v) for v in config.values() if isinstance(v, int | float)]
    return 1.0 / (1.0 + sum((v - 0.3) ** 2 for v in numbers))


def simulate_row(model: Any, row: dict[str, Any], *, nodes: int, slots_per_node: int,
                 population: int, generations: int, epochs: int, sigma: float,
                 workdir: Path) -> dict[str, Any]:
    """Run one row's workflow on the simulated cluster; what its slots did."""
    from nestor.orchestrator.backends import SimulatedBackend
    from nestor.orchestrator.engine.workflow import run_workflow
    from nestor.orchestrator.planning import GANG_START_S, cost_model_trials
    from nestor.orchestrator.spec import load_spec_text

    c = row["candidate"]
    shape = c.shape
    if row["concurrent"]:
        sim_nodes, sim_spn = nodes, slots_per_node
    else:  # one run at a time: just the nodes one trial takes (the others idle)
        sim_spn = min(slots_per_node, shape.ranks)
        sim_nodes = math.ceil(shape.ranks / sim_spn)
    trials = cost_model_trials(model, shape, PER_RANK_BATCH, epochs,
                               busy=c.at_once * shape.ranks, sigma=sigma, value=climbable)
    backend = SimulatedBackend(sim_nodes, sim_spn, trials, seed=1, startup_s=GANG_START_S)
    workflow = load_spec_text(spec_text(row["label"], shape, concurrent=row["concurrent"],
                                        population=population, generations=generations))
    run_dir = workdir / row["label"].replace(" ", "_").replace("(", "").replace(")", "")
    tick = time.perf_counter()
    results = run_workflow(workflow, backend, run_dir)
    end = backend.now()
    busy = sum((a.ended - a.started) * a.ranks for a in backend.attempts
               if a.started is not None and a.ended is not None)
    return {
        "label": row["label"], "shape": str(shape), "at_once": c.at_once,
        "slots_used": c.slots_used, "global_batch": c.global_batch,
        "runs": results["n_runs"], "simulated_nodes": sim_nodes,
        "simulated_slots": sim_nodes * sim_spn,
        "simulated_s": end, "predicted_s": c.total_s, "run_s": c.run_s,
        "busy_slot_s": busy,
        "utilization_allocation": busy / (nodes * slots_per_node * end) if end else None,
        "utilization_own": busy / (sim_nodes * sim_spn * end) if end else None,
        "gangs_started": backend.gangs_started, "driver_s": time.perf_counter() - tick,
    }


def run_table(model: Any, args: argparse.Namespace, spn: int, population: int,
              generations: int) -> dict[str, Any]:
    """Every row for one generation size, simulated; printed as it goes."""
    runs = population * generations
    rows = choose_rows(model, nodes=args.nodes, slots_per_node=spn, runs=runs,
                       population=population, epochs=args.epochs)
    out: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="nestor-simplan-") as tmp:
        for row in rows:
            if row["candidate"] is None:
                out.append({"label": row["label"], "shape": None})
                continue
            out.append(simulate_row(model, row, nodes=args.nodes, slots_per_node=spn,
                                    population=population, generations=generations,
                                    epochs=args.epochs, sigma=args.sigma, workdir=Path(tmp)))
    base = out[0]
    for r in out:
        if r.get("shape"):
            r["speedup"] = base["simulated_s"] / r["simulated_s"]
            r["predicted_speedup"] = base["predicted_s"] / r["predicted_s"]
        r["seed_speedup"] = SEED_TABLE.get(r["label"])
    print(f"SIMULATION: {args.nodes} nodes x {spn} slots, generations of {population},"
          f" {runs} runs of {args.epochs} epochs, per-rank batch {PER_RANK_BATCH}, global cap"
          f" {GLOBAL_MAX}; cost model from {args.profile.name}")
    print(f"{'row':<26} {'shape':>5} {'at once':>7} {'slots':>5} {'batch':>5}"
          f" {'simulated s':>11} {'speed-up':>8} {'predicted s':>11} {'pred. x':>7}"
          f" {'util':>8} {'seed':>5}")
    for r in out:
        if not r.get("shape"):
            print(f"{r['label']:<26} no shape fits")
            continue
        seed = f"{r['seed_speedup']:.0f}x" if r["seed_speedup"] else "-"
        print(f"{r['label']:<26} {r['shape']:>5} {r['at_once']:>7} {r['slots_used']:>5}"
              f" {r['global_batch']:>5} {r['simulated_s']:>11.1f} {r['speedup']:>7.1f}x"
              f" {r['predicted_s']:>11.1f} {r['predicted_speedup']:>6.1f}x"
              f" {r['utilization_allocation']:>8.1%} {seed:>5}")
    return {"population": population, "generations": generations, "runs": runs, "rows": out}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="2 generations (default 8)")
    p.add_argument("--profile", type=Path, default=PROFILE,
                   help="a profile record (Profile.to_record JSON: a `nestor plan --measure`"
                        " cache file, or the recorded one)")
    p.add_argument("--nodes", type=int, default=NODES)
    p.add_argument("--slots-per-node", type=int, default=None,
                   help="default: the profiled machine's cores")
    p.add_argument("--populations", default="32,128",
                   help="trials per generation, one table each (default 32,128)")
    p.add_argument("--generations", type=int, default=None)
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--sigma", type=float, default=0.05,
                   help="lognormal spread of each run around the prediction")
    p.add_argument("--out", default="simulate-planning")
    args = p.parse_args(argv)
    generations = args.generations or (2 if args.quick else 8)
    model, record = load_model(args.profile, args.epochs)
    spn = args.slots_per_node or int(record["machine"].get("cores") or 1)
    start = machine.describe()
    quiet = logging.getLogger("orchestrator")
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    tables = []
    try:
        for population in (int(x) for x in args.populations.split(",")):
            tables.append(run_table(model, args, spn, population, generations))
    finally:
        quiet.setLevel(level)
    epochs = {f"{d}x{m}": {"alone": model.epoch(d, m, PER_RANK_BATCH, 1),
                           "node_full": model.epoch(d, m, PER_RANK_BATCH, spn)}
              for d, m in ((1, 1), (2, 1), (4, 1), (1, 2), (2, 2), (4, 2))
              if m <= spn}
    path = write_result(args.out, {
        "simulation": True, "machine": machine.finish(start), "nodes": args.nodes,
        "slots_per_node": spn, "generations": generations, "epochs": args.epochs,
        "per_rank_batch": PER_RANK_BATCH, "global_max": GLOBAL_MAX, "sigma": args.sigma,
        "profile": str(args.profile.name), "profile_key": record.get("key"),
        "profile_machine": record.get("machine"), "model": model.parameters(),
        "predicted_epoch_s": epochs, "tables": tables, "seed_table": SEED_TABLE,
        "command": "python -m bench.simulate_planning " + " ".join(argv or []),
    })
    print(f"written: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
