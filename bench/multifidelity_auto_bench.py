"""`auto` with a fidelity at 1, 4 and 16 trials at once, against nestor's own searches
and the published ones, on fresh held-out problems (issue 41 item 3).

The problems below were written for this bench and fixed before any search ran on
them; no rule of ``auto`` was fitted on them (the dev suite,
``bench/multifidelity_dev_bench.py``, is for fitting; the older held-out suite,
``bench/multifidelity_heldout_bench.py``, was cited when rule M was chosen, so it
no longer judges it). With 30 full trainings (3,000 epochs) at every width, the
rule they judge is rule M (``search/_auto.py``: ASHA with TPE proposals on rungs
11/33/100) at 1, 4 and 16 at once: rule W (every trial in full with lq-CMA-ES)
takes over at 16 only from 4 x 16 = 64 full trainings, so it is not judged here.

A configuration x trained t epochs (1 to 100) has the expected loss

    L(x, t) = floor(x) + (3 - floor(x)) * exp(-t / tau(x)) + overfit(x) * (100 - t) / 100

(``overfit`` is 0 except on ``overfit-5d``, where configurations with little
regularisation look better after a short training than they end) and reports it
with Gaussian noise of ``noise / sqrt(t)``. The regret is the expected loss after
100 epochs of the configuration a search would return (the best of those trained
the longest, as nestor's ``best()``; Optuna's TPE training in full: its best
trial), less the best of 20,000 random configurations'.

Every search gets 3,000 epochs, on 1, 4 or 16 slots run asynchronously on a
virtual clock (a trial takes as long as the epochs it trains; a promotion only its
span). nestor's multi-fidelity searches spend it as a cost budget; the others are
cut when the epochs trained reach it (work in flight then is lost, as under a hard
budget). Optuna's pruned TPE and Syne Tune's schedulers (stopping type) are told a
trial's loss at epochs 1, 3, 9, 27, 81 and 100: the only epochs where their
halving rule (η = 3 from 1) decides anything. The figure: the rank of each
search's regret among all on each (problem, seed, width) after 25, 50 and 100 %
of the budget (1 = best, ties share); its median and quartiles over problems x
seeds.

    .venv/bin/python bench/multifidelity_auto_bench.py --seeds 5
    .venv/bin/python bench/multifidelity_auto_bench.py --seeds 1 --widths 4 --only auto optuna-tpe

It writes bench/results/multifidelity_auto.json.
"""

from __future__ import annotations

import argparse
import heapq
import json
import math
import random
import statistics
import sys
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import machine
from bench.machine import RESULTS
from bench.multifidelity_heldout_bench import ranks
from nestor.search import Objective, make_searcher
from nestor.search._sampling import sample_config
from nestor.search.space import CategoricalParam, FloatParam, IntParam, SearchSpace

MAX_EPOCHS = 100
FULL_TRAININGS = 30
BUDGET = FULL_TRAININGS * MAX_EPOCHS
FRACTIONS = (0.25, 0.5, 1.0)
WIDTHS = (1, 4, 16)
UNTRAINED = 3.0
REPORTS = (1, 3, 9, 27, 81, 100)  # where the outside halving schedulers decide


@dataclass(frozen=True)
class Problem:
    name: str
    space: SearchSpace
    floor: Callable[[dict[str, Any]], float]
    tau: Callable[[dict[str, Any]], float]
    noise: float
    overfit: Callable[[dict[str, Any]], float] = lambda c: 0.0

    def expected(self, config: dict[str, Any], epochs: float) -> float:
        floor = self.floor(config)
        return (floor + (UNTRAINED - floor) * math.exp(-epochs / self.tau(config))
                + self.overfit(config) * (MAX_EPOCHS - epochs) / MAX_EPOCHS)

    def final(self, config: dict[str, Any]) -> float:
        return self.expected(config, MAX_EPOCHS)


def _unit(dims: int) -> SearchSpace:
    return SearchSpace(tuple(FloatParam(f"x{i}", 0.0, 1.0) for i in range(dims)))


ROTATION = ((0.5, 0.5, 0.5, 0.5), (0.5, -0.5, 0.5, -0.5), (0.5, 0.5, -0.5, -0.5),
            (0.5, -0.5, -0.5, 0.5))  # fmt: skip


def _rotated(c: dict[str, Any]) -> float:
    d = [c[f"x{i}"] - 0.4 for i in range(4)]
    z = [sum(r * v for r, v in zip(row, d, strict=True)) for row in ROTATION]
    return sum(w * v * v for w, v in zip((6.0, 3.0, 1.5, 0.5), z, strict=True))


def _bumpy(c: dict[str, Any]) -> float:
    """A bowl with ripples (Rastrigin-like, 2 ripples a unit), scaled to about [0, 3]."""
    d = [c[f"x{i}"] - 0.55 for i in range(3)]
    return sum(2.0 * v * v + 0.15 * (1 - math.cos(4 * math.pi * v)) for v in d)


def _overfit_floor(c: dict[str, Any]) -> float:
    return 0.15 + 2 * (c["x0"] - 0.6) ** 2 + sum((c[f"x{i}"] - 0.3) ** 2 for i in (1, 2, 3, 4))


OPTIMIZER = {"sgd": (0.25, 1.8), "adam": (0.0, 0.5), "adagrad": (0.15, 1.0)}  # floor, pace
MIXED = SearchSpace((FloatParam("lr", 1e-4, 1.0, log=True),
                     IntParam("batch", 16, 1024, log=True),
                     CategoricalParam("optimizer", ("sgd", "adam", "adagrad")),
                     FloatParam("weight_decay", 0.0, 0.1),
                     FloatParam("warmup", 0.0, 1.0)))  # fmt: skip

PROBLEMS: tuple[Problem, ...] = (
    # Faithful: one pace everywhere, only the noise reorders short trainings.
    Problem("faithful-rotated-4d", _unit(4), _rotated, lambda c: 18.0, 0.4),
    Problem("faithful-bumpy-3d", _unit(3), _bumpy, lambda c: 12.0, 0.25),
    # Misleading: x0 is regularisation. Little of it overfits: the loss after a short
    # training is up to 0.8 below where it ends, so rungs 1-27 prefer the wrong end.
    Problem("misleading-overfit-5d", _unit(5), _overfit_floor, lambda c: 8.0 + 20 * c["x0"],
            0.25, overfit=lambda c: -0.8 * (1 - c["x0"]) ** 2),
    # Misleading, mixed: a large lr, a small batch and adam learn fast; the best floor
    # wants a small lr (1e-2.8), a large batch (256) and some warm-up.
    Problem("misleading-mixed-5d", MIXED,
            lambda c: (0.2 * (math.log10(c["lr"]) + 2.8) ** 2
                       + 0.03 * (math.log2(c["batch"]) - 8) ** 2
                       + OPTIMIZER[c["optimizer"]][0] + 20 * (c["weight_decay"] - 0.03) ** 2
                       + 0.3 * (c["warmup"] - 0.4) ** 2),
            lambda c: ((4 + 10 * (-math.log10(c["lr"]))) * OPTIMIZER[c["optimizer"]][1]
                       * (0.5 + math.log2(c["batch"]) / 10) * (1 + c["warmup"])), 0.3),
)  # fmt: skip


PROBLEMS_BY_NAME = {p.name: i for i, p in enumerate(PROBLEMS)}


def reference(problem: Problem) -> float:
    rng = random.Random(0)
    return min(problem.final(sample_config(problem.space, rng)) for _ in range(20_000))


# --- the searches: each a driver that hands out jobs and hears their reports -------


@dataclass
class Job:
    config: dict[str, Any]
    start: int  # epochs trained before (a promotion continues its checkpoint)
    stops: tuple[int, ...]  # epochs at which it reports; the last ends it
    handle: Any = None


class Driver:
    """One search as the simulation sees it: new jobs for free slots, reports heard."""

    ends_itself = False  # nestor's searches stop at their own budget
    ask_s = 0.0  # seconds spent in ask

    def ask(self, n: int) -> list[Job]:
        raise NotImplementedError

    def report(self, job: Job, epoch: int, loss: float) -> bool:
        """Tell one report; True to go on training to the job's next stop."""
        raise NotImplementedError

    def done(self) -> bool:
        return False

    def incumbent(self) -> dict[str, Any] | None:
        """The configuration the search would return."""
        raise NotImplementedError


class NestorDriver(Driver):
    ends_itself = True

    def __init__(self, problem: Problem, seed: int, algorithm: str, settings: dict[str, Any]):
        self.searcher = make_searcher(algorithm, problem.space, [Objective("loss", "min")],
                                      seed=seed, **settings)  # fmt: skip
        self.ask_s = 0.0

    def ask(self, n: int) -> list[Job]:
        started = time.perf_counter()
        trials = self.searcher.ask(n)
        self.ask_s += time.perf_counter() - started
        jobs = []
        for trial in trials:
            start = 0
            if trial.continue_from is not None:
                start = int(self.searcher.trials[trial.continue_from].budget)
            until = MAX_EPOCHS if trial.budget is None else int(trial.budget)
            jobs.append(Job(dict(trial.config), start, (until,), trial))
        return jobs

    def report(self, job: Job, epoch: int, loss: float) -> bool:
        self.searcher.tell(job.handle.id, loss, cost=epoch - job.start)
        return False

    def done(self) -> bool:
        return self.searcher.done()

    def incumbent(self) -> dict[str, Any] | None:
        best = self.searcher.best()
        return None if best is None else dict(best.config)

    def label(self) -> str | None:
        choice = self.searcher.auto_choice
        return None if choice is None else choice.label()


def _optuna_distributions(space: SearchSpace) -> dict[str, Any]:
    import optuna

    out: dict[str, Any] = {}
    for p in space.searched:
        if isinstance(p, FloatParam):
            out[p.name] = optuna.distributions.FloatDistribution(p.low, p.high, log=p.log)
        elif isinstance(p, IntParam):
            out[p.name] = optuna.distributions.IntDistribution(p.low, p.high, log=p.log)
        else:
            out[p.name] = optuna.distributions.CategoricalDistribution(list(p.values))
    return out


class _Seen(Driver):
    """A search outside nestor: its reports kept, so that the configuration it would
    return is chosen as nestor's ``best()`` chooses (of those trained the longest,
    the best)."""

    def __init__(self) -> None:
        self.seen: list[tuple[int, float, dict[str, Any]]] = []
        self.ask_s = 0.0

    def incumbent(self) -> dict[str, Any] | None:
        if not self.seen:
            return None
        longest = max(e for e, _, _ in self.seen)
        return min((r for r in self.seen if r[0] == longest), key=lambda r: r[1])[2]


class OptunaDriver(_Seen):
    """Optuna's TPE (its defaults, seeded), every trial in full, or with its
    HyperbandPruner (min 1, max 100, η = 3) deciding at each report."""

    def __init__(self, problem: Problem, seed: int, pruner: bool):
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        super().__init__()
        self.pruned = pruner
        self.study = optuna.create_study(
            sampler=optuna.samplers.TPESampler(seed=seed),
            pruner=(optuna.pruners.HyperbandPruner(min_resource=1, max_resource=MAX_EPOCHS,
                                                   reduction_factor=3)
                    if pruner else optuna.pruners.NopPruner()))
        self.distributions = _optuna_distributions(problem.space)
        self.constants = {p.name: p.value for p in problem.space.params
                          if not hasattr(p, "low") and not hasattr(p, "values")}

    def ask(self, n: int) -> list[Job]:
        started = time.perf_counter()
        jobs = []
        for _ in range(n):
            trial = self.study.ask(self.distributions)
            stops = REPORTS if self.pruned else (MAX_EPOCHS,)
            jobs.append(Job({**self.constants, **trial.params}, 0, stops, trial))
        self.ask_s += time.perf_counter() - started
        return jobs

    def report(self, job: Job, epoch: int, loss: float) -> bool:
        import optuna

        self.seen.append((epoch, loss, job.config))
        trial = job.handle
        if epoch == MAX_EPOCHS:
            self.study.tell(trial, loss)
            return False
        trial.report(loss, epoch)
        if trial.should_prune():
            self.study.tell(trial, state=optuna.trial.TrialState.PRUNED)
            return False
        return True


def _syne_space(space: SearchSpace) -> dict[str, Any]:
    from syne_tune import config_space as cs

    out: dict[str, Any] = {}
    for p in space.searched:
        if isinstance(p, FloatParam):
            out[p.name] = (cs.loguniform if p.log else cs.uniform)(p.low, p.high)
        elif isinstance(p, IntParam):
            out[p.name] = (cs.lograndint if p.log else cs.randint)(p.low, p.high)
        else:
            out[p.name] = cs.choice(list(p.values))
    return out


class SyneDriver(_Seen):
    """Syne Tune's ASHA or BOHB (stopping type, grace period 1, η = 3, max_t 100)."""

    def __init__(self, problem: Problem, seed: int, kind: str):
        from syne_tune.optimizer import baselines

        super().__init__()
        cls = {"asha": baselines.ASHA, "bohb": baselines.BOHB}[kind]
        self.scheduler = cls(_syne_space(problem.space), metric="loss", time_attr="epoch",
                             max_t=MAX_EPOCHS, do_minimize=True, random_seed=seed,
                             grace_period=1, reduction_factor=3)
        self.count = 0

    def ask(self, n: int) -> list[Job]:
        from syne_tune.backend.trial_status import Trial

        started = time.perf_counter()
        jobs = []
        for _ in range(n):
            suggestion = self.scheduler.suggest()
            if suggestion is None:
                break
            trial = Trial(trial_id=self.count, config=suggestion.config, creation_time=None)
            self.count += 1
            self.scheduler.on_trial_add(trial)
            jobs.append(Job(dict(suggestion.config), 0, REPORTS, trial))
        self.ask_s += time.perf_counter() - started
        return jobs

    def report(self, job: Job, epoch: int, loss: float) -> bool:
        from syne_tune.optimizer.scheduler import SchedulerDecision

        self.seen.append((epoch, loss, job.config))
        result = {"loss": loss, "epoch": epoch}
        if epoch == MAX_EPOCHS:
            self.scheduler.on_trial_complete(job.handle, result)
            return False
        decision = self.scheduler.on_trial_result(job.handle, result)
        return decision == SchedulerDecision.CONTINUE


HALVING = {"budget": {"epochs": BUDGET}, "min_budget": 1, "max_budget": MAX_EPOCHS,
           "reduction_factor": 3}


def searches(width: int) -> dict[str, Callable[[Problem, int], Driver]]:
    """Every search at ``width`` trials at once, by name: a driver for (problem, seed)."""
    auto = {"budget": FULL_TRAININGS, "parallel": width, "max_fidelity": MAX_EPOCHS}

    def nestor(algorithm: str, settings: dict[str, Any]) -> Callable[[Problem, int], Driver]:
        return lambda p, seed: NestorDriver(p, seed, algorithm, settings)

    return {
        "auto": nestor("auto", auto),
        "auto prefer final": nestor("auto", {**auto, "prefer": "final"}),
        "asha": nestor("asha", HALVING),
        "asha tpe": nestor("asha", {**HALVING, "sampler": "tpe"}),
        "hyperband": nestor("hyperband", HALVING),
        "bohb": nestor("hyperband", {**HALVING, "sampler": "tpe"}),
        "tpe (in full)": nestor("bayesian", {"budget": FULL_TRAININGS, "sampler": "tpe"}),
        "random (in full)": nestor("random", {"budget": FULL_TRAININGS}),
        "optuna tpe (in full)": lambda p, seed: OptunaDriver(p, seed, pruner=False),
        "optuna tpe + hyperband pruner": lambda p, seed: OptunaDriver(p, seed, pruner=True),
        "syne tune asha": lambda p, seed: SyneDriver(p, seed, "asha"),
        "syne tune bohb": lambda p, seed: SyneDriver(p, seed, "bohb"),
    }  # fmt: skip


def simulate(driver: Driver, problem: Problem, seed: int, slots: int,
             best: float) -> dict[str, Any]:
    """Run one search on ``slots`` slots on a virtual clock until its budget is spent;
    the regret of what it would return after each share of the budget."""
    rng = random.Random(f"{problem.name}-{seed}")
    clock, done_epochs, order, asked = 0.0, 0.0, 0, 0
    # (time of the next report, order, job, index of that report, time it began)
    running: list[tuple[float, int, Job, int, float]] = []
    regrets: dict[float, float] = {}

    def spent() -> float:
        return done_epochs + sum(clock - began for _, _, _, _, began in running)

    def regret() -> float:
        config = driver.incumbent()
        return math.inf if config is None else problem.final(config) - best

    def fill() -> None:
        nonlocal order, asked
        if len(running) >= slots or driver.done():
            return
        if not driver.ends_itself and spent() >= BUDGET:
            return
        for job in driver.ask(slots - len(running)):
            asked += 1
            order += 1
            heapq.heappush(running, (clock + job.stops[0] - job.start, order, job, 0, clock))

    fill()
    while running:
        clock, _, job, index, began = heapq.heappop(running)
        done_epochs += clock - began
        if not driver.ends_itself and done_epochs + sum(
                clock - b for *_, b in running) > BUDGET + 1e-9:
            break  # the budget ran out while this report was due: work in flight is lost
        epoch = job.stops[index]
        noise = problem.noise / math.sqrt(epoch)
        loss = problem.expected(job.config, epoch) + rng.gauss(0.0, noise)
        if driver.report(job, epoch, loss) and index + 1 < len(job.stops):
            order += 1
            heapq.heappush(running, (clock + job.stops[index + 1] - epoch, order, job,
                                     index + 1, clock))
        for fraction in FRACTIONS:
            if fraction not in regrets and spent() >= fraction * BUDGET - 1e-9:
                regrets[fraction] = regret()
        fill()
    for fraction in FRACTIONS:
        regrets.setdefault(fraction, regret())
    label = driver.label() if isinstance(driver, NestorDriver) else None
    used = spent() if driver.ends_itself else min(spent(), BUDGET)
    return {"regret": regrets, "spent": round(used, 1), "trials": asked,
            "ask_ms_per_trial": 1000 * driver.ask_s / max(asked, 1), "auto": label}


def quartiles(values: list[float]) -> tuple[float, float, float]:
    if len(values) == 1:
        return values[0], values[0], values[0]
    q = statistics.quantiles(values, n=4, method="inclusive")
    return q[0], statistics.median(values), q[2]


def cell(width: int, index: int, seed: int, names: list[str]) -> dict[str, Any]:
    """Every search in ``names`` in turn on one (width, problem, seed)."""
    import logging
    import warnings

    logging.getLogger("syne_tune").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore")
    problem = PROBLEMS[index]
    best = reference(problem)
    made = searches(width)
    started = time.perf_counter()
    results = {n: simulate(made[n](problem, seed), problem, seed, width, best) for n in names}
    print(f"width {width} {problem.name} seed {seed} ({time.perf_counter() - started:.0f} s): "
          + ", ".join(f"{n} {r['regret'][1.0]:.3g}" for n, r in results.items()), flush=True)
    return results


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--widths", type=int, nargs="*", default=list(WIDTHS))
    parser.add_argument("--only", nargs="*", help="searches to run (default: all)")
    parser.add_argument("--jobs", type=int, default=1, help="processes running cells")
    parser.add_argument("--problems", nargs="*", help="problems to run (default: all)")
    parser.add_argument("--log", type=Path, default=RESULTS / "multifidelity_auto_cells.jsonl",
                        help="each (width, problem, seed)'s results, appended as it ends;"
                             " cells already there are not run again")
    parser.add_argument("--aggregate-only", action="store_true",
                        help="write the result from the cells the log has, running none")
    args = parser.parse_args(argv)
    chosen = [i for i, p in enumerate(PROBLEMS) if not args.problems or p.name in args.problems]
    start = machine.describe()
    names = args.only or list(searches(1))
    # Seed by seed, so that a run cut short holds every width and problem for its seeds.
    cells = [(w, i, seed) for seed in range(args.seeds) for w in args.widths for i in chosen]
    done: dict[tuple[int, int, int], dict[str, Any]] = {}
    if args.log.exists():
        for line in args.log.read_text().splitlines():
            row = json.loads(line)
            key = (row["width"], PROBLEMS_BY_NAME[row["problem"]], row["seed"])
            if key in cells and set(names) <= set(row["results"]):
                done[key] = {n: {**r, "regret": {float(f): v for f, v in r["regret"].items()}}
                             for n, r in row["results"].items() if n in names}
    todo = [c for c in cells if c not in done and not args.aggregate_only]
    with ProcessPoolExecutor(args.jobs) as pool, args.log.open("a") as log:
        futures = {pool.submit(cell, *c, names): c for c in todo}
        for future in as_completed(futures):
            (width, index, seed), results = futures[future], future.result()
            done[(width, index, seed)] = results
            log.write(json.dumps({"width": width, "problem": PROBLEMS[index].name,
                                  "seed": seed, "results": results}) + "\n")
            log.flush()
    cells = [c for c in cells if c in done]  # all, unless --aggregate-only cut it short
    widths: dict[str, Any] = {}
    for width in args.widths:
        rank_by: dict[str, dict[float, list[float]]] = {n: {f: [] for f in FRACTIONS}
                                                        for n in names}
        regret_by: dict[str, dict[str, list[float]]] = {n: {} for n in names}
        extra: dict[str, dict[str, list[float]]] = {
            n: {"spent": [], "ask_ms": [], "trials": []} for n in names}
        picks: set[str] = set()
        for (w, index, _), results in done.items():
            if w != width:
                continue
            for fraction in FRACTIONS:
                for n, r in ranks({n: r["regret"][fraction]
                                   for n, r in results.items()}).items():
                    rank_by[n][fraction].append(r)
            for n, r in results.items():
                regret_by[n].setdefault(PROBLEMS[index].name, []).append(r["regret"][1.0])
                extra[n]["spent"].append(r["spent"])
                extra[n]["ask_ms"].append(r["ask_ms_per_trial"])
                extra[n]["trials"].append(r["trials"])
                if r["auto"]:
                    picks.add(f"{n}: {r['auto']}")
        rows = []
        for n in names:
            rows.append({
                "search": n,
                "rank": {f"{int(f * 100)}%": [round(v, 2) for v in quartiles(rank_by[n][f])]
                         for f in FRACTIONS},
                "mean_rank": {f"{int(f * 100)}%": round(statistics.fmean(rank_by[n][f]), 2)
                              for f in FRACTIONS},
                "median_regret_at_100%": {p: round(statistics.median(v), 4)
                                          for p, v in regret_by[n].items()},
                "median_epochs_spent": statistics.median(extra[n]["spent"]),
                "median_trials": statistics.median(extra[n]["trials"]),
                "ask_ms_per_trial": round(statistics.median(extra[n]["ask_ms"]), 2),
            })  # fmt: skip
        widths[str(width)] = {"rows": rows, "auto_picked": sorted(picks)}
        print(f"\nwidth {width}: median rank [quartiles] over {len(chosen)} problems x"
              f" {args.seeds} seeds (1 = best of {len(names)})")
        for r in sorted(rows, key=lambda r: r["mean_rank"]["100%"]):
            print(f"  {r['search']:32s} " + "  ".join(
                f"{f} {q[1]:g} [{q[0]:g}-{q[2]:g}]" for f, q in r["rank"].items()), flush=True)
    result = {"machine": machine.finish(start), "seeds": args.seeds,
              "budget_epochs": BUDGET, "max_epochs": MAX_EPOCHS,
              "problems": [PROBLEMS[i].name for i in chosen],
              "problems_fixed": [p.name for p in PROBLEMS], "widths": widths,
              "cells": len(cells), "cells_planned": len(args.widths) * len(chosen) * args.seeds,
              "judges": "rule M (ASHA-TPE, rungs 11/33/100, eta 3) at 1, 4 and 16 at once"}
    print(f"written: {machine.write_result('multifidelity_auto', result)}")


if __name__ == "__main__":
    main()
