"""Conditional spaces and constraints: nestor's searches against Optuna's TPE, which
handles conditional spaces by define-by-run.

The problem is HPO-like and synthetic, with a known optimum (fixed here before any
result was seen): an optimiser choice whose parameters exist only with it, nested
two deep (``nesterov`` only with sgd; ``width3`` only with three layers or more),
and one constraint over parameters (``lr * layers <= 0.1``, active at the optimum).
Each optimiser has its own best learning rate; sgd with momentum 0.9, nesterov, 3
layers of width 128 and lr 10^-1.5 is the global optimum (loss 0); adam's best is a
local one at 0.10, rmsprop's at 0.15. What a search sees has Gaussian noise (0.01);
its *regret* is the noise-free loss of the trial it reports as best (the lowest
seen), less the optimum (0). Cells: median [min–max] over seeds.

Optuna's TPE runs define-by-run (the objective suggests ``momentum`` only after
``optimizer == "sgd"``), with its defaults (``optuna-tpe``) and multivariate with
``group=True`` (``optuna-tpe-group``, Optuna's own advice for conditional spaces);
a configuration that breaks the constraint is pruned before it is evaluated and
does not count against the budget, as nestor's rejection does not.
Systems are run interleaved (seed by seed, each system in turn), one trial at a
time (results oldest first). ASHA, Hyperband and PBT need a training length to
split and lq-CMA-ES searches numbers only: they are tested on conditional spaces
(tests/search/test_conditional.py) but not measured here.

    .venv/bin/python bench/conditional_bench.py --seeds 8 --budget 60
"""

from __future__ import annotations

import argparse
import math
import random
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import machine, stats
from nestor.search import make_searcher
from nestor.search.space import CategoricalParam, FloatParam, IntParam, SearchSpace

NOISE = 0.01
CONSTRAINT = "lr * layers <= 0.1"
SPACE = SearchSpace(
    (
        CategoricalParam("optimizer", ("adam", "sgd", "rmsprop")),
        FloatParam("lr", 1e-5, 1.0, log=True),
        FloatParam("beta1", 0.5, 0.999),
        FloatParam("momentum", 0.0, 0.99),
        CategoricalParam("nesterov", (True, False)),
        FloatParam("alpha", 0.8, 0.999),
        IntParam("layers", 1, 5),
        IntParam("width3", 16, 512, log=True),
    ),
    conditions={
        "beta1": {"optimizer": "adam"},
        "momentum": {"optimizer": "sgd"},
        "nesterov": {"optimizer": "sgd"},
        "alpha": {"optimizer": "rmsprop"},
        "width3": {"layers": [3, 4, 5]},
    },
    constraints=(CONSTRAINT,),
)
BEST_LR = {"adam": -3.0, "sgd": -1.5, "rmsprop": -3.5}  # log10 of each one's best lr
BASE = {"adam": 0.10, "sgd": 0.0, "rmsprop": 0.15}
OPTIMUM = 0.0


def loss(c: Mapping[str, Any]) -> float:
    """Noise-free loss of a configuration with exactly its active parameters."""
    opt = c["optimizer"]
    value = BASE[opt] + 0.5 * (math.log10(c["lr"]) - BEST_LR[opt]) ** 2
    if opt == "adam":
        value += 2.0 * (c["beta1"] - 0.9) ** 2
    elif opt == "sgd":
        value += 1.5 * (c["momentum"] - 0.9) ** 2 + (0.0 if c["nesterov"] else 0.05)
    else:
        value += 3.0 * (c["alpha"] - 0.95) ** 2
    value += 0.05 * (c["layers"] - 3) ** 2
    if "width3" in c:
        value += 0.02 * (math.log2(c["width3"]) - 7) ** 2
    else:
        value += 0.05  # two layers or fewer have no width to tune, and miss it
    return value


NESTOR = {
    "auto": ("auto", {}),
    "random": ("random", {}),
    "tpe": ("bayesian", {"sampler": "tpe"}),
    "cmaes": ("bayesian", {"sampler": "cmaes"}),
    "genetic": ("genetic", {}),
}


def run_nestor(name: str, seed: int, budget: int) -> float:
    algorithm, settings = NESTOR[name]
    searcher = make_searcher(algorithm, SPACE, [("loss", "min")], seed=seed, budget=budget,
                             **settings)
    noise = random.Random(seed * 7919 + 1)
    best = (math.inf, math.inf)
    while not searcher.done():
        trials = searcher.ask(1)
        if not trials:
            break
        trial = trials[0]
        assert SPACE.contains(trial.config), trial.config
        true = loss(trial.config)
        seen = true + noise.gauss(0.0, NOISE)
        best = min(best, (seen, true))
        searcher.tell(trial.id, seen)
    return best[1] - OPTIMUM


def run_optuna(name: str, seed: int, budget: int) -> float:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    import warnings

    warnings.simplefilter("ignore")
    extra = {"multivariate": True, "group": True} if name == "optuna-tpe-group" else {}
    study = optuna.create_study(sampler=optuna.samplers.TPESampler(seed=seed, **extra))
    noise = random.Random(seed * 7919 + 1)
    done: list[tuple[float, float]] = []

    def objective(trial: Any) -> float:
        c: dict[str, Any] = {"optimizer": trial.suggest_categorical(
            "optimizer", ["adam", "sgd", "rmsprop"])}
        c["lr"] = trial.suggest_float("lr", 1e-5, 1.0, log=True)
        if c["optimizer"] == "adam":
            c["beta1"] = trial.suggest_float("beta1", 0.5, 0.999)
        elif c["optimizer"] == "sgd":
            c["momentum"] = trial.suggest_float("momentum", 0.0, 0.99)
            c["nesterov"] = trial.suggest_categorical("nesterov", [True, False])
        else:
            c["alpha"] = trial.suggest_float("alpha", 0.8, 0.999)
        c["layers"] = trial.suggest_int("layers", 1, 5)
        if c["layers"] >= 3:
            c["width3"] = trial.suggest_int("width3", 16, 512, log=True)
        if not SPACE.satisfies(c):
            raise optuna.TrialPruned()  # not evaluated, not counted
        true = loss(c)
        seen = true + noise.gauss(0.0, NOISE)
        done.append((seen, true))
        return seen

    while len(done) < budget:
        study.optimize(objective, n_trials=1)
    return min(done)[1] - OPTIMUM


SYSTEMS = [*NESTOR, "optuna-tpe", "optuna-tpe-group"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=8)
    parser.add_argument("--budget", type=int, default=60)
    parser.add_argument("--systems", default=",".join(SYSTEMS))
    args = parser.parse_args(argv)
    systems = args.systems.split(",")
    start = machine.describe()
    regrets: dict[str, list[float]] = {s: [] for s in systems}
    seconds: dict[str, float] = dict.fromkeys(systems, 0.0)
    for seed in range(args.seeds):  # interleaved: every system on a seed, then the next
        for system in systems:
            began = time.perf_counter()
            run = run_optuna if system.startswith("optuna") else run_nestor
            regrets[system].append(run(system, seed, args.budget))
            seconds[system] += time.perf_counter() - began
            print(f"seed {seed} {system}: regret {regrets[system][-1]:.4f}", flush=True)
    cells = {s: vars(stats.spread(regrets[s])) for s in systems}
    result = {
        "seeds": args.seeds, "budget": args.budget, "noise": NOISE, "constraint": CONSTRAINT,
        "space": repr(SPACE), "systems": systems, "regret": regrets, "cells": cells,
        "seconds": seconds, "machine": machine.finish(start),
    }
    print(f"written: {machine.write_result('conditional', result)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
