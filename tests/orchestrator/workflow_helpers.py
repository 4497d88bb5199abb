"""What the engine's end-to-end tests share: the ``nestor`` command run as a user
runs it, a small command trainer (``FIT``) whose every call leaves a line outside
nestor, the journal's events read back, the MLflow runs, and faults staged at the
n-th call of a driver method (through ``nestor_with_fault``, tests/conftest.py).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

NESTOR = str(Path(sys.executable).parent / "nestor")

FIT = """
import os, sys, time
args = dict(a.lstrip("-").split("=", 1) for a in sys.argv[1:])
x, y = float(args["x"]), float(args["y"])
with open(os.environ["FIT_LOG"], "a") as log:
    log.write(f"{x!r} {y!r}\\n")
mode = os.environ.get("FIT_MODE", "")
marker = os.path.join(os.environ["FIT_DIR"], f"seen-{x!r}-{y!r}")
first = not os.path.exists(marker)
open(marker, "w").close()
if mode == "fail-first" and first:
    sys.exit("first attempt fails on purpose")
if mode == "nan" and x > 0:
    print("FoM: nan")
    sys.exit(0)
if mode == "hang" and x > 0:
    time.sleep(600)
time.sleep(float(os.environ.get("FIT_SLEEP", "0.1")))
print(f"FoM: {(x - 0.3) ** 2 + (y + 0.1) ** 2}")
"""


def spec_text(fit: Path, **search: object) -> str:
    settings: dict[str, object] = {"algorithm": "genetic", "seed": 3}
    if search.get("algorithm", "genetic") == "genetic":
        settings.update(population=4, generations=3)
    settings.update(search)
    timeout = settings.pop("timeout", None)
    retries = settings.pop("retries", 1)
    trial = f"{{timeout: {timeout}, retries: {retries}}}" if timeout else f"{{retries: {retries}}}"
    return textwrap.dedent(
        f"""
        name: cmdsweep
        resources: {{slots: 2}}
        stages:
          - name: tune
            kind: hpo
            trainer: {{command: ["{sys.executable}", "{fit}"]}}
            search: {json.dumps(settings)}
            space:
              x: {{type: float, low: -1, high: 1}}
              y: {{type: float, low: -1, high: 1}}
            objective: {{metric: result, mode: min}}
            trial: {trial}
        """
    )


def nestor(*args: str, env: dict[str, str], timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([NESTOR, *args], capture_output=True, text=True, env=env,
                          timeout=timeout, check=False)


def events(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "journal.jsonl").read_text().splitlines()]


def finished(run_dir: Path) -> dict[str, dict]:
    return {e["trial"]["id"]: e for e in events(run_dir) if e["event"] == "trial_finished"}


def mlflow_runs(run_dir: Path) -> list:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{run_dir / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("cmdsweep")
    if experiment is None:  # a driver killed before its projector made the experiment
        return []
    return client.search_runs([experiment.experiment_id], max_results=1000)


def fault_on_call(target: str, number: int, action: str) -> str:
    """Source for nestor_with_fault: the ``number``-th call of ``module:Owner.name``
    runs ``action`` (one statement) first."""
    module, attribute = target.split(":")
    owner, name = attribute.rsplit(".", 1)
    return textwrap.dedent(f"""\
        import importlib, os, signal
        owner = importlib.import_module({module!r}).{owner}
        real, calls = owner.{name}, []
        def faulty(*args, **kwargs):
            calls.append(1)
            if len(calls) == {number}:
                {action}
            return real(*args, **kwargs)
        owner.{name} = faulty
        """)


# The trial's program has ended and its rank 0 has written the result; the driver
# has heard of it but not journalled it yet.
DIES_BEFORE_JOURNALLING_A_RESULT = fault_on_call("nestor.orchestrator.engine.trials:TrialRunner._finish_attempt",  # noqa: E501
                                                 3, "os.killpg(0, signal.SIGKILL)")
