"""`make test` does the whole set-up, and under CI a skip fails the run.

The system-package step (scripts/system-deps.sh) runs for real: as a non-root
user (``setpriv`` to ``nobody`` when the tests run as root), and as root with
an ``apt-get`` on PATH that records its arguments instead of installing, so
the test never changes this machine's packages. PATH holds only what the
script is given, so what counts as missing does not depend on this machine.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "system-deps.sh"
ALL_PACKAGES = ["make", "cmake", "g++", "util-linux", "procps", "slurm-wlm", "munge",
                "chromium", "chromium-driver", "python3", "python3-venv", "python3-dev"]
COMMANDS = ["make", "cmake", "g++", "flock", "pgrep", "slurmctld", "munged", "chromium",
            "chromedriver"]
RECORDING_APT = """#!/bin/sh
echo "$*" >> "{log}"
"""


@pytest.fixture
def open_tmp() -> Iterator[Path]:
    """A folder the user ``nobody`` can read and write (pytest's tmp_path is private
    to its owner); the log of the recording apt-get lives there, empty at first."""
    path = Path(tempfile.mkdtemp(prefix="nestor-system-deps-"))
    path.chmod(0o755)
    log = path / "apt.log"
    log.touch()
    log.chmod(0o666)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def fake_path(tmp_path: Path, commands: list[str], log: Path) -> Path:
    """A PATH folder with ``sh``, an ``apt-get`` that only records its arguments,
    and a do-nothing stand-in for each name in ``commands``."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sh").symlink_to(shutil.which("sh") or "/bin/sh")
    apt = bin_dir / "apt-get"
    apt.write_text(RECORDING_APT.format(log=log))
    apt.chmod(0o755)
    for name in commands:
        stub = bin_dir / name
        stub.write_text("#!/bin/sh\nexit 0\n")
        stub.chmod(0o755)
    bin_dir.chmod(0o755)
    return bin_dir


def run_script(bin_dir: Path, *, as_nobody: bool) -> subprocess.CompletedProcess[str]:
    env = {"PATH": str(bin_dir), "HOME": "/tmp"}
    argv = [shutil.which("bash") or "/bin/bash", str(SCRIPT)]
    if as_nobody:
        argv = [shutil.which("setpriv") or "setpriv", "--reuid=65534", "--regid=65534",
                "--clear-groups", *argv]
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60,
                          check=False)


def test_not_as_root_it_stops_at_once_with_the_one_command_to_run(open_tmp: Path) -> None:
    log = open_tmp / "apt.log"
    bin_dir = fake_path(open_tmp, [], log)
    done = run_script(bin_dir, as_nobody=os.geteuid() == 0)
    assert done.returncode == 1, done.stderr
    assert log.read_text() == ""  # nothing was installed, or tried
    commands = [line.strip() for line in done.stderr.splitlines()
                if line.strip().startswith("sudo ")]
    assert len(commands) == 1, done.stderr
    assert commands[0].startswith("sudo sh -c 'apt-get update && ")
    listed = commands[0].rstrip("'").split("apt-get install")[1].split()
    assert [p for p in listed if not p.startswith("-")][-len(ALL_PACKAGES):] == ALL_PACKAGES


@pytest.mark.skipif(os.geteuid() != 0, reason="the install branch runs only as root")
def test_as_root_it_installs_what_is_missing_and_only_that(open_tmp: Path) -> None:
    log = open_tmp / "apt.log"
    have = [c for c in COMMANDS if c not in ("slurmctld", "chromedriver")]
    bin_dir = fake_path(open_tmp, have, log)
    done = run_script(bin_dir, as_nobody=False)
    assert done.returncode == 0, done.stderr
    calls = log.read_text().splitlines()
    assert calls[0] == "update"
    assert calls[1].startswith("install -y")
    # slurmctld and chromedriver are missing, and no python3 is on this PATH.
    assert calls[1].split()[-5:] == ["slurm-wlm", "chromium-driver", "python3", "python3-venv",
                                     "python3-dev"]


def test_nothing_missing_means_nothing_to_do_even_without_root(open_tmp: Path) -> None:
    log = open_tmp / "apt.log"
    bin_dir = fake_path(open_tmp, COMMANDS, log)
    # The system's Python (Debian's python3, python3-venv and python3-dev, which this
    # script installs), readable by nobody, unlike a Python under /root.
    (bin_dir / "python3").symlink_to("/usr/bin/python3")
    done = run_script(bin_dir, as_nobody=os.geteuid() == 0)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    assert log.read_text() == ""


def test_make_test_installs_system_packages_before_anything_else() -> None:
    # Run from `make test` itself, this is a sub-make: without --no-print-directory and
    # the parent's MAKEFLAGS it would print "make[1]: Entering directory" first.
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS")}
    done = subprocess.run(["make", "-n", "--no-print-directory", "test"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120, check=True)
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    assert lines[0] == "scripts/system-deps.sh"
    setup = next(i for i, line in enumerate(lines) if "scripts/setup.sh" in line)
    pytest_run = next(i for i, line in enumerate(lines) if "-m pytest" in line)
    assert 0 < setup < pytest_run


def test_ci_runs_the_readme_test_command_and_nothing_more() -> None:
    lines = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()
             if line.strip() and not line.lstrip().startswith("#")]
    assert lines[-1] == "exec make test"
    assert all(line.startswith(("set ", "cd ", "export CI=")) for line in lines[:-1]), lines


# --- under CI a skip is a failure ------------------------------------------------------

SKIPPING = """
import pytest

def test_runs():
    assert True

def test_needs_something():
    pytest.skip("needs something this machine lacks")

@pytest.mark.xfail(reason="known")
def test_known_bug():
    assert False
"""


@pytest.mark.parametrize("ci", ["true", "1"])
def test_under_ci_a_skip_fails_the_run(pytester: pytest.Pytester,
                                       monkeypatch: pytest.MonkeyPatch, ci: str) -> None:
    monkeypatch.setenv("CI", ci)
    pytester.makepyfile(SKIPPING)
    result = pytester.runpytest("-p", "skip_policy")
    result.assert_outcomes(passed=1, skipped=1, xfailed=1)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines([
        "*skips are failures under CI*",
        "*1 test(s) skipped, so this run fails*",
        "SKIPPED test_under_ci_a_skip_fails_the_run.py::test_needs_something:"
        " needs something this machine lacks",
    ])


def test_under_ci_a_skipped_module_fails_the_run(pytester: pytest.Pytester,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "true")
    pytester.makepyfile("import pytest\npytest.skip('no Slurm', allow_module_level=True)\n")
    result = pytester.runpytest("-p", "skip_policy")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["*SKIPPED*no Slurm*"])


@pytest.mark.parametrize("ci", [None, "", "false", "0"])
def test_outside_ci_a_skip_is_only_a_skip(pytester: pytest.Pytester,
                                          monkeypatch: pytest.MonkeyPatch,
                                          ci: str | None) -> None:
    if ci is None:
        monkeypatch.delenv("CI", raising=False)
    else:
        monkeypatch.setenv("CI", ci)
    pytester.makepyfile(SKIPPING)
    result = pytester.runpytest("-p", "skip_policy")
    result.assert_outcomes(passed=1, skipped=1, xfailed=1)
    assert result.ret == pytest.ExitCode.OK
    assert "skips are failures under CI" not in result.stdout.str()


def test_under_ci_a_clean_run_passes_and_deselection_is_no_skip(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "true")
    pytester.makeini("[pytest]\nmarkers =\n    slow: slow\n")
    pytester.makepyfile("import pytest\n\ndef test_a():\n    pass\n\n"
                        "@pytest.mark.slow\ndef test_b():\n    pass\n")
    result = pytester.runpytest("-p", "skip_policy", "-m", "not slow")
    result.assert_outcomes(passed=1, deselected=1)
    assert result.ret == pytest.ExitCode.OK


def test_the_policy_is_loaded_for_the_real_suite(request: pytest.FixtureRequest) -> None:
    assert request.config.pluginmanager.has_plugin("nestor-skip-policy")


# --- every test has a time limit -------------------------------------------------------

HANGING = """
import time
import pytest

def test_hangs():
    time.sleep(60)

@pytest.mark.slow
def test_slow_but_in_its_limit():
    time.sleep(1.5)

@pytest.mark.slow
@pytest.mark.timeout(1)
def test_slow_with_its_own_limit():
    time.sleep(60)
"""


def test_a_hanging_test_fails_at_its_limit_and_slow_ones_get_the_longer_one(
        pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nmarkers =\n    slow: slow\ntimeout = 1\nslow_timeout = 30\n")
    pytester.makeconftest((ROOT / "tests" / "timeouts.py").read_text())
    pytester.makepyfile(HANGING)
    # In a process of its own: pytest-timeout's alarm there is not this test's.
    result = pytester.runpytest_subprocess("-v")
    # The slow test sleeping past the 1 s default passed: it had the slow limit.
    result.stdout.fnmatch_lines(["*test_hangs FAILED*", "*test_slow_but_in_its_limit PASSED*",
                                 "*test_slow_with_its_own_limit FAILED*"])
    result.assert_outcomes(passed=1, failed=2)
    result.stdout.fnmatch_lines(["*Failed: Timeout (>1.0s) from pytest-timeout.*"])


def test_the_project_gives_every_test_a_limit() -> None:
    import tomllib

    options = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"][
        "ini_options"]
    assert 0 < options["timeout"] < options["slow_timeout"]
    test_extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]["test"]
    pinned = next(p for p in test_extra if p.startswith("pytest-timeout=="))
    assert pinned in (ROOT / "requirements.lock").read_text().splitlines()
