"""nestor from Python (orchestrator/api.py), end to end on real Ray and MLflow: a
script whose trainer is defined in its own ``__main__`` runs a search with
``tune``; the same run is then extended from the command line (`nestor resume
--budget`), which ships the function from the run directory, never re-running a
finished trial; and errors reach the script as one exception type with the CLI's
message. Every trial appends a line to a log outside nestor: what really ran."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path

import pytest

from tests.orchestrator.workflow_helpers import NESTOR, events, nestor

pytestmark = pytest.mark.slow

SCRIPT = """
import json, os, sys
from nestor import NestorError, resume, run, tune

def objective(config, ctx):  # defined in __main__: no worker can import it by name
    with open(os.environ["RAN_LOG"], "a") as log:
        log.write(f"{config['x']!r}\\n")
    return {"score": -(config["x"] - 0.3) ** 2}

if __name__ == "__main__" and sys.argv[2:] == ["dict"]:  # a spec as a dict, then resumed
    spec = {"name": "fromdict", "resources": {"slots": 1}, "stages": [{
        "name": "tune", "kind": "hpo", "trainer": {"function": objective},
        "search": {"algorithm": "random", "budget": 2, "seed": 1},
        "space": {"x": {"type": "float", "low": 0.0, "high": 1.0}},
        "objective": {"metric": "score", "mode": "max"}}]}
    first = run(spec, run_dir=sys.argv[1], quiet=True)
    more = resume(first.run_dir, budget=3, quiet=True)
    print(json.dumps({"first": len(first.trials), "more": len(more.trials),
                      "best": more.best_value}))
elif __name__ == "__main__":
    try:
        tune(objective, space={"x": {"type": "float", "low": 1.0, "high": 0.0}},
             metric="score", mode="max", budget=2, run_dir=sys.argv[1] + "-bad", quiet=True)
    except NestorError as exc:
        bad = str(exc)
    result = tune(objective, space={"x": {"type": "float", "low": 0.0, "high": 1.0}},
                  metric="score", mode="max", budget=4, parallel=2, run_dir=sys.argv[1],
                  search={"algorithm": "random", "enqueue": [{"x": 0.3}]}, quiet=True)
    frame = result.dataframe()
    print(json.dumps({"best_config": result.best_config, "best_value": result.best_value,
                      "run_dir": str(result.run_dir), "rows": len(frame),
                      "columns": list(frame.columns), "bad": bad}))
"""


def ran(log: Path) -> Counter[str]:
    return Counter(log.read_text().split()) if log.exists() else Counter()


def test_a_main_function_tunes_on_ray_workers_and_the_cli_extends_the_run(
        tmp_path: Path) -> None:
    script = tmp_path / "study.py"
    script.write_text(SCRIPT)
    log = tmp_path / "ran.log"
    env = dict(os.environ, RAN_LOG=str(log))
    run_dir = tmp_path / "run"
    done = subprocess.run([sys.executable, str(script), str(run_dir)], capture_output=True,
                          text=True, env=env, timeout=900, check=False, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    # An error is one exception type with the CLI's message (the spec's field and rule).
    assert "low must be less than high" in out["bad"] and "Traceback" not in out["bad"]
    # The enqueued configuration ran first and is the best; four trials, a DataFrame row each.
    assert out["best_config"] == {"x": 0.3} and out["best_value"] == 0.0
    assert out["rows"] == 4 and {"trial", "status", "value", "x"} <= set(out["columns"])
    first = next(e for e in events(run_dir)  # asked first (two start at once, in any order)
                 if e["event"] == "trial_started" and e["trial"]["id"] == "0")
    assert first["trial"]["config"] == {"x": 0.3} and first["trial"]["origin"] == "enqueued"
    assert sum(ran(log).values()) == 4
    # The function is kept by value in the run directory, with the CLI's MLflow store.
    assert (run_dir / "functions" / "objective.pkl").is_file()
    assert (run_dir / "mlflow.db").is_file()

    # The command line extends the finished search: the same search goes on.
    more = nestor("resume", str(run_dir), "--budget", "6", env=env, timeout=900)
    assert more.returncode == 0, more.stderr
    finished = [e["trial"]["id"] for e in events(run_dir) if e["event"] == "trial_finished"]
    assert sorted(finished, key=int) == [str(i) for i in range(6)], finished
    assert sum(ran(log).values()) == 6, "a finished trial ran again"
    results = json.loads((run_dir / "results.json").read_text())
    (stage,) = results["stages"]
    assert stage["n_trials"] == 6 and stage["stop_reason"] == "all 6 planned trials were run"
    assert [e["budget"] for e in events(run_dir) if e["event"] == "stage_reopened"] == [6]

    # A budget the search already has is refused before anything runs.
    again = nestor("resume", str(run_dir), "--budget", "3", env=env, timeout=300)
    assert again.returncode == 2 and "--budget must be above" in again.stderr, again.stderr
    assert "Traceback" not in again.stderr

    # An edited spec on --resume: another space is refused, naming the change; a larger
    # budget is accepted, and said to be.
    saved = (run_dir / "spec.yaml").read_text()
    edited = tmp_path / "edited.yaml"
    edited.write_text(saved.replace("high: 1.0", "high: 2.0"))
    refused = nestor("run", str(edited), "--run-dir", str(run_dir), "--resume", env=env)
    assert refused.returncode == 2, refused.stderr
    assert "stages[0].space.x.high" in refused.stderr and "Traceback" not in refused.stderr
    assert "budget: 4" in saved
    edited.write_text(saved.replace("budget: 4", "budget: 7"))
    taken = nestor("run", str(edited), "--run-dir", str(run_dir), "--resume", env=env,
                   timeout=900)
    assert taken.returncode == 0, taken.stderr
    assert "search.budget only: accepted" in taken.stderr
    assert sum(ran(log).values()) == 7
    # A spec given as a dict, its trainer a __main__ function; resumed from Python.
    other = tmp_path / "other"
    done = subprocess.run([sys.executable, str(script), str(other), "dict"],
                          capture_output=True, text=True, env=env, timeout=900, check=False,
                          cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1])["more"] == 3
    assert sum(ran(log).values()) == 10
    # MLflow shows every trial, those of the extensions too, under the one stage run.
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{run_dir / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("tune")
    runs = client.search_runs([experiment.experiment_id], max_results=100)
    assert len([r for r in runs if r.data.tags.get("mlflow.parentRunId")]) == 7


def test_the_cli_refuses_a_main_function_it_was_not_given(tmp_path: Path) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(textwrap.dedent("""
        name: nomain
        resources: {slots: 1}
        stages:
          - name: tune
            kind: hpo
            trainer: {function: "__main__:objective"}
            search: {algorithm: random, budget: 2}
            space: {x: {type: float, low: 0, high: 1}}
            objective: {metric: score, mode: max}
        """))
    done = nestor("run", str(spec), "--run-dir", str(tmp_path / "run"), env=dict(os.environ),
                  timeout=600)
    assert done.returncode == 2, done.stderr
    assert "defined in a script's __main__" in done.stderr and "Traceback" not in done.stderr
    assert NESTOR
