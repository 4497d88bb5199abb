"""Hostile inputs to command trainers: shell syntax as parameter values, and a
program that prints gigabytes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from nestor_harness import finished, nestor, tagged_env, wait_for_no_tagged

pytestmark = pytest.mark.slow

ECHO_ARGV = """
import json, os, sys
with open(os.environ["ARGV_LOG"], "a") as out:
    out.write(json.dumps(sys.argv[1:]) + "\\n")
print("FoM: 1.0")
"""


def test_shell_syntax_in_parameter_values_reaches_the_program_literally(tmp_path: Path) -> None:
    (tmp_path / "echo_argv.py").write_text(ECHO_ARGV)
    pwned = tmp_path / "pwned"
    home = tmp_path / "home"
    home.mkdir()
    (home / "keep").write_text("still here")
    hostile = [f"$(touch {pwned})", "; rm -rf ~", f"`touch {pwned}`", "a' && touch 'b",
               "x\ny", "--x=1 --y=2", "$HOME"]
    spec = tmp_path / "hostile.yaml"
    spec.write_text(textwrap.dedent(f"""
        name: hostile
        resources: {{slots: 1}}
        stages:
          - name: tune
            kind: hpo
            trainer: {{command: ["{sys.executable}", "{tmp_path / 'echo_argv.py'}"]}}
            search: {{algorithm: grid}}
            space: {{v: {{type: categorical, values: {json.dumps(hostile)}}}}}
            objective: {{metric: result, mode: min}}
        """))
    env = tagged_env(tmp_path, ARGV_LOG=str(tmp_path / "argv.log"), HOME=str(home))
    result = nestor("run", str(spec), "--run-dir", str(tmp_path / "run"), env=env)
    assert result.returncode == 0, result.stderr
    assert len(finished(tmp_path / "run")) == len(hostile)
    received = [json.loads(line) for line in (tmp_path / "argv.log").read_text().splitlines()]
    assert sorted(received) == sorted([[f"--v={value}"] for value in hostile])
    assert not pwned.exists() and (home / "keep").read_text() == "still here"
    assert wait_for_no_tagged(env["NESTOR_TEST_TAG"]) == {}


FLOOD = """
import os, sys
block = (b"spam " * 13107 + b"\\n")  # about 64 KiB a line
out = sys.stdout.buffer
for _ in range(int(os.environ["FLOOD_MIB"]) * 16):
    out.write(block)
out.write(b"FoM: 0.5\\n")
"""

MEASURE = """
import json, resource, sys
from nestor.trainers import TrainerRef, TrialRequest
from nestor.trainers.command import LOG_LIMIT, run_command
request = TrialRequest(trial_id="flood", trainer=TrainerRef.command([sys.executable, sys.argv[1]]),
                       log_dir=sys.argv[2])
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
result = run_command(request)
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"status": result.status, "metrics": result.metrics, "rss_before_kib": before,
                  "rss_after_kib": after, "log_limit": LOG_LIMIT}))
"""


def test_a_trainer_printing_gigabytes_is_read_with_bounded_memory(tmp_path: Path) -> None:
    (tmp_path / "flood.py").write_text(FLOOD)
    (tmp_path / "measure.py").write_text(MEASURE)
    mib = 2048
    done = subprocess.run([sys.executable, str(tmp_path / "measure.py"),
                           str(tmp_path / "flood.py"), str(tmp_path / "logs")],
                          capture_output=True, text=True, timeout=600, check=False,
                          env={**os.environ, "FLOOD_MIB": str(mib)},
                          cwd=Path(__file__).parents[2])
    assert done.returncode == 0, done.stderr
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    assert figures["status"] == "ok" and figures["metrics"]["result"] == 0.5
    grown_mib = (figures["rss_after_kib"] - figures["rss_before_kib"]) / 1024
    assert grown_mib < 64, figures  # 2 GiB went through; memory grew by less than 64 MiB
    log = tmp_path / "logs" / "stdout.log"
    assert log.stat().st_size <= figures["log_limit"] + 1024
    text = log.read_bytes()
    assert b"bytes of output left out here" in text
    assert text.rstrip().endswith(b"FoM: 0.5")  # the tail, with the result, is kept
    print(f"\nflood: {mib} MiB printed, driver-side RSS grew {grown_mib:.1f} MiB"
          f" (peak {figures['rss_after_kib'] / 1024:.0f} MiB), log {log.stat().st_size} bytes")
