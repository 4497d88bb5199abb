"""Many trials at once: ``auto`` at 16, 64, 256 and 1,024 pending, against
Optuna's TPE with the constant liar, nevergrad's NGOpt with ``num_workers`` and
DeepHyper's CBO, through their own ask/tell.

Held-out problems (``HELDOUT_PROBLEMS``), fixed and committed before any search
ran on them: a rotated 8-D ellipsoid, 6-D Ackley, 4-D Styblinski-Tang, an
HPO-like mixed space (log floats, integers, two categoricals) and two
multi-fidelity problems (1-81 epochs; one whose short trainings mislead, one
whose do not). ``--problems dev`` runs the first run's problems, on which the
genetic search's operators were tuned (issue 29 item 5), ``--problems dev-numeric``
the three of them that are numbers only, ``--problems dev-mf`` two dev
multi-fidelity problems (fixed before any search ran on them; one with noisy
reported losses, one whose short trainings mislead through a learning rate) for
choosing what ``auto`` picks for a trainer with a fidelity; ``--only`` takes nestor
searches with their settings as well (``ALGO:KEY=VALUE,...``), so a sweep of what a rule of ``auto``
might pick runs on the dev problems beside ``auto`` and the published searchers.

Each search runs ``ROUNDS x width`` full trainings' worth (epochs on a
multi-fidelity problem, where ``auto`` is told ``max_fidelity`` and the others
train each trial in full) with ``width`` slots on a virtual clock: a full trial
takes 0.5 to 2 time units from its configuration (a part of one its share), a
free slot is asked for work at once, and a slot the searcher leaves empty idles
until the next result, which costs time. The figures: the best value of a
fully trained trial (regret to the optimum; on the multi-fidelity problems the
loss after all 81 epochs), ranked among the searches per problem and seed; the
virtual time; the share of slot time left idle while work was owed and the
searcher had more to give later (not the drain at the end, where the last trials
run and nothing that fits is left: a search with a cost budget stops with less
than one trial's worth unspent, where a search of whole trainings spends the
budget to the last epoch; results before issue 29 session 5 counted that drain
too); and the searcher's own ask time per trial (real seconds, measured on a shared machine
with ``--jobs`` runs side by side).

    python bench/many_at_once_bench.py --jobs 4                   # 3 seeds
    python bench/many_at_once_bench.py --problems dev --widths 16 64
    python bench/many_at_once_bench.py --problems dev-numeric --widths 16 32 --seeds 5 \
        --tag rule3a --only auto ngopt bayesian:sampler=lq-cmaes,population=16 ...

nevergrad and DeepHyper are pinned in pyproject.toml's ``bench`` extra and
requirements.lock, so ``make setup`` installs them (nestor itself never imports either).
Where a competitor does not import it is left out and the results say so. Past
``MAX_WIDTH`` a searcher is left out for its cost (its ask or tell time grows with the
trials told; the figures are beside ``MAX_WIDTH``), and the multi-fidelity problems run
only up to ``--mf-max-width``. Every run of every width shares one pool of ``--jobs``
processes, the costliest first. It writes
bench/results/many_at_once.json (``--problems dev``: many_at_once_dev.json).
"""

from __future__ import annotations

import argparse
import heapq
import importlib
import json
import math
import random
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import machine
from bench.nevergrad_numpy2 import patch_nevergrad_for_numpy2
from bench.problems import rotation
from bench.stats import spread
from nestor.search import Objective, make_searcher
from nestor.search.space import CategoricalParam, FloatParam, IntParam, SearchSpace

ROUNDS = 6


@dataclass(frozen=True)
class Problem:
    name: str
    space: SearchSpace
    value: Callable[[dict[str, Any]], float]  # to minimize; optimum 0
    # Multi-fidelity problems: the full length of a trial (epochs) and the loss after
    # t of them, value(config) being the floor it learns towards; None: one length.
    fidelity: int | None = None
    pace: Callable[[dict[str, Any]], float] | None = None  # epochs to learn 63 %
    # The standard deviation of the noise on a reported loss after one epoch (it falls
    # as 1 / sqrt(epochs)); the score is always the noise-free loss.
    noise: float = 0.0

    def loss(self, config: dict[str, Any], epochs: float) -> float:
        """The (noise-free) loss after ``epochs``: the floor plus what is left of an
        untrained 3 after exp(-epochs / pace); the floor itself for a one-length problem."""
        floor = self.value(config)
        if self.fidelity is None or self.pace is None:
            return floor
        return floor + (UNTRAINED - floor) * math.exp(-epochs / self.pace(config))

    def observed(self, config: dict[str, Any], epochs: float) -> float:
        """The loss a trial reports after ``epochs``: ``loss`` plus noise of standard
        deviation ``noise / sqrt(epochs)``, drawn from the configuration and epochs (the
        same trial reports the same value in every run)."""
        if not self.noise:
            return self.loss(config, epochs)
        draw = random.Random(f"{self.name} {sorted(config.items())!r} {epochs:g}").gauss(0, 1)
        return self.loss(config, epochs) + self.noise / math.sqrt(max(epochs, 1.0)) * draw


UNTRAINED = 3.0


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
# The first run's problems (issue 29, session 2). The genetic search's operators were
# tuned on these (issue 29 item 5), so they are no longer held out: ``--problems dev``.
DEV_PROBLEMS = (Problem("sphere-5d", BOX5, _sphere), Problem("rosenbrock-5d", BOX5, _rosenbrock),
                Problem("rastrigin-5d", BOX5, _rastrigin), Problem("mixed-5", MIXED, _mixed))


# --- held out: fixed here (issue 29, session 3) before any search ran on them ----------


ROTATION8 = rotation(8, 29)


def _ellipsoid_rotated(c: dict[str, Any]) -> float:
    """Rotated ellipsoid, condition 1e4, optimum at 1.1 in every coordinate."""
    x = [v - 1.1 for v in _vector(c, 8)]
    y = [sum(r * v for r, v in zip(row, x, strict=True)) for row in ROTATION8]
    return sum(10 ** (4 * i / 7) * v * v for i, v in enumerate(y))


def _ackley(c: dict[str, Any]) -> float:
    x = [v + 0.9 for v in _vector(c, 6)]
    n = len(x)
    a = -20 * math.exp(-0.2 * math.sqrt(sum(v * v for v in x) / n))
    return a - math.exp(sum(math.cos(2 * math.pi * v) for v in x) / n) + 20 + math.e


STYBLINSKI_MIN = -39.16616570377142  # per coordinate, at -2.903534


def _styblinski_tang(c: dict[str, Any]) -> float:
    x = _vector(c, 4)
    return sum((v**4 - 16 * v * v + 5 * v) / 2 - STYBLINSKI_MIN for v in x)


OPT_LR = {"sgd": -1.5, "adam": -3.0, "adamw": -3.2, "rmsprop": -3.5}  # best log10 lr
OPT_FLOOR = {"sgd": 0.15, "adam": 0.05, "adamw": 0.0, "rmsprop": 0.1}
ACT = {"relu": 0.05, "gelu": 0.0, "tanh": 0.2}


def _hpo(c: dict[str, Any]) -> float:
    """An HPO-like loss: the best learning rate depends on the optimizer, momentum
    matters for sgd only, depth and width interact; optimum 0 (adamw, gelu)."""
    lr = math.log10(c["lr"]) - OPT_LR[c["optimizer"]]
    momentum = (c["momentum"] - 0.9) ** 2 if c["optimizer"] == "sgd" else 0.0
    depth = 0.04 * (c["layers"] - 4) ** 2
    width = 0.03 * (math.log2(c["units"]) - 8 + 0.3 * (c["layers"] - 4)) ** 2
    decay = 0.05 * (math.log10(c["weight_decay"]) + 4) ** 2
    return (0.3 * lr * lr + momentum + depth + width + decay + OPT_FLOOR[c["optimizer"]]
            + ACT[c["activation"]])


def _mf_floor(c: dict[str, Any]) -> float:
    return sum((float(c[f"x{i}"]) - 0.4 - 0.05 * i) ** 2 for i in range(5))


BOX8 = SearchSpace(tuple(FloatParam(f"x{i}", -5.0, 5.0) for i in range(8)))
BOX6 = SearchSpace(tuple(FloatParam(f"x{i}", -5.0, 5.0) for i in range(6)))
BOX4 = SearchSpace(tuple(FloatParam(f"x{i}", -5.0, 5.0) for i in range(4)))
HPO = SearchSpace((FloatParam("lr", 1e-5, 1.0, log=True),
                   FloatParam("weight_decay", 1e-7, 1e-1, log=True),
                   FloatParam("momentum", 0.0, 0.99), IntParam("layers", 1, 8),
                   IntParam("units", 16, 1024, log=True),
                   CategoricalParam("optimizer", ("sgd", "adam", "adamw", "rmsprop")),
                   CategoricalParam("activation", ("relu", "gelu", "tanh"))))  # fmt: skip
UNIT5 = SearchSpace(tuple(FloatParam(f"x{i}", 0.0, 1.0) for i in range(5)))
MAX_EPOCHS = 81

HELDOUT_PROBLEMS = (
    Problem("ellipsoid-rot-8d", BOX8, _ellipsoid_rotated),
    Problem("ackley-6d", BOX6, _ackley),
    Problem("styblinski-tang-4d", BOX4, _styblinski_tang),
    Problem("hpo-mixed-7", HPO, _hpo),
    # Multi-fidelity, 1-81 epochs: x0 sets the pace, a fast learner (small x0) is far
    # from the optimum's 0.4, so short trainings rank configurations wrongly.
    Problem("mf-crossing-5d", UNIT5, _mf_floor, MAX_EPOCHS, lambda c: 2 + 30 * c["x0"]),
    # Multi-fidelity with one pace everywhere: short trainings rank faithfully.
    Problem("mf-faithful-5d", UNIT5, _mf_floor, MAX_EPOCHS, lambda c: 12.0),
)  # fmt: skip


# --- dev multi-fidelity: fixed here (issue 29, session 5) before any search ran on them,
# to choose what ``auto`` picks for a trainer with a fidelity many at once without
# fitting it on the held-out pair above.


def _sphere_tenth(c: dict[str, Any]) -> float:
    return sum(x * x for x in _vector(c, 3)) / 10


def _lr_floor(c: dict[str, Any]) -> float:
    return 0.15 * (math.log10(c["lr"]) + 2.5) ** 2 + sum(
        (float(c[f"x{i}"]) - 0.6 + 0.1 * i) ** 2 for i in (1, 2, 3))


def _lr_pace(c: dict[str, Any]) -> float:
    return 1.5 * c["lr"] ** -0.35 * (0.5 + float(c["x1"]))


BOX3 = SearchSpace(tuple(FloatParam(f"x{i}", -5.0, 5.0) for i in range(3)))
LR4 = SearchSpace((FloatParam("lr", 1e-4, 1.0, log=True),
                   *(FloatParam(f"x{i}", 0.0, 1.0) for i in (1, 2, 3))))  # fmt: skip
DEV_MF_PROBLEMS = (
    # bench/multifidelity_bench.py's simulated training (never held out) on 81 epochs
    # instead of 27 and a tenth of its scale: the floor a 3-D sphere / 10 on [-5, 5]^3,
    # 0.8 of the distance to it left every 3 epochs (pace 3 / ln 1.25 = 13.4 epochs)
    # and reported losses noisy, 0.5 / sqrt(epochs), so 1 to 9 epochs rank badly. The
    # loss after 81 epochs is smallest at the origin: 3 x 1.25^-27 = 0.0074.
    Problem("mf-noisy-sphere-3d", BOX3, _sphere_tenth, MAX_EPOCHS, lambda c: 3 / math.log(1.25),
            noise=0.5),
    # Short trainings mislead through a learning rate: a large one learns fast (pace
    # 1.5 lr^-0.35 (0.5 + x1) epochs: 1.5 at lr 1, 11 at the optimum) towards a worse
    # floor (0.15 (log10 lr + 2.5)^2 plus a sphere with its centre at x1..x3 = 0.5,
    # 0.4, 0.3), so rungs of 3 and 9 epochs rank lr 1 ahead of the optimum. The loss
    # after 81 epochs is smallest just off the floor's optimum: 0.0020 at lr 10^-2.465,
    # x1 0.493, x2 0.4, x3 0.3 (0.0022 at the floor's own, lr 10^-2.5, x1 0.5).
    Problem("mf-lr-mislead-4d", LR4, _lr_floor, MAX_EPOCHS, _lr_pace),
)  # fmt: skip
# The dev problems that are numbers only, for sweeps of what a rule for numeric spaces
# might pick (lq-CMA-ES refuses a categorical).
# ``heldout-mf``: the two held-out multi-fidelity problems alone, for the wide runs that
# the six together do not fit on this machine (issue 29 session 5: 64 at once).
PROBLEM_SETS = {"heldout": HELDOUT_PROBLEMS, "dev": DEV_PROBLEMS,
                "dev-numeric": DEV_PROBLEMS[:3],
                "heldout-mf": tuple(p for p in HELDOUT_PROBLEMS if p.fidelity is not None),
                "dev-mf": DEV_MF_PROBLEMS}
PROBLEMS = HELDOUT_PROBLEMS


def duration(config: dict[str, Any], problem: Problem) -> float:
    """0.5 to 2 time units for a full trial, a function of the configuration (as a
    trial's is); a part of a multi-fidelity trial takes its share."""
    digest = random.Random(repr(sorted(config.items())) + problem.name).random()
    return 0.5 * 4 ** digest


def candidate(name: str) -> tuple[str, dict[str, Any]]:
    """A nestor search named with its settings, ``ALGO:KEY=VALUE,...`` (values read as
    int, float or text): what a rule of ``auto`` might pick, run beside it in a sweep.

    >>> candidate("genetic:population=16,crossover=de")
    ('genetic', {'population': 16, 'crossover': 'de'})
    """
    algorithm, _, rest = name.partition(":")
    settings: dict[str, Any] = {}
    for item in filter(None, rest.split(",")):
        key, _, text = item.partition("=")
        for kind in (int, float):
            try:
                settings[key] = kind(text)
                break
            except ValueError:
                continue
        else:
            settings[key] = text
    return algorithm, settings


HALVING = ("asha", "hyperband")  # searches that train in stretches (a sweep's candidates)


class _Nestor:
    def __init__(self, algorithm: str, problem: Problem, seed: int, width: int,
                 budget: int, extra: dict[str, Any] | None = None) -> None:  # fmt: skip
        settings: dict[str, Any] = {"budget": budget, **(extra or {})}
        if algorithm == "auto":
            settings["parallel"] = width
            if problem.fidelity is not None:
                settings["max_fidelity"] = problem.fidelity
        elif algorithm in HALVING and problem.fidelity is not None:
            # As rule M would run it: the budget in epochs, the top rung a full training.
            settings = {"budget": {"epochs": budget * problem.fidelity},
                        "max_budget": problem.fidelity, **(extra or {})}
        self.searcher = make_searcher(algorithm, problem.space, [Objective("y", "min")],
                                      seed=seed, **settings)  # fmt: skip
        choice = self.searcher.auto_choice
        described = ", ".join(f"{k} {v}" for k, v in (extra or {}).items())
        self.label = choice.label() if choice is not None else " ".join(
            filter(None, (algorithm, described)))
        self.full = problem.fidelity

    def ask(self, n: int) -> list[tuple[Any, dict[str, Any], float, float]]:
        """(key, config, from epoch, until epoch) of each trial asked."""
        asked = []
        for t in self.searcher.ask(n):
            if t.budget is None:
                asked.append((t.id, t.config, 0.0, float(self.full or 1)))
                continue
            begin = 0.0
            if t.continue_from is not None:
                begin = float(self.searcher.trials[t.continue_from].budget)
            asked.append((t.id, t.config, begin, float(t.budget)))
        return asked

    def tell(self, key: Any, value: float, cost: float) -> None:
        self.searcher.tell(key, value, cost=cost)

    def done(self) -> bool:
        return self.searcher.done()


class _Full:
    """A published searcher's trials, each trained in full."""

    full: int | None = None

    def ask(self, n: int) -> list[tuple[Any, dict[str, Any], float, float]]:
        return [(k, c, 0.0, float(self.full or 1)) for k, c in self._ask(n)]

    def _ask(self, n: int) -> list[tuple[Any, dict[str, Any]]]:
        raise NotImplementedError

    def done(self) -> bool:
        return False


class _OptunaTPE(_Full):
    """Optuna's own ask/tell: pending trials are RUNNING, the constant liar fills them."""

    def __init__(self, problem: Problem, seed: int, width: int, budget: int) -> None:
        import optuna

        from nestor.search import _optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        self.space, self._optuna, self.full = problem.space, _optuna, problem.fidelity
        self.distributions = _optuna.distributions(optuna, problem.space)
        sampler = optuna.samplers.TPESampler(seed=seed, constant_liar=True, multivariate=True)
        self.study = optuna.create_study(sampler=sampler)
        self.label = "optuna tpe, constant liar"

    def _ask(self, n: int) -> list[tuple[Any, dict[str, Any]]]:
        asked = []
        for _ in range(n):
            trial = self.study.ask(self.distributions)
            asked.append((trial, self._optuna.decode(self.space, trial.params)))
        return asked

    def tell(self, key: Any, value: float, cost: float) -> None:
        self.study.tell(key, value)


class _NGOpt(_Full):
    def __init__(self, problem: Problem, seed: int, width: int, budget: int) -> None:
        import nevergrad as ng

        patch_nevergrad_for_numpy2()
        params: dict[str, Any] = {}
        for p in problem.space.searched:
            if isinstance(p, CategoricalParam):
                params[p.name] = ng.p.Choice(list(p.values))
            elif isinstance(p, IntParam):
                scalar = (ng.p.Log(lower=p.low, upper=p.high) if p.log
                          else ng.p.Scalar(lower=p.low, upper=p.high))
                params[p.name] = scalar.set_integer_casting()
            elif p.log:
                params[p.name] = ng.p.Log(lower=p.low, upper=p.high)
            else:
                params[p.name] = ng.p.Scalar(lower=p.low, upper=p.high)
        parametrization = ng.p.Dict(**params)
        parametrization.random_state.seed(seed)
        self.optimizer = ng.optimizers.NGOpt(parametrization=parametrization, budget=budget,
                                             num_workers=width)  # fmt: skip
        self.label, self.full = "nevergrad NGOpt", problem.fidelity

    def _ask(self, n: int) -> list[tuple[Any, dict[str, Any]]]:
        return [(c, dict(c.value)) for c in (self.optimizer.ask() for _ in range(n))]

    def tell(self, key: Any, value: float, cost: float) -> None:
        self.optimizer.tell(key, value)


class _CBO(_Full):
    """DeepHyper's CBO through its ask/tell (it maximizes: told the negated value);
    ``multi_point_strategy="cl_max"``, its constant liar, is its default."""

    def __init__(self, problem: Problem, seed: int, width: int, budget: int) -> None:
        import tempfile

        from deephyper.hpo import CBO, HpProblem

        hp = HpProblem()
        for p in problem.space.searched:
            if isinstance(p, CategoricalParam):
                hp.add_hyperparameter(list(p.values), p.name)
            elif isinstance(p, IntParam):
                hp.add_hyperparameter((p.low, p.high, "log-uniform" if p.log else "uniform"),
                                      p.name)  # fmt: skip
            else:
                hp.add_hyperparameter((float(p.low), float(p.high),
                                       "log-uniform" if p.log else "uniform"), p.name)
        self._dir = tempfile.TemporaryDirectory(prefix="many-at-once-cbo-")
        self.search = CBO(hp, random_state=seed, log_dir=self._dir.name,
                          checkpoint_history_to_csv=False)  # fmt: skip
        self.label, self.full, self._order = "deephyper CBO", problem.fidelity, 0

    def _ask(self, n: int) -> list[tuple[Any, dict[str, Any]]]:
        asked = []
        for config in self.search.ask(n):
            self._order += 1
            asked.append(((self._order, config), dict(config)))
        return asked

    def tell(self, key: Any, value: float, cost: float) -> None:
        self.search.tell([(key[1], -value)])


COMPETITORS = {"optuna-tpe": _OptunaTPE, "ngopt": _NGOpt, "cbo": _CBO}
SEARCHES = ("auto", "random", *COMPETITORS)
# Widths past which a searcher is left out for the machine time it takes. Measured
# one run at a time on this 2-core machine at load 1.5 (issue 29 session 6): Optuna's
# TPE refits on every ask, so a run costs about the square of its trials: 1.4 s at 64
# at once, 15-53 s at 256 (1,536 trials), 157-445 s at 1,024 (one seed,
# many_at_once_tpe1024.json): 18 runs a width would add about 40 minutes with 2
# processes, so the default leaves it out past 256. NGOpt takes 37-51 s a run at
# 1,024. DeepHyper's CBO refits its forest on every tell: 49-59 s a run at 16 at
# once (96 trials); at 64 a tell and an ask took 0.9 s by the 96th trial, 378-447 s
# a run on a 16-core machine (many_at_once_cbo64.json): left out past 16.
# Sessions 3 and 4 measured at load 20-40, where everything took several times longer.
MAX_WIDTH = {"optuna-tpe": 256, "cbo": 16, "ngopt": 1024}
MODULES = {"ngopt": "nevergrad", "cbo": "deephyper"}


def available(name: str) -> bool:
    """Whether a bench-only competitor's package imports here (nestor needs neither)."""
    if name not in MODULES:
        return True
    try:
        importlib.import_module(MODULES[name])
    except ImportError:
        return False
    return True


def make(name: str, problem: Problem, seed: int, width: int, budget: int) -> Any:
    if name in ("auto", "random"):
        return _Nestor(name, problem, seed, width, budget)
    if ":" in name:
        algorithm, settings = candidate(name)
        return _Nestor(algorithm, problem, seed, width, budget, settings)
    return COMPETITORS[name](problem, seed, width, budget)


def run(name: str, problem: Problem, seed: int, width: int) -> dict[str, Any]:
    """One search on one problem: ``ROUNDS x width`` full trainings' worth of work
    (epochs on a multi-fidelity problem) with ``width`` slots on the virtual clock."""
    full = float(problem.fidelity or 1)
    trials = ROUNDS * width
    budget = trials * full
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        searcher = make(name, problem, seed, width, trials)
        clock, spent, committed, asked, order = 0.0, 0.0, 0.0, 0, 0
        ask_s, best, waited, unanswered = 0.0, math.inf, 0.0, 0.0
        running: list[tuple[float, int, Any, dict[str, Any], float, float]] = []
        while True:
            free = width - len(running)
            owed = committed < budget - 1e-9 and not searcher.done()
            if free > 0 and owed:
                started = time.perf_counter()
                new = searcher.ask(free)
                ask_s += time.perf_counter() - started
                for key, config, begin, until in new:
                    if committed + (until - begin) > budget + 1e-9:
                        continue  # past the budget: never run (a full-training searcher's)
                    order += 1
                    committed += until - begin
                    took = duration(config, problem) * (until - begin) / full
                    heapq.heappush(running, (clock + took, order, key, config, begin, until))
                asked += len(new)
                if new:  # the slots it left empty were waiting on it: idle
                    waited, unanswered = waited + unanswered, 0.0
            if not running:
                break  # the searcher has nothing more to give
            if owed:  # slots left empty while work was owed: idle if it gives more later
                unanswered += (width - len(running)) * (running[0][0] - clock)
            clock, _, key, config, begin, until = heapq.heappop(running)
            if until >= full:
                best = min(best, problem.loss(config, until))
            searcher.tell(key, problem.observed(config, until), until - begin)
            spent += until - begin
    return {"best": best, "time": clock, "idle": waited / (clock * width) if clock else 0.0,
            "ask_ms_per_trial": 1000 * ask_s / max(asked, 1), "evaluations": asked,
            "spent": spent, "label": searcher.label}


Job = tuple[str, str, int, int, int]  # search, problem set, problem, seed, width


def _job(job: Job) -> dict[str, Any] | str:
    """One run in a worker process: its figures, or what the searcher raised."""
    name, problems, k, seed, width = job
    try:
        return run(name, PROBLEM_SETS[problems][k], seed, width)
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"


def ranks(values: dict[str, float]) -> dict[str, float]:
    ordered = sorted(values.values())
    return {k: statistics.fmean(i + 1 for i, v in enumerate(ordered) if v == value)
            for k, value in values.items()}


# Roughly how a run's seconds grow with its trials n, per searcher (this machine, load
# 1.5; the figures beside MAX_WIDTH): NGOpt asks in about 8 ms a trial, Optuna's TPE
# and DeepHyper's CBO refit on every ask or tell, so theirs grow as n squared.
COST_MS = {"ngopt": lambda n: 8 * n, "optuna-tpe": lambda n: 0.015 * n * n,
           "cbo": lambda n: 5 * n * n}  # fmt: skip


def cost_guess(job: Job) -> float:
    """About how long a run takes, in ms, to start the longest first: a process that
    starts the slowest run last keeps the whole bench waiting on it."""
    name, _, _, _, width = job
    trials = ROUNDS * width
    return COST_MS.get(name, lambda n: 0.1 * n)(trials)


def run_all(jobs: list[Job], processes: int,
            runs: Path | None = None) -> dict[Job, dict[str, Any] | str]:
    """Every run of every width in one pool, the longest first, so no process waits on
    another width's last run; a line as each ends (a wide run takes minutes). With
    ``runs`` (JSON lines) each finished run is appended as it ends and the runs already
    there are not run again: a bench stopped at a time limit keeps what it finished and
    goes on from there."""
    done: dict[Job, dict[str, Any] | str] = {}
    if runs is not None and runs.exists():
        for line in runs.read_text().splitlines():
            if line.strip():
                entry = json.loads(line)
                done[tuple(entry["job"])] = entry["outcome"]  # type: ignore[index]
        done = {job: done[job] for job in jobs if job in done}
        print(f"{len(done)} of {len(jobs)} runs already in {runs}", flush=True)
    started = time.monotonic()
    with ProcessPoolExecutor(processes) as pool:
        futures = {pool.submit(_job, job): job
                   for job in sorted(jobs, key=cost_guess, reverse=True)
                   if job not in done}  # fmt: skip
        for future in as_completed(futures):
            job = futures[future]
            done[job] = future.result()
            if runs is not None:
                with runs.open("a") as out:
                    out.write(json.dumps({"job": job, "outcome": done[job]}) + "\n")
            name, problems, k, seed, width = job
            print(f"[{len(done)}/{len(jobs)} runs, {time.monotonic() - started:.0f} s]"
                  f" {name} at {width}, {PROBLEM_SETS[problems][k].name}, seed {seed}",
                  flush=True)
    return done


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--widths", type=int, nargs="*", default=[16, 64, 256, 1024])
    parser.add_argument("--problems", choices=sorted(PROBLEM_SETS), default="heldout")
    parser.add_argument("--only", nargs="*", help="searches to run (default: all)")
    parser.add_argument("--jobs", type=int, default=1, help="runs in parallel processes")
    parser.add_argument("--tag", default="", help="write many_at_once_TAG.json instead")
    parser.add_argument("--runs", type=Path, help="JSON lines: each finished run appended; "
                        "the runs already there are not run again")
    parser.add_argument("--mf-max-width", type=int, default=1024,
                        help="widths past which the multi-fidelity problems are left out")
    for name, width in MAX_WIDTH.items():
        parser.add_argument(f"--{name}-max-width", type=int, default=width)
    args = parser.parse_args(argv)
    start = machine.describe()
    problems = PROBLEM_SETS[args.problems]
    limit = {n: getattr(args, f"{n.replace('-', '_')}_max_width") for n in MAX_WIDTH}
    names = [n for n in (args.only or SEARCHES) if available(n)]
    broken: dict[str, str] = {}  # a searcher that raised, and what it said
    here_at = {w: [n for n in names if w <= limit.get(n, w)] for w in args.widths}
    jobs = [(n, args.problems, k, seed, width) for width in args.widths
            for k, problem in enumerate(problems)
            if problem.fidelity is None or width <= args.mf_max_width
            for seed in range(args.seeds) for n in here_at[width]]
    done = run_all(jobs, args.jobs, args.runs)
    by_width = []
    for width in args.widths:
        here = [n for n in here_at[width] if n not in broken]
        rank_of: dict[str, list[float]] = {n: [] for n in here}
        figures: dict[str, dict[str, list[float]]] = {
            n: {"idle": [], "ask_ms": [], "time": []} for n in here}
        regret: dict[str, dict[str, list[float]]] = {n: {} for n in here}
        labels: dict[str, set[str]] = {n: set() for n in here}
        for k, problem in enumerate(problems):
            if problem.fidelity is not None and width > args.mf_max_width:
                continue
            for seed in range(args.seeds):
                results = {}
                for n in list(here):
                    outcome = done[(n, args.problems, k, seed, width)]
                    if isinstance(outcome, str):  # a published searcher's own failure
                        broken[n] = outcome
                        print(f"{n} raised at width {width}: {broken[n]}; left out", flush=True)
                        here.remove(n)
                        for store in (rank_of, figures, regret, labels):
                            store.pop(n, None)
                    else:
                        results[n] = outcome
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
        ran = sum(p.fidelity is None or width <= args.mf_max_width for p in problems)
        print(f"\nwidth {width}, {ROUNDS * width} evaluations, {ran} problems x"
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
              "problem_set": args.problems,
              "problems": [p.name for p in problems],
              "multi_fidelity": [p.name for p in problems if p.fidelity is not None],
              "max_fidelity": MAX_EPOCHS, "max_width": limit,
              "multi_fidelity_max_width": args.mf_max_width, "jobs": args.jobs,
              "not_installed": [n for n in (args.only or SEARCHES) if not available(n)],
              "failed": broken, "widths": by_width}
    name = "many_at_once" if args.problems == "heldout" else f"many_at_once_{args.problems}"
    name = name.replace("-", "_")
    name += f"_{args.tag}" if args.tag else ""
    print(f"written: {machine.write_result(name, result)}")


if __name__ == "__main__":
    main()
