"""Stopping a driver cleanly when Slurm or a person asks it to.

Slurm sends SIGTERM on ``scancel``, at preemption and (with ``--signal``)
shortly before the time limit; a person presses Ctrl-C. Either way the
driver must not die mid-write: the handler only records the request, and the
scheduling loop, between two journal appends, kills the running gangs and
raises :class:`Interrupted`. Everything finished is already journalled, so
``nestor resume`` (or a requeued job) runs only what was left.

It sits with the backends, below the engine, because a cluster asks too: the
simulated one requests a stop at its time limit, as Slurm's SIGTERM would.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator
from types import FrameType

_requested: str | None = None
_installed = False
_wakers: list[Callable[[], None]] = []  # called on a request: must be signal-safe


class Interrupted(Exception):
    """The driver stopped on request; the run directory can be resumed."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason
        self.run_dir: object | None = None  # set by the workflow runner


def request_stop(reason: str) -> None:
    global _requested
    if _requested is None:
        _requested = reason
    for wake in list(_wakers):
        wake()


@contextlib.contextmanager
def on_stop_request(wake: Callable[[], None]) -> Iterator[None]:
    """Call ``wake`` when a stop is requested, while in this block: how a loop
    blocked on its next event hears of a signal at once. ``wake`` runs inside
    the signal handler, so it must be safe there (``queue.SimpleQueue.put`` is)."""
    _wakers.append(wake)
    try:
        yield
    finally:
        _wakers.remove(wake)


def stop_requested() -> str | None:
    """The reason a stop was asked for, or None."""
    return _requested


def clear() -> None:
    global _requested
    _requested = None


def _on_signal(signum: int, frame: FrameType | None) -> None:
    if signum == signal.SIGINT and _requested is not None:
        raise KeyboardInterrupt  # a second Ctrl-C: stop at once
    request_stop(signal.Signals(signum).name)


def install_handlers() -> None:
    """Turn SIGTERM, SIGINT and SIGUSR1 into a clean stop (main thread only)."""
    global _installed
    _installed = True
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1):
        signal.signal(signum, _on_signal)


def reinstall_handlers() -> None:
    """Take the signals back after ``ray.init``, whose crash handler would kill
    the driver on SIGTERM; a no-op unless :func:`install_handlers` ran, and off the
    main thread (a workflow run in a thread: only the main thread may set handlers,
    and the handlers it installed stay)."""
    if _installed and threading.current_thread() is threading.main_thread():
        install_handlers()


@contextlib.contextmanager
def starting() -> Iterator[None]:
    """Around a backend's start. ``ray.init`` puts in a SIGTERM handler of its own
    that ends the process at once with status 15 and no word (``sys.exit(15)``); a
    stop asked for while the backend starts is the stop it is later: Interrupted,
    which the command reports with what is kept and exits 128 + the signal. Our
    handlers are taken back whatever happens."""
    try:
        yield
    except SystemExit as exc:
        reason = _signal_name(exc.code)
        if reason is None:
            raise
        request_stop(reason)
        raise Interrupted(reason) from None
    finally:
        reinstall_handlers()


def _signal_name(code: object) -> str | None:
    """The stop signal a handler's ``sys.exit(signum)`` stands for (None: not one)."""
    stops = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1)
    if isinstance(code, int) and not isinstance(code, bool) and code in stops:
        return signal.Signals(code).name
    return None


def exit_code(reason: str) -> int:
    """128 + the signal's number, as a shell reports a process ended by it."""
    try:
        return 128 + int(signal.Signals[reason])
    except KeyError:
        return 1
