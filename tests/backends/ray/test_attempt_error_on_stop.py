"""An attempt whose ranks fail because the driver is stopping prints no traceback.

On SIGTERM (scancel, preemption) the driver kills its gangs and shuts Ray down
while attempt threads may still be inside a gang's submit; the error they get
then is the stop itself, and the attempt is journalled as not finished. The
user should see "nestor resume ..." and no Python traceback (the SIGTERM test
of test_workflow asserts that from outside, but only when the race happens).
Any other error in an attempt is still logged with its traceback.
"""

from __future__ import annotations

import logging
import threading
from types import SimpleNamespace

import pytest

from nestor.orchestrator.backends import stopping
from nestor.orchestrator.backends.interface import Ended, Launch
from nestor.orchestrator.backends.ray.backend import RayBackend
from nestor.orchestrator.backends.ray.gangs import Shape


class _Gang:
    """A warm gang whose submit fails as a rank's would when Ray goes away."""

    id = 1
    executor = object()  # warm: no start
    busy = True
    broken = False

    def submit(self, *args: object, **kwargs: object) -> list[object]:
        raise RuntimeError("Ray has not been started yet")

    def kill(self) -> None:
        pass


def _attempt(caplog: pytest.LogCaptureFixture) -> Ended:
    pool = SimpleNamespace(slots=2, lock=threading.Lock(), forget=lambda gang: None)
    backend = RayBackend(pool)  # type: ignore[arg-type]
    with caplog.at_level(logging.INFO, logger="nestor.orchestrator.backends.ray.backend"):
        backend._attempt(Launch("tune/1#1", Shape(1), request=None), _Gang(), [])
    events = [backend._events.get_nowait() for _ in range(backend._events.qsize())]
    return next(e for e in events if isinstance(e, Ended))


def test_an_attempt_broken_by_a_stop_logs_no_traceback(
        caplog: pytest.LogCaptureFixture) -> None:
    stopping.request_stop("SIGTERM")
    try:
        ended = _attempt(caplog)
    finally:
        stopping.clear()
    assert ended.failure and "RuntimeError" in ended.failure and ended.started
    assert not [r for r in caplog.records if r.exc_info or r.levelno >= logging.WARNING]


def test_an_attempt_broken_otherwise_logs_its_traceback(
        caplog: pytest.LogCaptureFixture) -> None:
    ended = _attempt(caplog)
    assert ended.failure and "RuntimeError" in ended.failure
    assert [r for r in caplog.records if r.exc_info and r.levelno == logging.ERROR]
