"""What a user's trainer logs for its MLflow run besides its results (trainers.logged):
metrics at steps, tags and files, as a function (``ctx.log_metrics``, ``ctx.set_tags``,
``ctx.log_artifact``) and as a command (``nestor.metric``/``nestor.tag`` lines, the
``NESTOR_ARTIFACT_DIR`` folder), carried by the trial's result; bounded however
much the trainer logs. Real subprocesses, one process (no gang)."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import pytest

from nestor.trainers import TrainerRef, TrialRequest, TrialResult, run_trial
from nestor.trainers.logged import MAX_ARTIFACTS, MAX_METRICS, MAX_POINTS, MAX_TAG_VALUE, MAX_TAGS

COMMAND = """
import os, sys
args = dict(a.lstrip("-").split("=", 1) for a in sys.argv[1:])
x = float(args["x"])
for epoch in range(3):
    print(f"nestor.metric train_loss={x / (epoch + 1)} lr={x * 2} step={epoch * 10}")
    print(f"FoM: {x + epoch}")
print("[1,0]<stdout>:nestor.metric prefixed=3 step=5")  # as horovodrun passes it on
print("echo nestor.metric not_a_log_line=1")
print("nestor.metric seen=1")
print("nestor.metric seen=2")
print("nestor.tag model=mlp with = dropout")
print("nestor.tag nestor.key=hijack")
print("nestor.metric loss=abc")
folder = os.environ["NESTOR_ARTIFACT_DIR"]
os.makedirs(os.path.join(folder, "plots"), exist_ok=True)
with open(os.path.join(folder, "plots", "curve.txt"), "w") as out:
    out.write(f"x={x!r}\\n")
"""

FUNCTIONS = """
import os, tempfile


def train(config, ctx):
    for epoch in range(3):
        ctx.log_metrics({"train_loss": config["x"] / (epoch + 1)}, step=epoch * 10)
        ctx.report({"val_loss": config["x"] + epoch}, step=epoch + 1)
    ctx.log_metrics({"seen": 1})
    ctx.log_metrics({"seen": 2})
    ctx.set_tags({"model": "mlp"})
    scratch = tempfile.mkdtemp()
    report = os.path.join(scratch, "report.txt")
    with open(report, "w") as out:
        out.write(f"x={config['x']!r}\\n")
    copy = ctx.log_artifact(report, name="reports/report.txt")
    assert copy == os.path.join(ctx.artifact_dir, "reports", "report.txt")
    return {"val_loss": config["x"]}


def crashes(config, ctx):
    ctx.log_metrics({"train_loss": 1.5}, step=7)
    ctx.set_tags({"stage_of_death": "epoch 1"})
    raise RuntimeError("diverged")


def bad_name(config, ctx):
    ctx.log_metrics({"loss!": 1.0})
    return {"val_loss": 1.0}


def reserved_tag(config, ctx):
    ctx.set_tags({"mlflow.parentRunId": "somebody else's"})
    return {"val_loss": 1.0}
"""


@pytest.fixture
def user_functions(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    (tmp_path / "nestor_logging_fns.py").write_text(FUNCTIONS)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "nestor_logging_fns"
    sys.modules.pop("nestor_logging_fns", None)


def request(tmp_path: Path, trainer: TrainerRef, x: float = 0.5) -> TrialRequest:
    return TrialRequest(trial_id="t1", trainer=trainer, config={"x": x},
                        log_dir=str(tmp_path / "logs"),
                        artifact_dir=str(tmp_path / "artifacts" / "tune" / "1"),
                        result_path=str(tmp_path / "attempts" / "1.json"))


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def points(result: TrialResult, name: str) -> list[tuple[int, float]]:
    return [(step, value) for step, value, _ in result.logged["metrics"][name]]


def test_a_command_logs_metrics_at_steps_tags_and_its_folders_files(tmp_path: Path) -> None:
    script = tmp_path / "fit.py"
    script.write_text(COMMAND)
    result = run_trial(request(tmp_path, TrainerRef.command([sys.executable, str(script)]),
                               x=0.5))
    assert result.ok, result.reason
    assert result.metrics["result"] == 2.5  # the FoM lines are read as before
    assert points(result, "train_loss") == [(0, 0.5), (10, 0.25), (20, 0.5 / 3)]
    assert points(result, "lr") == [(0, 1.0), (10, 1.0), (20, 1.0)]
    assert points(result, "seen") == [(0, 1.0), (1, 2.0)]  # no step: each metric's next
    assert points(result, "prefixed") == [(5, 3.0)]
    assert "not_a_log_line" not in result.logged["metrics"]
    # a value may hold '=' and spaces; nestor's and MLflow's own tags are not the trial's
    assert result.logged["tags"] == {"model": "mlp with = dropout"}
    folder = tmp_path / "artifacts" / "tune" / "1"
    (artifact,) = result.logged["artifacts"]
    assert artifact == {"name": "plots/curve.txt", "sha256": sha256(folder / "plots/curve.txt"),
                        "bytes": len("x=0.5\n")}
    problems = result.logged["problems"]
    assert problems[0] == "2 ignored" and "nestor.key" in problems[1] and "'abc'" in problems[2]
    # the result file a resumed driver adopts carries it too
    written = json.loads((tmp_path / "attempts" / "1.json").read_text())
    assert TrialResult.from_dict(written).logged == result.logged


def test_a_function_logs_through_ctx_and_its_artifact_lives_in_the_run(
        tmp_path: Path, user_functions: str) -> None:
    result = run_trial(request(tmp_path, TrainerRef.python(f"{user_functions}:train"), x=0.8))
    assert result.ok, result.reason
    assert points(result, "train_loss") == [(0, 0.8), (10, 0.4), (20, 0.8 / 3)]
    assert points(result, "seen") == [(0, 1.0), (1, 2.0)]
    assert result.logged["tags"] == {"model": "mlp"}
    copy = tmp_path / "artifacts" / "tune" / "1" / "reports" / "report.txt"
    assert copy.read_text() == "x=0.8\n"  # copied into the trial's folder, in the run
    assert result.logged["artifacts"] == [
        {"name": "reports/report.txt", "sha256": sha256(copy), "bytes": copy.stat().st_size}]
    assert "problems" not in result.logged
    assert [row["val_loss"] for row in result.history] == [0.8, 1.8, 2.8]  # report as before


def test_a_function_that_fails_keeps_what_it_logged(tmp_path: Path, user_functions: str) -> None:
    result = run_trial(request(tmp_path, TrainerRef.python(f"{user_functions}:crashes")))
    assert result.status == "failed" and "diverged" in result.reason
    assert points(result, "train_loss") == [(7, 1.5)]
    assert result.logged["tags"] == {"stage_of_death": "epoch 1"}
    # nothing in it: its empty folder is the driver's to remove when the stage ends
    # (tests/orchestrator/engine/test_empty_trial_folders.py), not one rmdir per trial
    assert not any((tmp_path / "artifacts" / "tune" / "1").iterdir())


@pytest.mark.parametrize(("function", "says"), [
    ("bad_name", "metric name 'loss!' is not allowed"),
    ("reserved_tag", "tag 'mlflow.parentRunId' is not allowed"),
])
def test_a_function_that_logs_what_mlflow_cannot_take_fails_saying_so(
        tmp_path: Path, user_functions: str, function: str, says: str) -> None:
    result = run_trial(request(tmp_path, TrainerRef.python(f"{user_functions}:{function}")))
    assert result.status == "failed" and result.reason.startswith(says), result.reason


FLOOD = f"""
import os, sys
out = sys.stdout
for i in range(200_000):
    out.write(f"nestor.metric loss={{i}} acc={{i / 2}} step={{i}}\\n")
for i in range({MAX_METRICS} * 4):
    out.write(f"nestor.metric m{{i}}=1\\n")
for i in range({MAX_TAGS} * 4):
    out.write(f"nestor.tag t{{i}}={{'v' * 20000}}\\n")
folder = os.environ["NESTOR_ARTIFACT_DIR"]
for i in range(1000):
    with open(os.path.join(folder, f"f{{i:04d}}.txt"), "w") as f:
        f.write(str(i))
out.write("FoM: 1\\n")
"""


def test_a_trial_that_logs_a_flood_is_bounded(tmp_path: Path) -> None:
    script = tmp_path / "flood.py"
    script.write_text(FLOOD)
    result = run_trial(request(tmp_path, TrainerRef.command([sys.executable, str(script)])))
    assert result.ok, result.reason
    logged = result.logged
    assert len(logged["metrics"]) == MAX_METRICS
    for name in ("loss", "acc"):
        rows = logged["metrics"][name]
        assert len(rows) <= MAX_POINTS + 1
        assert rows[0][0] == 0 and rows[-1][0] == 199_999  # thinned evenly, the latest kept
    assert len(logged["tags"]) == MAX_TAGS
    assert all(len(value) == MAX_TAG_VALUE for value in logged["tags"].values())
    assert len(logged["artifacts"]) == MAX_ARTIFACTS
    assert "left out" in " ".join(logged["problems"])
    assert len(json.dumps(logged)) < 2**20  # the journal's line stays small
