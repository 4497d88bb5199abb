"""The driver's MLflow projector runs in a process of its own
(``projections.projector_process``): the driver never imports MLflow, MLflow still
shows every journalled event of a user's function trainer and command trainer, a
driver killed outright leaves no projector behind (and ``nestor resume`` shows
everything, once), and where no child can be started the projector runs in a thread.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from nestor.orchestrator.journal.journal import read_events
from nestor.orchestrator.projections import projector_process
from nestor.orchestrator.projections.projector import CURSOR_FILE, Projector
from nestor.orchestrator.spec import load_spec
from tests.orchestrator.projections.journal_in_mlflow import (
    assert_mlflow_shows_every_event,
    journal_events,
)

NESTOR = str(Path(sys.executable).parent / "nestor")

USER_CODE = '''
import time


def train(config, ctx):
    for epoch in range(3):
        ctx.report({"loss": (config["x"] - 0.3) ** 2 + 1.0 / (epoch + 1)}, step=epoch + 1)
        time.sleep(config.get("pause", 0.0))
    return {"loss": (config["x"] - 0.3) ** 2}
'''

FIT = '''
import sys

x = float(sys.argv[1].split("=", 1)[1])
for epoch in range(3):
    print(f"nestor.metric loss={(x - 0.3) ** 2 + 1.0 / (epoch + 1)} step={epoch + 1}")
print(f"FoM: {(x - 0.3) ** 2}")
'''

SPEC = """
name: own-code
resources: {{slots: 2}}
stages:
  - name: function
    kind: hpo
    trainer: {{function: "user_train:train", settings: {{pause: {pause}}}}}
    search: {{algorithm: random, budget: {budget}, seed: 0}}
    space: {{x: {{type: float, low: 0, high: 1}}}}
    objective: {{metric: loss, mode: min}}
  - name: command
    kind: hpo
    trainer: {{command: ["{python}", "{fit}"]}}
    search: {{algorithm: random, budget: 6, seed: 1}}
    space: {{x: {{type: float, low: 0, high: 1}}}}
    objective: {{metric: FoM, mode: min}}
"""

DRIVER = textwrap.dedent("""\
    import json, sys
    from pathlib import Path

    from nestor.orchestrator.commands.run import run_spec

    run_spec(Path(sys.argv[1]), run_dir=Path(sys.argv[2]))
    print("IMPORTED " + json.dumps(sorted(m for m in sys.modules
                                          if m.split(".")[0] in ("mlflow", "sqlalchemy"))))
    """)


def user_run(tmp_path: Path, *, budget: int = 6, pause: float = 0.0) -> tuple[Path, dict]:
    (tmp_path / "user_train.py").write_text(USER_CODE)
    (tmp_path / "fit.py").write_text(FIT)
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC.format(budget=budget, pause=pause, python=sys.executable,
                                fit=tmp_path / "fit.py"))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(tmp_path), *filter(None, [os.environ.get("PYTHONPATH")])])}
    return spec, env


def mlflow_shows_every_event(run_dir: Path) -> int:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{run_dir / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("own-code")
    assert experiment is not None
    return assert_mlflow_shows_every_event(client, experiment.experiment_id,
                                           journal_events(run_dir))


def projectors(parent: int | None = None) -> set[int]:
    """Processes running a projector child (from outside: /proc), only those whose
    parent is ``parent`` when it is given: 1 for those orphaned (their driver gone;
    other runs on this machine, a test suite beside this one, hold theirs)."""
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            line = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError):
            continue
        if "projector_process" in line and (parent is None or ppid == parent):
            found.add(int(entry.name))
    return found


def test_the_driver_never_imports_mlflow_and_mlflow_shows_every_event(tmp_path: Path) -> None:
    spec, env = user_run(tmp_path)
    run_dir = tmp_path / "run"
    # A working directory holding files named like the projector's libraries: nothing
    # there is imported in their place.
    here = tmp_path / "here"
    here.mkdir()
    for name in ("mlflow", "sqlalchemy", "matplotlib"):
        (here / f"{name}.py").write_text("raise SystemExit('imported from the cwd')\n")
    before = projectors(parent=1)
    done = subprocess.run([sys.executable, "-c", DRIVER, str(spec), str(run_dir)], env=env,
                          capture_output=True, text=True, timeout=600, check=False, cwd=here)
    assert done.returncode == 0, done.stderr[-3000:]
    imported = json.loads(done.stdout.split("IMPORTED ", 1)[1].splitlines()[0])
    assert imported == [], f"the driver imported {imported[:5]}"
    events = journal_events(run_dir)
    assert (run_dir / CURSOR_FILE).read_text() == str(len(events))
    # Both stages' runs and their 12 trials', each with every step the user's code logged.
    assert mlflow_shows_every_event(run_dir) == 14
    assert not projectors(parent=1) - before  # none orphaned: it ended with its driver


@pytest.mark.slow
def test_a_killed_driver_leaves_no_projector_and_resume_shows_every_event(
        tmp_path: Path) -> None:
    spec, env = user_run(tmp_path, budget=40, pause=0.1)
    run_dir = tmp_path / "run"
    before = projectors(parent=1)
    driver = subprocess.Popen([NESTOR, "run", str(spec), "--run-dir", str(run_dir)], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and driver.poll() is None:
            journal = run_dir / "journal.jsonl"
            if journal.exists() and sum(e["event"] == "trial_finished"
                                        for e in read_events(journal)) >= 4:
                break
            time.sleep(0.2)
        assert driver.poll() is None, driver.communicate()[1][-3000:]
        children = projectors(parent=driver.pid)
        assert children, "no projector process while the run went on"
        driver.send_signal(signal.SIGKILL)
        driver.wait(timeout=30)
    finally:
        if driver.poll() is None:
            driver.kill()
    gone_by = time.monotonic() + 15
    while children & projectors() and time.monotonic() < gone_by:
        time.sleep(0.2)
    assert not children & projectors(), "the projector outlived its killed driver"

    resumed = subprocess.run([NESTOR, "resume", str(run_dir)], env=env, capture_output=True,
                             text=True, timeout=600, check=False)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert mlflow_shows_every_event(run_dir) == 2 + 40 + 6  # each run once
    assert not projectors(parent=1) - before


def test_without_a_child_process_the_projector_runs_in_a_thread(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    spec, _ = user_run(tmp_path)

    def no_fork(*args: object, **kwargs: object) -> None:
        raise BlockingIOError(11, "Resource temporarily unavailable")

    monkeypatch.setattr(projector_process.subprocess, "Popen", no_fork)
    projector_process.discard_prestarted()  # none left by an earlier run in this process
    projector = projector_process.start_projector(tmp_path / "run",
                                                  load_spec(spec, imports=False))
    try:
        assert isinstance(projector, Projector)
        assert "written from the driver's own process" in caplog.text
    finally:
        projector.close(timeout_s=5)


def test_nestor_run_gives_its_run_to_the_child_it_started_before_reading_the_spec(
        tmp_path: Path) -> None:
    # `nestor run` starts the projector's process first thing (it loads MLflow while
    # the driver imports and reads the spec): that very process serves the run.
    spec, env = user_run(tmp_path, budget=2)
    script = textwrap.dedent("""\
        import sys
        from pathlib import Path
        from nestor.orchestrator.commands import cli
        from nestor.orchestrator.projections import projector_process

        real = projector_process.ProjectorProcess.__init__
        def spy(self, *args, **kwargs):
            ahead = projector_process._prestarted
            real(self, *args, **kwargs)
            print("PRESTARTED", ahead is not None and self._child is ahead, flush=True)
        projector_process.ProjectorProcess.__init__ = spy
        sys.argv = ["nestor", "run", sys.argv[1], "--run-dir", sys.argv[2], "-q"]
        cli.main()
        """)
    done = subprocess.run([sys.executable, "-c", script, str(spec), str(tmp_path / "run")],
                          env=env, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "PRESTARTED True" in done.stdout, done.stdout[-2000:]
    assert mlflow_shows_every_event(tmp_path / "run") == 2 + 2 + 6


def test_a_refused_spec_leaves_no_projector_behind(tmp_path: Path) -> None:
    # The child started ahead is never given a run: it ends with the driver, at once
    # (not after its imports).
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\nstages:\n  - name: s\n    kind: hpo\n    budget: lots\n")
    before = projectors(parent=1)
    started = time.monotonic()
    done = subprocess.run([NESTOR, "run", str(bad), "--run-dir", str(tmp_path / "run")],
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 2, done.stderr[-2000:]
    while projectors(parent=1) - before and time.monotonic() - started < 30:
        time.sleep(0.05)
    assert not projectors(parent=1) - before, (
        "a projector outlived the driver that refused its spec")


def test_a_child_given_no_run_ends_as_its_input_closes_not_after_its_imports() -> None:
    # Its imports (MLflow, SQLAlchemy, matplotlib) take seconds of CPU; a driver gone
    # before it sent the run does not leave the child running them.
    child = projector_process._spawn()
    time.sleep(0.3)  # well into its imports
    assert child.poll() is None and child.stdin is not None
    closed = time.monotonic()
    child.stdin.close()
    assert child.wait(timeout=30) == 0
    assert time.monotonic() - closed < 1.0


def test_a_run_that_never_took_its_prestarted_child_ends_it(tmp_path: Path) -> None:
    # In a process that goes on after a refused spec (the Python API), the child started
    # ahead does not wait there for a later run.
    from nestor.orchestrator.commands.console import console
    from nestor.orchestrator.commands.execute import RunFailed, execute

    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\nstages:\n  - name: s\n    kind: hpo\n    budget: lots\n")
    before = projectors(parent=os.getpid())
    with pytest.raises(RunFailed):
        execute(bad, run_dir=tmp_path / "run", resume=False, slots=None, address=None,
                err=console(stderr=True))
    assert projector_process._prestarted is None
    assert not projectors(parent=os.getpid()) - before
