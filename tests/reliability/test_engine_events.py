"""The event loop as a cluster sees it: a rank that fails alone ends its trial at
once, and a driver waiting on a trial uses no CPU.

Real Ray, real Horovod ranks over Gloo, 2 ranks per trial, no trial timeout
(the default). Checked from outside: the ranks' own pid files, the driver's
CPU time read from /proc, the processes left.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import textwrap
import time
from pathlib import Path

import psutil
import pytest
from nestor_harness import NESTOR, events, finished, kill_tagged, tagged_env, wait_for_no_tagged

pytestmark = pytest.mark.slow

README_GRACE_S = 2.0  # "Its peers ... get 2 s to fail the same way"

TRAINER = """
import os, time

import torch


def note(config, ctx, what):
    path = os.path.join(os.environ["FIT_DIR"], f"{config['mode']}-rank{ctx.rank}.{what}")
    with open(path, "w") as out:
        out.write(str(os.getpid()))


def stamp(config, ctx, what):
    path = os.path.join(os.environ["FIT_DIR"], f"{config['mode']}-rank{ctx.rank}.{what}")
    with open(path, "w") as out:
        out.write(repr(time.time()))


def train(config, ctx):
    mode = config["mode"]
    note(config, ctx, "pid")
    if mode == "fails-alone" and ctx.rank == 1:
        stamp(config, ctx, "raised")
        raise RuntimeError("rank 1 fails on purpose")
    if mode == "stops":  # the test SIGSTOPs rank 1 in the first attempt's pause
        first = not os.path.exists(os.path.join(os.environ["FIT_DIR"], "stops-ran"))
        ctx.hvd.allreduce(torch.tensor([0.0]), op=ctx.hvd.Sum)  # both have seen `first`
        if ctx.rank == 0:
            open(os.path.join(os.environ["FIT_DIR"], "stops-ran"), "w").close()
        for step in range(4):
            ctx.report({"val_accuracy": 0.1 * step}, step)
            if first and step == 1:
                stamp(config, ctx, "paused-at")
                note(config, ctx, "paused")
                time.sleep(3)
            ctx.hvd.allreduce(torch.tensor([1.0]), op=ctx.hvd.Sum)
        return {"val_accuracy": 0.5}
    if mode == "uneven":  # rank 1 is done at once, rank 0 works on alone
        if ctx.rank == 0:
            note(config, ctx, "waiting")
            time.sleep(float(os.environ.get("FIT_SLEEP", "10")))
            note(config, ctx, "done")
        return {"val_accuracy": 0.5}
    total = ctx.hvd.allreduce(torch.tensor([1.0]), op=ctx.hvd.Sum).item()
    return {"val_accuracy": total / 2}
"""


def write_spec(tmp_path: Path, modes: list[str], trial: str = "{retries: 0}") -> Path:
    (tmp_path / "engine_trainer.py").write_text(TRAINER)
    spec = tmp_path / "engine.yaml"
    spec.write_text(textwrap.dedent(f"""
        name: engine
        resources: {{slots: 2}}
        stages:
          - name: tune
            kind: hpo
            trainer: {{function: "engine_trainer:train"}}
            parallel: {{data: 2}}
            search: {{algorithm: grid}}
            space: {{mode: {{type: categorical, values: {modes}}}}}
            trial: {trial}
        """))
    return spec


def test_a_rank_that_fails_alone_ends_its_trial_at_once_and_its_gang_is_rebuilt(
        tmp_path: Path) -> None:
    # Rank 1 raises while rank 0 waits in an allreduce rank 1 will never join. With
    # no trial timeout, the engine before this change waited forever (Horovod's
    # stall shutdown never fires on this Gloo build).
    spec = write_spec(tmp_path, ["fine", "fails-alone", "again"])
    env = tagged_env(tmp_path, PYTHONPATH=str(tmp_path), FIT_DIR=str(tmp_path))
    run_dir = tmp_path / "run"
    try:
        began = time.monotonic()
        result = subprocess.run([NESTOR, "run", str(spec), "--run-dir", str(run_dir)],
                                env=env, capture_output=True, text=True, timeout=240,
                                check=False)
        took = time.monotonic() - began
        assert result.returncode == 0, result.stderr
        done = {e["trial"]["config"]["mode"]: e for e in finished(run_dir).values()}
        failed = done["fails-alone"]
        assert failed["status"] == "failed"
        assert "rank 1" in failed["reason"] and "fails on purpose" in failed["reason"], failed
        # The README's 2 s grace: rank 0 waits in an allreduce that never completes, so
        # the grace runs out in full, then the gang is killed and the end journalled.
        # Measured (3 runs, load 10-20 on 2 shared cores): 2.01 to 2.04 s from rank 1's
        # raise to trial_finished. Margins: not before the grace (less 0.1 s for the
        # clocks of two processes), at most 2 s after it (50x the measured 0.04).
        raised = float((tmp_path / "fails-alone-rank1.raised").read_text())
        ended = failed["time"] - raised
        assert README_GRACE_S - 0.1 <= ended <= README_GRACE_S + 2.0, ended
        assert done["fine"]["status"] == done["again"]["status"] == "completed"
        assert done["again"]["metrics"]["val_accuracy"] == 1.0  # both ranks joined again
        # From outside: rank 0, left waiting in the allreduce, was killed.
        waiting = int((tmp_path / "fails-alone-rank0.pid").read_text())
        assert not psutil.pid_exists(waiting) or \
            psutil.Process(waiting).status() == psutil.STATUS_ZOMBIE
        # Its gang was not given to a later trial: the next ran on a new one.
        started = [e for e in events(run_dir) if e["event"] == "trial_started"]
        broken = next(e["gang"] for e in started if e["trial"]["config"]["mode"] == "fails-alone")
        later = [e["gang"] for e in started if e["trial"]["config"]["mode"] == "again"]
        assert later and broken not in later
        assert wait_for_no_tagged(env["NESTOR_TEST_TAG"]) == {}
        print(f"\nfails alone: ended {ended:.2f} s after rank 1 raised; whole run {took:.0f} s")
    finally:
        kill_tagged(env["NESTOR_TEST_TAG"])


def test_a_stopped_rank_is_caught_by_the_progress_timeout_without_a_trial_timeout(
        tmp_path: Path) -> None:
    # SIGSTOP rank 1 (a dead NFS mount, a swapped-out node): rank 0 waits in its
    # allreduce for ever. No trial.timeout is set; progress_timeout is.
    spec = write_spec(tmp_path, ["stops"], "{retries: 1, progress_timeout: 12}")
    env = tagged_env(tmp_path, PYTHONPATH=str(tmp_path), FIT_DIR=str(tmp_path))
    run_dir = tmp_path / "run"
    stopped = None
    try:
        driver = subprocess.Popen([NESTOR, "run", str(spec), "--run-dir", str(run_dir)],
                                  env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                  text=True)
        paused = tmp_path / "stops-rank1.paused"
        deadline = time.monotonic() + 300
        while driver.poll() is None and time.monotonic() < deadline:
            if stopped is None and paused.exists() and paused.read_text():
                stopped = int(paused.read_text())
                os.kill(stopped, signal.SIGSTOP)
            time.sleep(0.1)
        _, stderr = driver.communicate(timeout=30)
        assert driver.returncode == 0, stderr
        assert stopped is not None, "the trial never paused"
        (failed,) = [e for e in events(run_dir) if e["event"] == "trial_attempt_failed"]
        assert "no progress for" in failed["reason"] and "hung" in failed["reason"], failed
        # progress_timeout 12. The driver's last sight of progress is the attempt's start:
        # rank 0 sends no beat before the pause (a rank's first beat is never sent, the
        # next one a quarter of the timeout later, 3 s, and rank 0 is blocked in its
        # allreduce by then). The pause itself comes 0.3-2 s after the start, with
        # the ranks' first allreduce (2 s on a slower machine, 2026-11-29). Measured
        # from the start: 12.16 s (2026-11-29); earlier runs, from the pause, 12.29 to
        # 12.72 s at load 10-20. Margins: not before 11.5 s (the journal times the start
        # a little after the driver does), at most 12 + 3 s.
        paused_at = float((tmp_path / "stops-rank1.paused-at").read_text())
        (started,) = [e for e in events(run_dir)
                      if e["event"] == "trial_started" and e.get("attempt") == 1]
        caught = failed["time"] - started["time"]
        assert 11.5 <= caught <= 15.0, caught
        assert paused_at < failed["time"] <= paused_at + 15.0, (paused_at, failed["time"])
        assert finished(run_dir)["0"]["status"] == "completed"
        assert not psutil.pid_exists(stopped) or \
            psutil.Process(stopped).status() == psutil.STATUS_ZOMBIE  # killed, not left
        assert wait_for_no_tagged(env["NESTOR_TEST_TAG"]) == {}
        print(f"\nstopped rank: caught {caught:.2f} s after its attempt started, "
              f"{failed['time'] - paused_at:.2f} s after the pause ({failed['reason']!r})")
    finally:
        if stopped is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(stopped, signal.SIGCONT)
        kill_tagged(env["NESTOR_TEST_TAG"])


def driver_cpu_s(pid: int) -> float:
    times = psutil.Process(pid).cpu_times()
    return times.user + times.system


def test_the_driver_uses_no_cpu_while_its_trials_run(tmp_path: Path) -> None:
    # Rank 1 returns at once, rank 0 works on for 10 s: the engine before this
    # change woke on rank 1's ready result again and again (~67 % of a core).
    spec = write_spec(tmp_path, ["uneven"])
    env = tagged_env(tmp_path, PYTHONPATH=str(tmp_path), FIT_DIR=str(tmp_path), FIT_SLEEP="10")
    run_dir = tmp_path / "run"
    driver = subprocess.Popen([NESTOR, "run", str(spec), "--run-dir", str(run_dir)], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        waiting, done = tmp_path / "uneven-rank0.waiting", tmp_path / "uneven-rank0.done"
        deadline = time.monotonic() + 180
        while not waiting.exists() and driver.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert waiting.exists(), "the trial never started"
        time.sleep(1)  # rank 1's result is back by now
        cpu0, wall0 = driver_cpu_s(driver.pid), time.monotonic()
        while not done.exists() and driver.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        cpu1, wall1 = driver_cpu_s(driver.pid), time.monotonic()
        _, stderr = driver.communicate(timeout=120)
        assert driver.returncode == 0, stderr
        share = (cpu1 - cpu0) / (wall1 - wall0)
        print(f"\ndriver CPU while waiting: {cpu1 - cpu0:.2f} s over {wall1 - wall0:.1f} s"
              f" ({share:.1%} of a core)")
        assert wall1 - wall0 > 5
        assert share < 0.10, f"the driver used {share:.0%} of a core while waiting"
        assert finished(run_dir)["0"]["status"] == "completed"
    finally:
        if driver.poll() is None:
            driver.kill()
        kill_tagged(env["NESTOR_TEST_TAG"])
