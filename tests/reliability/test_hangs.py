"""Hangs: a rank that stops answering (SIGSTOP) and a collective one rank never
joins. Both fail the attempt quickly, and the retry runs on a rebuilt gang.

Real Ray, real Horovod over Gloo, 2 ranks per trial, with Horovod's stall
checks set low (2 s warn, 6 s shut down) in the ranks and a progress timeout of
PROGRESS_S (rank 0 silent that long: hung). Whichever of those comes first ends
the attempt: the waiting rank's Horovod giving up (the engine ends an attempt as
soon as one rank fails) or the progress check. The trial timeout is set far
beyond both (TIMEOUT), so a hang that only the timeout ends fails the test: the
attempt must end on a hang check, within QUICK_S of its start.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import textwrap
import time
from pathlib import Path

import pytest
from nestor_harness import NESTOR, events, finished, kill_tagged, tagged_env, wait_for_no_tagged

pytestmark = pytest.mark.slow

TRAINER = """
import os, time

import torch


def train(config, ctx):
    where = os.environ["FIT_DIR"]
    mode = config["mode"]
    first = not os.path.exists(os.path.join(where, f"{mode}-ran"))
    ctx.hvd.allreduce(torch.tensor([0.0]), op=ctx.hvd.Sum)  # both ranks have seen `first`
    if ctx.rank == 0:
        open(os.path.join(where, f"{mode}-ran"), "w").close()
    if first and mode == "sigstop":
        with open(os.path.join(where, f"rank{ctx.rank}.pid"), "w") as out:
            out.write(str(os.getpid()))
        time.sleep(5)  # the test stops rank 1 meanwhile
    if first and mode == "collective" and ctx.rank == 1:
        return {"val_accuracy": 0.0}  # rank 1 never joins the allreduce below
    total = ctx.hvd.allreduce(torch.tensor([1.0]), op=ctx.hvd.Sum).item()
    return {"val_accuracy": 0.5, "ranks": total}
"""

PROGRESS_S = 10  # trial.progress_timeout: rank 0 silent this long is hung
TIMEOUT = 600  # trial.timeout: far beyond the hang checks, never what ends the attempt
# How long a hung attempt may last: the checks fire at 6 s (Horovod) and 10 s (progress);
# the rest is the driver's look and killing the gang on a loaded 2-core machine (measured
# at load 12 on 2 cores: the stall and the stopped rank ended after 10.0 and 10.7 s, both
# by the progress check).
QUICK_S = 60


def test_a_stopped_rank_and_a_stalled_collective_fail_and_retry_on_new_gangs(
        tmp_path: Path) -> None:
    (tmp_path / "hangs.py").write_text(TRAINER)
    spec = tmp_path / "hangs.yaml"
    spec.write_text(textwrap.dedent(f"""
        name: hangs
        resources: {{slots: 2}}
        stages:
          - name: tune
            kind: hpo
            trainer: {{function: "hangs:train"}}
            parallel: {{data: 2}}
            search: {{algorithm: grid}}
            space: {{mode: {{type: categorical, values: [collective, sigstop]}}}}
            trial: {{timeout: {TIMEOUT}, progress_timeout: {PROGRESS_S}, retries: 1}}
        """))
    env = tagged_env(tmp_path, PYTHONPATH=str(tmp_path), FIT_DIR=str(tmp_path),
                     HOROVOD_STALL_CHECK_TIME_SECONDS="2",
                     HOROVOD_STALL_SHUTDOWN_TIME_SECONDS="6")
    run_dir = tmp_path / "run"
    stopped: int | None = None
    try:
        driver = subprocess.Popen([NESTOR, "run", str(spec), "--run-dir", str(run_dir)],
                                  env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True)
        pid_file = tmp_path / "rank1.pid"
        deadline = time.monotonic() + 400
        while driver.poll() is None and time.monotonic() < deadline:
            if stopped is None and pid_file.exists() and pid_file.read_text():
                stopped = int(pid_file.read_text())
                os.kill(stopped, signal.SIGSTOP)  # the rank stops answering
            time.sleep(0.1)
        _, stderr = driver.communicate(timeout=60)
        assert driver.returncode == 0, stderr
        assert stopped is not None, "the sigstop trial never started"
        log = events(run_dir)
        failures = {e["trial"]["config"]["mode"]: e for e in log
                    if e["event"] == "trial_attempt_failed"}
        assert set(failures) == {"collective", "sigstop"}
        # Either the waiting rank's Horovod gives up (its failure ends the attempt at
        # once) or the progress check does, quickly; never the trial timeout. Both kill
        # the gang, stopped rank included.
        for mode, failure in failures.items():
            reason = failure["reason"]
            assert "Horovod" in reason or "): hung" in reason, (mode, reason)
            assert "timeout after" not in reason, (mode, reason)
            lasted = failure["slot_seconds"] / 2  # two ranks
            assert lasted < QUICK_S, f"{mode}: the hung attempt lasted {lasted:.0f} s"
        stall = failures["collective"]
        done = finished(run_dir)
        assert len(done) == 2 and all(e["status"] == "completed" for e in done.values())
        assert all(e["metrics"]["ranks"] == 2.0 for e in done.values())
        for failure in failures.values():
            gangs = [e["gang"] for e in log if e["event"] == "trial_started"
                     and e["trial"]["id"] == failure["trial"]["id"]]
            assert len(gangs) == 2 and gangs[0] != gangs[1], gangs  # retried on a new gang
        with pytest.raises(ProcessLookupError):
            os.kill(stopped, 0)  # the stopped rank was killed, not left behind
        assert wait_for_no_tagged(env["NESTOR_TEST_TAG"]) == {}
        print(f"\nhangs: stall failed after {stall['slot_seconds'] / 2:.1f} s"
              f" ({stall['reason']!r}),"
              f" sigstop after {failures['sigstop']['slot_seconds'] / 2:.1f} s; both retried")
    finally:
        if stopped is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(stopped, signal.SIGCONT)
        kill_tagged(env["NESTOR_TEST_TAG"])
