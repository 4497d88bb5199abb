"""Every test has a time limit: a hang fails its test instead of the whole run.

pytest-timeout gives every test the ``timeout`` of pytest's ini options (seconds);
this plugin, loaded by ``tests/conftest.py``, gives each test marked ``slow`` the
``slow_timeout`` instead, unless the test names its own with
``@pytest.mark.timeout(SECONDS)`` (the kill soak does). A test that overruns fails
with the stacks of its threads, and the run goes on to the next test.
"""

from __future__ import annotations

import pytest

SLOW_TIMEOUT_S = 1800.0  # when the ini options give no slow_timeout


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini("slow_timeout", "seconds a test marked slow may take (its own"
                  " timeout marker wins)", default=str(SLOW_TIMEOUT_S))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    limit = float(config.getini("slow_timeout"))
    for item in items:
        if item.get_closest_marker("slow") and not item.get_closest_marker("timeout"):
            item.add_marker(pytest.mark.timeout(limit))
