"""A chatty trial cannot exhaust the driver: metric history, journal line and MLflow
points are bounded (trainers.history.MAX_HISTORY rows, thinned evenly).

One command trial printing a million ``FoM:`` lines took the driver to 2.26 GB,
wrote one 32 MB journal line and a 446 MB ``mlflow.db``. Here a real run has a
command trial print a million result lines and a function trial report 200,000
times, while the driver's resident memory is sampled.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from nestor.trainers.history import MAX_HISTORY, BoundedHistory

pytestmark = pytest.mark.slow

NESTOR = str(Path(sys.executable).parent / "nestor")
LINES = 1_000_000
REPORTS = 200_000
DRIVER_CEILING = 1536 * 2**20  # the old code's driver passed 2 GiB on this trial
CHATTY = f"""
import sys
out = sys.stdout
for i in range({LINES}):
    out.write(f"FoM: {{i / {LINES}}}\\n")
out.flush()
"""
REPORTING = f"""
def train(config, ctx):
    for step in range({REPORTS}):
        ctx.report({{"result": step / {REPORTS}, "other": 1.0}}, step)
    return {{"result": 0.5}}
"""
SPEC = """
name: chatty
resources: {{slots: 1}}
stages:
  - name: printing
    kind: hpo
    trainer: {{command: ["{python}", "{chatty}"]}}
    search: {{algorithm: random, budget: 1, seed: 1}}
    space: {{x: {{type: float, low: 0, high: 1}}}}
    objective: {{metric: result, mode: min}}
  - name: reporting
    kind: hpo
    trainer: {{function: "reporting_trainer:train"}}
    search: {{algorithm: random, budget: 1, seed: 1}}
    space: {{x: {{type: float, low: 0, high: 1}}}}
    objective: {{metric: result, mode: min}}
"""


def test_the_history_keeps_an_even_sample_and_the_latest_row() -> None:
    history = BoundedHistory(limit=100)
    kept = [history.append({"step": n}) for n in range(1, 100_001)]
    assert len(history) <= 101 and history.seen == 100_000
    assert history[-1] == {"step": 100_000} and history[0] == {"step": 1}
    steps = [row["step"] for row in history[:-1]]
    gaps = {b - a for a, b in itertools.pairwise(steps)}
    assert gaps == {history.stride}  # evenly spaced
    assert sum(kept) < 1000  # what a pruner is told: about limit/2 per doubling of the stride


def rss(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except (FileNotFoundError, ProcessLookupError):
        pass
    return 0


def test_a_million_result_lines_stay_within_the_bounds(tmp_path: Path) -> None:
    chatty = tmp_path / "chatty.py"
    chatty.write_text(CHATTY)
    (tmp_path / "reporting_trainer.py").write_text(textwrap.dedent(REPORTING))
    spec = tmp_path / "spec.yaml"
    spec.write_text(textwrap.dedent(SPEC.format(python=sys.executable, chatty=chatty)))
    run_dir = tmp_path / "run"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(tmp_path), *filter(None, [os.environ.get("PYTHONPATH")])]))
    driver = subprocess.Popen([NESTOR, "run", str(spec), "--run-dir", str(run_dir)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    peak = [0]

    def sample() -> None:
        while driver.poll() is None:
            peak[0] = max(peak[0], rss(driver.pid))
            time.sleep(0.05)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        out, err = driver.communicate(timeout=900)
    finally:
        if driver.poll() is None:
            driver.kill()
    sampler.join()
    assert driver.returncode == 0, out + err
    print(f"\ndriver peak RSS {peak[0] / 2**20:.0f} MiB; journal"
          f" {(run_dir / 'journal.jsonl').stat().st_size / 2**10:.0f} KiB; mlflow.db"
          f" {(run_dir / 'mlflow.db').stat().st_size / 2**20:.1f} MiB")
    assert 0 < peak[0] < DRIVER_CEILING

    lines = (run_dir / "journal.jsonl").read_bytes().splitlines()
    assert max(len(line) for line in lines) < 256 * 1024
    finished = {e["stage"]: e for e in map(json.loads, lines) if e["event"] == "trial_finished"}
    printing, reporting = finished["printing"], finished["reporting"]
    assert printing["status"] == "completed" and printing["value"] == (LINES - 1) / LINES
    for event, seen in ((printing, LINES), (reporting, REPORTS)):
        history = event["history"]
        assert MAX_HISTORY // 2 <= len(history) <= MAX_HISTORY + 1
        assert history[-1]["result"] == (seen - 1) / seen  # the latest row, always

    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{run_dir / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("chatty")
    trial = client.search_runs([experiment.experiment_id],
                               "tags.`nestor.stage` = 'printing' and tags.`nestor.trial` = '0'")[0]
    points = client.get_metric_history(trial.info.run_id, "result")
    assert MAX_HISTORY // 2 <= len(points) <= MAX_HISTORY + 2
    assert (run_dir / "mlflow.db").stat().st_size < 32 * 2**20
