"""Under CI a skipped test is a failure: a test CI is meant to run never skips there.

Loaded for every run by ``tests/conftest.py``. When the ``CI`` environment
variable is set (CI services set ``CI=true``; ``.ci/run`` sets it too) to
anything but ``0``, ``false`` or ``no``, every skip is listed at the end of
the run and a run that would otherwise pass exits with status 1. Outside CI a
skip stays a skip (``-ra`` prints its reason), so a laptop without Slurm can
still run the rest. Deselected tests (``-m "not slow"``) and expected failures
(xfail) are not skips.
"""

from __future__ import annotations

import os

import pytest


def under_ci() -> bool:
    """Whether the environment says this is a CI run."""
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


class SkipPolicy:
    """Collects every skip of the session; under CI, fails a run that had any."""

    def __init__(self) -> None:
        self.skips: list[tuple[str, str]] = []

    def _record(self, report: pytest.CollectReport | pytest.TestReport) -> None:
        if report.skipped and not hasattr(report, "wasxfail"):
            longrepr = report.longrepr
            reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
            self.skips.append((report.nodeid, reason.removeprefix("Skipped: ")))

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self._record(report)

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        self._record(report)

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if under_ci() and self.skips and exitstatus in (pytest.ExitCode.OK,
                                                          pytest.ExitCode.NO_TESTS_COLLECTED):
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if not (under_ci() and self.skips):
            return
        terminalreporter.section("skips are failures under CI", sep="=", red=True, bold=True)
        terminalreporter.line(
            f"CI is set ({os.environ['CI']!r}): {len(self.skips)} test(s) skipped, so this run"
            " fails. A test CI is meant to run must run there: install what it needs"
            " (`make test` as root does), or unset CI to allow skips.", red=True)
        for nodeid, reason in self.skips:
            terminalreporter.line(f"SKIPPED {nodeid}: {reason}", red=True)


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(SkipPolicy(), "nestor-skip-policy")
