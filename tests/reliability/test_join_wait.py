"""A driver joining a cluster whose nodes are still coming up waits for their slots.

A Slurm job's Ray lists a node alive before the cluster's resource view counts its CPUs;
the driver started next saw 2 of 4 slots and refused (CI, 2026-11-28). Here a real Ray
head of 1 CPU, a driver that asks for 2 slots, and a second node that joins after the
driver has looked: the driver waits, says so, and runs every trial. With no second node
it refuses after ``NESTOR_JOIN_WAIT_S``, naming both counts.
"""

from __future__ import annotations

import json
import secrets
import subprocess
import threading
import time
from pathlib import Path

import pytest
from nestor_harness import FIT, NESTOR, RayHead, command_spec, tagged_env

pytestmark = pytest.mark.slow


def _driver(tmp_path: Path, head: RayHead, env: dict[str, str]) -> subprocess.Popen[str]:
    fit = tmp_path / "fit.py"
    fit.write_text(FIT)
    spec = tmp_path / "spec.yaml"
    spec.write_text(command_spec(fit, name="join", budget=4, slots=2, retries=0))
    return subprocess.Popen([NESTOR, "run", str(spec), "--run-dir", str(tmp_path / "run"),
                             "--address", head.address], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def test_the_driver_waits_for_a_node_that_is_still_joining(tmp_path: Path) -> None:
    env = tagged_env(tmp_path, RAY_USAGE_STATS_ENABLED="0", RAY_AUTH_MODE="token",
                     RAY_AUTH_TOKEN=secrets.token_hex(32), NESTOR_JOIN_WAIT_S="120")
    head = RayHead(env, cpus=1)
    head.start()
    try:
        driver = _driver(tmp_path, head, env)
        lines: list[str] = []
        reader = threading.Thread(target=lambda: lines.extend(driver.stdout or []))
        reader.start()
        deadline = time.monotonic() + 120
        while not any("waiting for the Ray cluster's slots" in line for line in lines):
            assert driver.poll() is None, "".join(lines)
            assert time.monotonic() < deadline, "".join(lines)
            time.sleep(0.2)
        head.join(cpus=1)  # the second node arrives after the driver looked
        assert driver.wait(timeout=300) == 0, "".join(lines)
        reader.join()
        output = "".join(lines)
        assert "waiting for the Ray cluster's slots: 1 of 2 so far" in output, output
        stage = json.loads((tmp_path / "run" / "results.json").read_text())["stages"][0]
        assert stage["n_trials"] == 4 and stage["n_failed"] == 0, stage
    finally:
        head.stop()


def test_without_the_node_the_driver_refuses_after_the_wait(tmp_path: Path) -> None:
    env = tagged_env(tmp_path, RAY_USAGE_STATS_ENABLED="0", RAY_AUTH_MODE="token",
                     RAY_AUTH_TOKEN=secrets.token_hex(32), NESTOR_JOIN_WAIT_S="3")
    head = RayHead(env, cpus=1)
    head.start()
    try:
        started = time.monotonic()
        driver = _driver(tmp_path, head, env)
        output, _ = driver.communicate(timeout=300)
        assert driver.returncode == 2, output
        assert time.monotonic() - started >= 3, output
        assert "the workflow asks for 2 slots but the Ray cluster has 1" in output, output
        assert "Traceback" not in output, output
    finally:
        head.stop()
