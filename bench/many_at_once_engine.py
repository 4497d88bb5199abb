"""``auto`` many at once through the real scheduler: the many-at-once bench's held-out
problems run by ``run_workflow`` on the simulated backend, beside the bench's own loop.

``bench/many_at_once_bench.py`` ranks searchers in a loop of its own (a heap of running
trials on a virtual clock), which every published searcher can run in. This runs
nestor's side of it the way a user's sweep runs: a spec with an hpo stage (the
problem's space, ``algorithm: auto`` with a ``budget`` of ``ROUNDS x width`` trials and
no ``parallel``, ``fidelity: epochs`` on a multi-fidelity problem), the StageScheduler
and TrialRunner, the journal, on a ``SimulatedBackend`` of ``width`` one-slot nodes
with no gang start-up: auto plans for the ``width`` trials those slots run at once,
as a user's spec does. A trial's virtual time is the bench's ``duration`` of its
configuration (in hours) and it reports the problem's loss after a full training, so
a slot the engine or the searcher leaves empty costs time as in the bench.

For each problem, seed and width: auto's pick, the best loss found, the best the
bench's loop finds with the same search and seed, the share of slot time idle before
the last launch (slots left empty while trials were owed), and the virtual time.

    python bench/many_at_once_engine.py --widths 16 64 256 1024 --seeds 3 --jobs 2
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
import textwrap
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import machine
from bench import many_at_once_bench as wide
from bench.simulate import attempt_rows, usage
from nestor.search.space import CategoricalParam, FloatParam, IntParam, SearchSpace

HOUR = 3600.0


def space_yaml(space: SearchSpace) -> str:
    """The problem's space as a spec's ``space:`` block."""
    lines = []
    for p in space.searched:
        if isinstance(p, CategoricalParam):
            values = ", ".join(repr(v) if isinstance(v, str) else str(v) for v in p.values)
            lines.append(f"{p.name}: {{type: categorical, values: [{values}]}}")
        else:
            kind = "int" if isinstance(p, IntParam) else "float"
            assert isinstance(p, IntParam | FloatParam)
            log = ", log: true" if p.log else ""
            lines.append(f"{p.name}: {{type: {kind}, low: {p.low!r}, high: {p.high!r}{log}}}")
    return "\n".join(lines)


def spec_text(problem: wide.Problem, seed: int, width: int) -> str:
    """An hpo stage of ``ROUNDS x width`` trials of ``problem`` under ``auto``."""
    fidelity = ", fidelity: epochs" if problem.fidelity is not None else ""
    # over a fidelity auto may pick ASHA, which continues the (simulated) checkpoints
    settings = (f", settings: {{epochs: {problem.fidelity}}}, checkpoints: true"
                if problem.fidelity is not None else "")  # fmt: skip
    return textwrap.dedent(f"""\
        name: many-{problem.name}-{width}-{seed}
        stages:
          - name: tune
            kind: hpo
            trainer: {{function: "nestor.orchestrator.simulate:simulated_trial"{settings}}}
            parallel: {{data: 1, model: 1}}
            search: {{algorithm: auto, budget: {wide.ROUNDS * width}, seed: {seed}{fidelity}}}
            objective: {{metric: loss, mode: min}}
            space:
        """) + textwrap.indent(space_yaml(problem.space), " " * 6) + "\n"


def run_engine(problem: wide.Problem, seed: int, width: int, workdir: Path) -> dict[str, Any]:
    """One sweep of ``auto`` on the real scheduler and the simulated backend."""
    from nestor.orchestrator.backends import Draw, SimulatedBackend
    from nestor.orchestrator.engine.workflow import run_workflow
    from nestor.orchestrator.spec import load_spec_text

    full = float(problem.fidelity or 1)

    def trial(config: Any, rng: Any) -> Draw:
        searched = {p.name: config[p.name] for p in problem.space.searched}
        return Draw(wide.duration(searched, problem) * HOUR,
                    {"loss": problem.loss(searched, full)})

    workflow = load_spec_text(spec_text(problem, seed, width))
    backend = SimulatedBackend(width, 1, trial, seed=seed, startup_s=0.0)
    began = time.perf_counter()
    results = run_workflow(workflow, backend, workdir / "run", fsync=False)
    driver_s = time.perf_counter() - began
    stage = results["stages"][0]
    rows = attempt_rows(backend)
    end, last_launch = backend.now(), max(launched for launched, *_ in rows)
    used = usage(rows, [], width, end, last_launch)
    values = [t["value"] for t in stage["trials"] if isinstance(t.get("value"), float)]
    auto = stage["auto"]  # what the stage's searcher was built as, for how many at once
    assert auto["width"] == width, auto
    return {"best": min(values), "trials": len(values), "label": auto["pick"],
            "idle_before_last_launch": used["idle_before_last_launch"]
            / (width * last_launch) if last_launch else 0.0,
            "virtual_time": end / HOUR, "driver_s": driver_s}


def _job(job: tuple[int, int, int]) -> dict[str, Any]:
    k, seed, width = job
    problem = wide.HELDOUT_PROBLEMS[k]
    with tempfile.TemporaryDirectory(prefix="many-engine-") as tmp:
        engine = run_engine(problem, seed, width, Path(tmp))
    loop = wide.run("auto", problem, seed, width)
    return {"problem": problem.name, "seed": seed, "width": width, "engine": engine,
            "loop": {"best": loop["best"], "idle": loop["idle"], "time": loop["time"],
                     "label": loop["label"]}}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--widths", type=int, nargs="*", default=[16, 64, 256, 1024])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--tag", default="")
    args = parser.parse_args(argv)
    start = machine.describe()
    jobs = [(k, seed, width) for width in args.widths
            for k in range(len(wide.HELDOUT_PROBLEMS)) for seed in range(args.seeds)]
    with ProcessPoolExecutor(args.jobs) as pool:
        runs = []
        for done in pool.map(_job, sorted(jobs, key=lambda j: -j[2])):
            runs.append(done)
            e, loop = done["engine"], done["loop"]
            same = math.isclose(e["best"], loop["best"], rel_tol=1e-9)
            print(f"{done['width']:>5} {done['problem']:<20} seed {done['seed']}:"
                  f" engine {e['best']:.4g} ({e['label']}; idle"
                  f" {e['idle_before_last_launch']:.1%}, {e['driver_s']:.1f} s),"
                  f" loop {loop['best']:.4g}{' (same)' if same else ''}", flush=True)
    runs.sort(key=lambda r: (r["width"], r["problem"], r["seed"]))
    name = "many_at_once_engine" + (f"_{args.tag}" if args.tag else "")
    result = {"machine": machine.finish(start), "rounds": wide.ROUNDS, "seeds": args.seeds,
              "widths": args.widths, "runs": runs}
    print(f"written: {machine.write_result(name, result)}")


if __name__ == "__main__":
    main()
