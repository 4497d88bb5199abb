"""Many trials at once: ``auto`` at 16, 64, 256 and 1,024 pending, against
Optuna's TPE with the constant liar and nevergrad's NGOpt with ``num_workers``.

Held-out problems, fixed here before any search ran on them: 5-D shifted
sphere, Rosenbrock, Rastrigin and a mixed space (three floats, an integer and
a categorical). Each search runs ``rounds x width`` evaluations with
``width`` slots on a virtual clock: a trial takes a duration that depends on
its configuration (0.5 to 2 time units), a free slot is asked for work at
once, and a slot the searcher leaves empty (``ask`` returned fewer) idles
until the next result, which costs time. The figures: the best value found
(regret to the known optimum, ranked among the searches per problem and
seed), the virtual time all evaluations took, the share of slot time left
idle while trials were still owed (the searcher returned fewer than the free
slots; the drain after the last ask is not counted), and the searcher's own
ask time per trial (the real seconds the driver
waits on it).

    .venv/bin/python bench/many_at_once_bench.py                      # 3 seeds
    .venv/bin/python bench/many_at_once_bench.py --widths 16 64 --seeds 5

nevergrad is a bench-only dependency, not nestor's: where it does not import,
NGOpt is left out and the results say so. Optuna's TPE refits on every trial,
so past ``--tpe-max-width`` (64) it is left out too (its ask time at the
widths it ran is in the results). It writes bench/results/many_at_once.json.
"""

from __future__ import annotations

import argparse
import heapq
import math
import random
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import machine
from bench.stats import spread
from search import Objective, make_searcher
from search.space import CategoricalParam, FloatParam, IntParam, SearchSpace

ROUNDS = 6


@dataclass(frozen=True)
class Problem:
    name: str
    space: SearchSpace
    value: Callable[[dict[str, Any]], float]  # to minimize; optimum 0


def _vector(config: dict[str, Any], n: int) -> list[float]:
    return [float(config[f"x{i}"]) for i in range(n)]


def _sphere(c: dict[str, Any]) -> float:
    return sum((x - 1.3) ** 2 for x in _vector(c, 5))


def _rosenbrock(c: dict[str, Any]) -> float:
    x = _vector(c, 5)
    return sum(100 * (x[i + 1] - x[i] ** 2) ** 2 + (1 - x[i]) ** 2 for i in range(4))


def _rastrigin(c: dict[str, Any]) -> float:
    x = [v - 0.7 for v in _vector(c, 5)]
    return 10 * len(x) + sum(v * v - 10 * math.cos(2 * math.pi * v) for v in x)


def _mixed(c: dict[str, Any]) -> float:
    base = sum((float(c[f"x{i}"]) - 0.2 * i) ** 2 for i in range(3))
    return base + 0.05 * (c["n"] - 13) ** 2 + {"a": 0.5, "b": 0.0, "c": 1.0}[c["kind"]]


BOX5 = SearchSpace(tuple(FloatParam(f"x{i}", -5.0, 5.0) for i in range(5)))
MIXED = SearchSpace((*(FloatParam(f"x{i}", -2.0, 2.0) for i in range(3)), IntParam("n", 1, 40),
                     CategoricalParam("kind", ("a", "b", "c"))))  # fmt: skip
PROBLEMS = (Problem("sphere-5d", BOX5, _sphere), Problem("rosenbrock-5d", BOX5, _rosenbrock),
            Problem("rastrigin-5d", BOX5, _rastrigin), Problem("mixed-5", MIXED, _mixed))


def duration(config: dict[str, Any], problem: Problem) -> float:
    """0.5 to 2 time units, a function of the configuration (as a trial's is)."""
    digest = random.Random(repr(sorted(config.items())) + problem.name).random()
    return 0.5 * 4 ** digest


class _Nestor:
    def __init__(self, algorithm: str, problem: Problem, seed: int, width: int,
                 budget: int) -> None:  # fmt: skip
        settings: dict[str, Any] = {"budget": budget}
        if algorithm == "auto":
            settings["parallel"] = width
        self.searcher = make_searcher(algorithm, problem.space, [Objective("y", "min")],
                                      seed=seed, **settings)  # fmt: skip
        choice = self.searcher.auto_choice
        self.label = choice.label() if choice is not None else algorithm

    def ask(self, n: int) -> list[tuple[Any, dict[str, Any]]]:
        return [(t.id, t.config) for t in self.searcher.ask(n)]

    def tell(self, key: Any, value: float) -> None:
        self.searcher.tell(key, value)


class _OptunaTPE:
    """Optuna's own ask/tell: pending trials are RUNNING, the constant liar fills them."""

    def __init__(self, problem: Problem, seed: int, width: int, budget: int) -> None:
        import optuna

        from search import _optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        self.space, self._optuna = problem.space, _optuna
        self.distributions = _optuna.distributions(optuna, problem.space)
        sampler = optuna.samplers.TPESampler(seed=seed, constant_liar=True, multivariate=True)
        self.study = optuna.create_study(sampler=sampler)
        self.label = "optuna tpe, constant liar"

    def ask(self, n: int) -> list[tuple[Any, dict[str, Any]]]:
        asked = []
        for _ in range(n):
            trial = self.study.ask(self.distributions)
            asked.append((trial, self._optuna.decode(self.space, trial.params)))
        return asked

    def tell(self, key: Any, value: float) -> None:
        self.study.tell(key, value)


class _NGOpt:
    def __init__(self, problem: Problem, seed: int, width: int, budget: int) -> None:
        import nevergrad as ng

        params: dict[str, Any] = {}
        for p in problem.space.searched:
            if isinstance(p, CategoricalParam):
                params[p.name] = ng.p.Choice(list(p.values))
            elif isinstance(p, IntParam):
                params[p.name] = ng.p.Scalar(lower=p.low, upper=p.high).set_integer_casting()
            else:
                params[p.name] = ng.p.Scalar(lower=p.low, upper=p.high)
        parametrization = ng.p.Dict(**params)
        parametrization.random_state.seed(seed)
        self.optimizer = ng.optimizers.NGOpt(parametrization=parametrization, budget=budget,
                                             num_workers=width)  # fmt: skip
        self.label = "nevergrad NGOpt"

    def ask(self, n: int) -> list[tuple[Any, dict[str, Any]]]:
        return [(c, dict(c.value)) for c in (self.optimizer.ask() for _ in range(n))]

    def tell(self, key: Any, value: float) -> None:
        self.optimizer.tell(key, value)


def nevergrad_available() -> bool:
    try:
        import nevergrad  # noqa: F401
    except ImportError:
        return False
    return True


def make(name: str, problem: Problem, seed: int, width: int, budget: int) -> Any:
    if name in ("auto", "random"):
        return _Nestor(name, problem, seed, width, budget)
    if name == "optuna-tpe":
        return _OptunaTPE(problem, seed, width, budget)
    return _NGOpt(problem, seed, width, budget)


def run(name: str, problem: Problem, seed: int, width: int) -> dict[str, Any]:
    budget = ROUNDS * width
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        searcher = make(name, problem, seed, width, budget)
        clock, told, asked, order = 0.0, 0, 0, 0
        ask_s, best, waited = 0.0, math.inf, 0.0
        running: list[tuple[float, int, Any, dict[str, Any]]] = []
        while told < budget:
            free = min(width - len(running), budget - asked)
            if free > 0:
                started = time.perf_counter()
                new = searcher.ask(free)
                ask_s += time.perf_counter() - started
                for key, config in new:
                    order += 1
                    took = duration(config, problem)
                    heapq.heappush(running, (clock + took, order, key, config))
                asked += len(new)
            if not running:
                break  # the searcher has nothing more to give
            if asked < budget:  # slots the searcher left empty while trials were owed
                waited += (width - len(running)) * (running[0][0] - clock)
            clock, _, key, config = heapq.heappop(running)
            value = problem.value(config)
            best = min(best, value)
            searcher.tell(key, value)
            told += 1
    return {"best": best, "time": clock, "idle": waited / (clock * width) if clock else 0.0,
            "ask_ms_per_trial": 1000 * ask_s / max(asked, 1), "evaluations": told,
            "label": searcher.label}


def ranks(values: dict[str, float]) -> dict[str, float]:
    ordered = sorted(values.values())
    return {k: statistics.fmean(i + 1 for i, v in enumerate(ordered) if v == value)
            for k, value in values.items()}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--widths", type=int, nargs="*", default=[16, 64, 256, 1024])
    parser.add_argument("--tpe-max-width", type=int, default=64)
    args = parser.parse_args(argv)
    start = machine.describe()
    names = ["auto", "random", "optuna-tpe"] + (["ngopt"] if nevergrad_available() else [])
    broken: dict[str, str] = {}  # a searcher that raised, and what it said
    by_width = []
    for width in args.widths:
        here = [n for n in names if (n != "optuna-tpe" or width <= args.tpe_max_width)
                and n not in broken]
        rank_of: dict[str, list[float]] = {n: [] for n in here}
        figures: dict[str, dict[str, list[float]]] = {
            n: {"idle": [], "ask_ms": [], "time": []} for n in here}
        regret: dict[str, dict[str, list[float]]] = {n: {} for n in here}
        labels: dict[str, set[str]] = {n: set() for n in here}
        for problem in PROBLEMS:
            for seed in range(args.seeds):
                results = {}
                for n in list(here):
                    try:
                        results[n] = run(n, problem, seed, width)
                    except Exception as exc:  # a published searcher's own failure
                        broken[n] = f"{type(exc).__name__}: {exc}"
                        print(f"{n} raised at width {width}: {broken[n]}; left out", flush=True)
                        here.remove(n)
                        for store in (rank_of, figures, regret, labels):
                            store.pop(n, None)
                for n, r in ranks({n: r["best"] for n, r in results.items()}).items():
                    rank_of[n].append(r)
                for n, r in results.items():
                    figures[n]["idle"].append(r["idle"])
                    figures[n]["ask_ms"].append(r["ask_ms_per_trial"])
                    figures[n]["time"].append(r["time"])
                    regret[n].setdefault(problem.name, []).append(r["best"])
                    labels[n].add(r["label"])
                print(f"width {width} {problem.name} seed {seed}: " + ", ".join(
                    f"{n} {r['best']:.3g} (idle {r['idle']:.0%}, ask {r['ask_ms_per_trial']:.2f}"
                    " ms)" for n, r in results.items()), flush=True)
        rows = []
        for n in here:
            ordered = sorted(rank_of[n])
            q1, _, q3 = statistics.quantiles(ordered, n=4) if len(ordered) > 1 else (0, 0, 0)
            rows.append({
                "search": n, "labels": sorted(labels[n]),
                "mean_rank": round(statistics.fmean(rank_of[n]), 2),
                "rank_quartiles": [round(q1, 2), round(q3, 2)],
                "median_best": {p: spread(v).cell("{:.3g}") for p, v in regret[n].items()},
                "median_idle": round(statistics.median(figures[n]["idle"]), 4),
                "median_virtual_time": round(statistics.median(figures[n]["time"]), 2),
                "median_ask_ms_per_trial": round(statistics.median(figures[n]["ask_ms"]), 3),
            })  # fmt: skip
        rows.sort(key=lambda r: r["mean_rank"])
        print(f"\nwidth {width}, {ROUNDS * width} evaluations, {len(PROBLEMS)} problems x"
              f" {args.seeds} seeds")
        print("| search | mean rank [quartiles] | idle | virtual time | ask ms/trial |")
        print("|---|---|---|---|---|")
        for r in rows:
            print(f"| {r['search']} ({'; '.join(r['labels'])}) | {r['mean_rank']}"
                  f" [{r['rank_quartiles'][0]}-{r['rank_quartiles'][1]}] |"
                  f" {r['median_idle']:.1%} | {r['median_virtual_time']} |"
                  f" {r['median_ask_ms_per_trial']} |", flush=True)
        by_width.append({"width": width, "evaluations": ROUNDS * width, "rows": rows,
                         "left_out": sorted(set(names) - set(here))})
    result = {"machine": machine.finish(start), "seeds": args.seeds, "rounds": ROUNDS,
              "problems": [p.name for p in PROBLEMS], "nevergrad": nevergrad_available(),
              "failed": broken, "widths": by_width}
    print(f"written: {machine.write_result('many_at_once', result)}")


if __name__ == "__main__":
    main()
