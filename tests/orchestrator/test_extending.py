"""Worked examples of extending nestor, built here, with the files each one needs counted
(issue 42 item 2: a name is declared once, beside its implementation).

Each example writes its new member into a temporary folder, outside the source tree, and
shows that nestor takes it everywhere its family is listed, with no other file edited:

- a search algorithm: one module (its class, ``@register``), found through the
  ``nestor.search`` entry-point group as a package installed beside nestor would be (a
  module in ``search/`` is found the same way, by :func:`nestor.search._registry.discover`);
  the spec accepts it and checks its settings (`nestor validate`), `nestor sweep` lists
  it with its settings' flags, ``make_searcher`` runs it, the searches' contract tests
  take it up, and a sweep runs it end to end;
- a communication backend: one module (its ``Comm`` class, ``@register``), found through
  the ``nestor.comm`` entry-point group; the spec, `nestor sweep --backend` and
  ``python -m nestor.trainers --backend`` take it, the planner's profiler launches it,
  and a 2-rank trial's gang meets and trains over it (its class says its ranks meet as
  torch's do: ``rendezvous = "env"``);
- an execution backend: one module (a :class:`~orchestrator.backends.interface.Backend`
  subclass: here one that runs each attempt in the driver's own process) runs a
  workflow through the engine's one run path, ``run_workflow``, with nothing else
  edited; making `nestor run` choose it by a flag would add ``backends/factory.py`` and
  ``commands/cli.py`` (the two backends there are chosen by ``simulated=``, not by name);
- a CLI command: one module (a click command), found through the ``nestor.commands``
  entry-point group: `nestor --help` lists it and `nestor NAME` runs it (a built-in one
  is its module and the line in ``commands/cli.py`` that adds it).
"""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

NESTOR = str(Path(sys.executable).parent / "nestor")
TESTS = Path(__file__).resolve().parents[1]

TINY_SEARCH = '''
"""A walk along each parameter's range, ``step`` of it a trial, from a point the seed
picks: the worked example. It keeps the contract every search keeps
(``tests/search/test_search_contract.py``): enqueued and warm-start configurations first."""

import random
from dataclasses import dataclass
from typing import Any

from nestor.search import Observation, Searcher, SearchSettings, Trial, register, setting
from nestor.search.space import CategoricalParam, from_unit


@dataclass(frozen=True)
class WalkSettings(SearchSettings):
    step: float = setting(0.25, "share of each range a trial moves on", gt=0, le=1)


@register
class WalkSearch(Searcher):
    algorithm = "walk"
    Settings = WalkSettings

    def __init__(self, space: Any, objectives: Any, **settings: Any) -> None:
        s = self.Settings(**settings)
        super().__init__(space, objectives, seed=s.seed, budget=s.budget)
        self.step, self._at = s.step, random.Random(s.seed).random()
        self._seeds: list[dict[str, Any]] = []  # asked first (enqueued, warm start's best)

    @property
    def planned(self) -> int:
        return self.budget if self.budget is not None else 20

    def _ask(self, n: int) -> list[Trial]:
        trials = []
        for _ in range(n):
            if self._seeds:
                trials.append(self._new_trial(self._seeds.pop(0), origin="warm-start"))
                continue
            trials.append(self._new_trial({p.name: self._value(p) for p in self.space.searched}))
            self._at = (self._at + self.step) % 1.0
        return trials

    def _value(self, param: Any) -> Any:
        if isinstance(param, CategoricalParam):
            return param.values[int(self._at * len(param.values))]
        return from_unit(param, self._at)

    def _tell(self, trial: Trial, observation: Observation) -> None:
        pass  # a walk learns nothing

    def _warm_start(self, observations: list[Observation]) -> None:
        good = sorted((o for o in observations if o.values is not None),
                      key=lambda o: self._key(o.values))
        self._seeds = [dict(o.config) for o in good[:1]]
'''

GLOO_COMM = '''
"""torch.distributed over Gloo alone, even for CUDA tensors: the worked example."""

import os

from nestor.trainers.comm import Comm, TorchComm, register


@register
class GlooComm(TorchComm):
    backend = "gloo"
    about = "torch.distributed over Gloo only (the worked example)"

    @classmethod
    def connect(cls, current: Comm | None) -> Comm:
        mark = os.environ.get("GLOO_MARK")
        if mark and current is None:
            with open(mark, "a") as out:
                out.write(f"{os.environ.get('NESTOR_GANG_RANK')}\\n")
        return super().connect(current)

    def gpu_tensors(self) -> bool:
        return False
'''

FIT = "import sys\nx = float(sys.argv[1].split('=')[1])\nprint(f'FoM: {(x - 0.3) ** 2}')\n"

SPEC = textwrap.dedent("""\
    name: walked
    stages:
      - name: sweep
        kind: hpo
        trainer: {{command: {python} {fit}}}
        objective: {{metric: fom, mode: min}}
        search: {{algorithm: walk, budget: 4, step: {step}}}
        space: {{x: {{type: float, low: 0, high: 1}}}}
    """)


def plugin(tmp_path: Path, module: str, source: str, group: str, name: str,
           target: str | None = None) -> dict[str, str]:
    """``module`` written to ``tmp_path/plugins``, declared under the entry-point
    ``group`` (as ``name = target``, the module by default) as an installed distribution
    declares it; the environment that sees it."""
    root = tmp_path / "plugins"
    root.mkdir(exist_ok=True)
    (root / f"{module}.py").write_text(source)
    info = root / f"{module.replace('_', '-')}-0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {module}\nVersion: 0\n")
    (info / "entry_points.txt").write_text(f"[{group}]\n{name} = {target or module}\n")
    path = os.pathsep.join(p for p in (str(root), os.environ.get("PYTHONPATH")) if p)
    return dict(os.environ, PYTHONPATH=path)


def nestor(env: dict[str, str], *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([NESTOR, *args], capture_output=True, text=True, env=env,
                          check=False, timeout=timeout)


def test_a_search_algorithm_is_one_module(tmp_path: Path) -> None:
    env = plugin(tmp_path, "walk_search", TINY_SEARCH, "nestor.search", "walk")
    fit = tmp_path / "fit.py"
    fit.write_text(FIT)
    good, bad = tmp_path / "good.yaml", tmp_path / "bad.yaml"
    good.write_text(SPEC.format(python=sys.executable, fit=fit, step=0.5))
    bad.write_text(SPEC.format(python=sys.executable, fit=fit, step=2))

    checked = nestor(env, "validate", str(good))
    assert checked.returncode == 0, checked.stderr
    assert "walk" in checked.stdout and "4" in checked.stdout  # its label, its trials
    refused = nestor(env, "validate", str(bad))  # its own setting's bound, on its line
    assert refused.returncode == 2
    assert "bad.yaml:7" in refused.stderr and "search.step" in refused.stderr
    assert "must be greater than 0 and at most 1, but got 2" in " ".join(refused.stderr.split())

    help_text = " ".join(nestor(env, "sweep", "--help").stdout.split())
    assert "walk]" in help_text or "|walk" in help_text  # among --algorithm's choices
    assert "--step" in help_text and "share of each range a trial moves on" in help_text

    ran = subprocess.run(
        [sys.executable, "-c", textwrap.dedent("""
            import json
            from nestor.search import make_searcher
            from nestor.search.space import FloatParam, SearchSpace
            s = make_searcher("walk", SearchSpace([FloatParam("x", 0.0, 1.0)]),
                              [("loss", "min")], budget=4, step=0.5)
            while not s.done():
                for t in s.ask(2):
                    s.tell(t.id, (t.config["x"] - 0.3) ** 2)
            print(type(s).__name__, json.dumps([o.config["x"] for o in s.observations]))
        """)], capture_output=True, text=True, env=env, check=False, timeout=120)
    assert ran.returncode == 0, ran.stderr
    start = random.Random(0).random()  # seed 0's
    name, xs = ran.stdout.split(" ", 1)
    assert name == "WalkSearch"
    assert json.loads(xs) == pytest.approx([(start + 0.5 * i) % 1.0 for i in range(4)])

    # The searches' contract tests take it up too, by its name, with no edit of theirs.
    contract = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-k", "walk",
         str(TESTS / "search" / "test_search_contract.py"),
         str(TESTS / "search" / "test_extend_enqueue.py")],
        capture_output=True, text=True, env=env, check=False, timeout=300)
    assert contract.returncode == 0, contract.stdout[-3000:]
    assert re.search(r"\b1[0-9] passed", contract.stdout), contract.stdout[-500:]

    without = dict(env, PYTHONPATH=os.environ.get("PYTHONPATH", ""))  # not installed: refused
    unknown = nestor(without, "validate", str(good))
    assert unknown.returncode == 2 and "walk" in unknown.stderr


@pytest.mark.slow
def test_a_search_algorithm_in_one_module_runs_a_sweep(tmp_path: Path) -> None:
    env = plugin(tmp_path, "walk_search", TINY_SEARCH, "nestor.search", "walk")
    fit = tmp_path / "fit.py"
    fit.write_text(FIT.replace("sys.argv[1]", "sys.argv[-1]"))
    run = tmp_path / "run"
    result = nestor(env, "sweep", "--command", f"{sys.executable} {fit}", "--mode", "min",
                    "--param", "x=float:0:1", "--algorithm", "walk", "--step", "0.5",
                    "--budget", "4", "--slots", "2", "--run-dir", str(run), timeout=300)
    assert result.returncode == 0, result.stderr
    (stage,) = json.loads((run / "results.json").read_text())["stages"]
    assert stage["n_trials"] == 4 and stage["n_failed"] == 0
    start = random.Random(0).random()  # the sweep's seed, 0
    assert sorted(t["config"]["x"] for t in stage["trials"]) == pytest.approx(
        sorted((start + 0.5 * i) % 1.0 for i in range(4)))


BACKEND_SPEC = textwrap.dedent("""\
    name: gloo
    stages:
      - name: sweep
        kind: hpo
        trainer: {{name: mlp, settings: {{dataset: digits, epochs: 1}}}}
        parallel: {{data: 2}}
        backend: {backend}
        search: {{algorithm: random, budget: 1}}
        space: {{lr: {{type: float, low: 0.01, high: 0.1}}}}
    """)


def test_a_communication_backend_is_one_module(tmp_path: Path) -> None:
    env = plugin(tmp_path, "gloo_comm", GLOO_COMM, "nestor.comm", "gloo")
    good, bad = tmp_path / "good.yaml", tmp_path / "bad.yaml"
    good.write_text(BACKEND_SPEC.format(backend="gloo"))
    bad.write_text(BACKEND_SPEC.format(backend="mpi"))
    checked = nestor(env, "validate", str(good))
    assert checked.returncode == 0, checked.stderr
    refused = nestor(env, "validate", str(bad))
    assert refused.returncode == 2
    assert "must be one of horovod, torch, gloo, but got 'mpi'" in refused.stderr

    help_text = " ".join(nestor(env, "sweep", "--help").stdout.split())
    assert "gloo: torch.distributed over Gloo only (the worked example)" in help_text
    ranks_help = subprocess.run([sys.executable, "-m", "nestor.trainers", "--help"],
                                capture_output=True, text=True, env=env, check=False,
                                timeout=120).stdout
    assert "{horovod,torch,gloo}" in ranks_help
    argv = subprocess.run(
        [sys.executable, "-c", "from nestor.orchestrator.planning._profiler import"
         " launcher_argv; from nestor.orchestrator.backends.shape import Shape;"
         " Shape(2, 1, 'gloo'); print(' '.join(launcher_argv(2, ['-m', 'probe'], 'gloo')))"],
        capture_output=True, text=True, env=env, check=False, timeout=120)
    assert argv.returncode == 0, argv.stderr
    assert "-m torch.distributed.run --standalone --nproc_per_node 2 -m probe" in argv.stdout


@pytest.mark.slow
def test_a_communication_backend_in_one_module_trains_a_gang(tmp_path: Path) -> None:
    env = plugin(tmp_path, "gloo_comm", GLOO_COMM, "nestor.comm", "gloo")
    env["GLOO_MARK"] = str(tmp_path / "connected")
    run = tmp_path / "run"
    result = nestor(env, "sweep", "--trainer", "mlp", "--set", "dataset=digits",
                    "--set", "epochs=1", "--param", "lr=float:0.01:0.1", "--dp", "2",
                    "--backend", "gloo", "--algorithm", "random", "--budget", "1",
                    "--slots", "2", "--run-dir", str(run), timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    (stage,) = json.loads((run / "results.json").read_text())["stages"]
    assert stage["n_trials"] == 1 and stage["n_failed"] == 0
    assert sorted((tmp_path / "connected").read_text().split()) == ["0", "1"]  # both ranks


INLINE_BACKEND = '''
"""Each attempt run in the driver's own process, one at a time: the worked example."""

import time
from typing import Any

from nestor.orchestrator.backends.interface import Backend, Ended, Started, TaskDone
from nestor.trainers import run_trial


class InlineBackend(Backend):
    slots = 1
    slots_source = "the inline backend's one"

    def __init__(self) -> None:
        self._queued: list[Any] = []
        self._tasks: list[tuple[str, Any, tuple[Any, ...]]] = []
        self.ran: list[str] = []

    def now(self) -> float:
        return time.monotonic()

    def fits(self, shape: Any) -> bool:
        return shape.ranks == 1 and not self._queued

    def launch(self, launch: Any) -> None:
        self._queued.append(launch)

    def cancel(self, key: str) -> None:
        self._queued = [q for q in self._queued if q.key != key]

    def wait(self, timeout: float | None) -> list[Any]:
        events: list[Any] = []
        for key, fn, args in self._tasks:
            events.append(TaskDone(key, self.now(), value=fn(*args)))
        self._tasks = []
        if self._queued:
            launch = self._queued.pop(0)
            if launch.gate is not None:
                launch.gate()
            events.append(Started(launch.key, 0, self.now()))
            result = run_trial(launch.request, **launch.hooks)
            self.ran.append(launch.key)
            events.append(Ended(launch.key, self.now(), result=result))
        elif not events and timeout:
            time.sleep(min(timeout, 0.05))
        return events

    def run_task(self, key: str, fn: Any, *args: Any) -> None:
        self._tasks.append((key, fn, args))

    def wake(self) -> None:
        pass

    @property
    def busy_slots(self) -> int:
        return len(self._queued)

    def shutdown(self) -> None:
        self._queued = []
'''

QUADRATIC = "def train(config, ctx):\n    return {'loss': (config['x'] - 0.3) ** 2}\n"


def test_an_execution_backend_is_one_module(tmp_path: Path) -> None:
    (tmp_path / "inline_backend.py").write_text(INLINE_BACKEND)
    (tmp_path / "quadratic.py").write_text(QUADRATIC)
    script = textwrap.dedent(f"""
        import json, sys
        sys.path[:0] = [{str(tmp_path)!r}]
        from inline_backend import InlineBackend
        from nestor.orchestrator.engine.workflow import run_workflow
        from nestor.orchestrator.spec import load_spec_text

        spec = load_spec_text('''
        name: inline
        stages:
          - name: sweep
            kind: hpo
            trainer: {{function: quadratic:train}}
            objective: {{metric: loss, mode: min}}
            search: {{algorithm: random, budget: 3}}
            space: {{x: {{type: float, low: 0, high: 1}}}}
        ''')
        backend = InlineBackend()
        results = run_workflow(spec, backend, {str(tmp_path / "run")!r})
        (stage,) = results["stages"]
        print(json.dumps([len(backend.ran), stage["n_trials"], stage["n_failed"]]))
    """)
    ran = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         check=False, timeout=300, cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert json.loads(ran.stdout.splitlines()[-1]) == [3, 3, 0]
    assert (tmp_path / "run" / "journal.jsonl").is_file()


ALGORITHMS_COMMAND = '''
"""`nestor algorithms`: the worked example of a command."""

import click

from nestor.search import algorithm_names, continues_trials


@click.command()
def algorithms() -> None:
    """List the search algorithms a spec may name."""
    for name in algorithm_names():
        click.echo(f"{name}{' (continues trials)' if continues_trials(name) else ''}")
'''


def test_a_cli_command_is_one_module(tmp_path: Path) -> None:
    env = plugin(tmp_path, "algorithms_command", ALGORITHMS_COMMAND, "nestor.commands",
                 "algorithms", "algorithms_command:algorithms")
    listed = nestor(env, "--help")
    assert listed.returncode == 0, listed.stderr
    assert "algorithms  List the search algorithms a spec may name." in listed.stdout
    ran = nestor(env, "algorithms")
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.splitlines()[:2] == ["auto", "asha (continues trials)"]
    assert "random" in ran.stdout.split()
    assert nestor(env, "validate", "--help").returncode == 0  # built-ins unchanged
