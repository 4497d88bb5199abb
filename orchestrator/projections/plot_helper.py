"""A second process that draws some of a finished stage's plots beside the projector.

A stage's plots are drawn when it ends (``artifacts.publish_stage``): half a dozen
matplotlib figures, about a second of one core here for a 250-trial stage, and the
last thing a user waits for before ``nestor run`` exits, while the machine's other
core is idle (the driver only waits for Ray to shut down). The projector's process
(``projector_process``) therefore forks a copy of itself once it has loaded
matplotlib and MLflow, before it starts any thread (a fork copies only the thread
that calls it): the copy has everything loaded already and draws the plots it is
sent, one at a time, while the projector draws the others.

A plot is sent as a pickle of a call (``functools.partial`` of a module-level
function and plain data); what cannot be pickled, or finds the helper gone, is
drawn by the projector itself. The helper ends when the projector does: its end of
the job pipe closes, even when the projector is killed. The driver's own thread
projector (no process of its own) has no helper and draws every plot itself.
"""

from __future__ import annotations

import contextlib
import logging
import os
import pickle
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

_HEADER = 8  # bytes of a message's length


class PlotHelper:
    """The projector's side: ``submit`` a call, later ``result`` for it, in order."""

    def __init__(self, pid: int, jobs: int, results: int) -> None:
        self.pid = pid
        self._jobs, self._results = jobs, results
        self._waiting = 0  # calls sent whose results are not read yet
        self.broken = False

    @classmethod
    def start(cls) -> PlotHelper | None:
        """Fork the helper now (None: where this process already runs threads, or the
        fork fails; the projector then draws every plot itself)."""
        if threading.active_count() > 1:  # a fork would copy locks held by the others
            return None
        jobs_read, jobs_write = os.pipe()
        results_read, results_write = os.pipe()
        try:
            pid = os.fork()
        except OSError as exc:
            log.debug("no plot helper: %s", exc)
            for fd in (jobs_read, jobs_write, results_read, results_write):
                os.close(fd)
            return None
        if pid == 0:  # the helper
            code = 0
            try:
                os.close(jobs_write)
                os.close(results_read)
                _detach_from_driver()
                _serve(jobs_read, results_write)
            except BaseException:  # nothing to report to: it ends quietly
                code = 1
            finally:
                os._exit(code)  # not the interpreter's exit: nothing of the parent's to run
        os.close(jobs_read)
        os.close(results_write)
        return cls(pid, jobs_write, results_read)

    def submit(self, calls: list[Callable[[], Any]]) -> list[bool]:
        """Send each of ``calls`` to be made in the helper, in order; which were sent
        (not one that does not pickle, nor any once the helper is gone: the caller
        makes those itself). The pipe is written by a thread: a call bigger than the
        pipe holds (a big stage's summary) waits there for the helper to read it, not
        in the caller, which draws its own meanwhile."""
        payloads: list[bytes] = []
        sent: list[bool] = []
        for call in calls:
            payload = None if self.broken else _pickled(call)
            sent.append(payload is not None)
            if payload is not None:
                payloads.append(payload)
        if payloads:
            self._waiting += len(payloads)
            threading.Thread(target=self._send_all, args=(payloads,),
                             name="nestor-plot-helper-writer", daemon=True).start()
        return sent

    def _send_all(self, payloads: list[bytes]) -> None:
        try:
            for payload in payloads:
                send_frame(self._jobs, payload)
        except OSError as exc:  # the helper is gone: result() says so
            self._fail(exc)

    def result(self) -> Any:
        """What the oldest call sent returned; raises what it raised (as a
        RuntimeError naming it), or OSError where the helper is gone."""
        if self._waiting == 0:
            raise RuntimeError("no call is waiting for its result")
        self._waiting -= 1
        try:
            ok, value = pickle.loads(_receive(self._results))
        except (OSError, EOFError, pickle.UnpicklingError) as exc:
            self._fail(exc)
            raise OSError(f"the plot helper is gone ({exc})") from exc
        if not ok:
            raise RuntimeError(value)
        return value

    def close(self) -> None:
        """End the helper (its job pipe closed) and reap it."""
        for fd in (self._jobs, self._results):
            with contextlib.suppress(OSError):
                os.close(fd)
        with contextlib.suppress(OSError):
            os.waitpid(self.pid, 0)
        self.broken = True

    def _fail(self, exc: BaseException) -> None:
        if not self.broken:
            log.warning("the plot helper (pid %d) failed (%s); the projector draws every"
                        " plot itself", self.pid, exc)
        self.broken = True


def _pickled(call: Callable[[], Any]) -> bytes | None:
    try:
        return pickle.dumps(call)
    except Exception:  # a lambda, a closure: drawn by the caller
        return None


def _detach_from_driver() -> None:
    """The helper reads nothing from the driver and says nothing to it: its copies of
    the projector's stdin and stdout (the driver's pipes) are closed, so that the
    driver's end of them closes when the projector's does."""
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1):
        os.dup2(null, fd)
    os.close(null)


def _serve(jobs: int, results: int) -> None:
    while True:
        try:
            payload = _receive(jobs)
        except EOFError:  # the projector ended
            return
        try:
            answer: tuple[bool, Any] = (True, pickle.loads(payload)())
            reply = pickle.dumps(answer)
        except Exception as exc:  # said to the projector, which logs it as its own
            reply = pickle.dumps((False, f"{type(exc).__name__}: {exc}"))
        send_frame(results, reply)


def send_frame(fd: int, payload: bytes) -> None:
    """Write ``payload`` to ``fd`` whole, after 8 bytes of its length (the framing the
    projector's process is sent its run in, too)."""
    view = memoryview(len(payload).to_bytes(_HEADER, "big") + payload)
    while view:
        view = view[os.write(fd, view):]


def _receive(fd: int) -> bytes:
    size = int.from_bytes(_read_exactly(fd, _HEADER), "big")
    return _read_exactly(fd, size)


def _read_exactly(fd: int, size: int) -> bytes:
    parts, left = [], size
    while left:
        part = os.read(fd, left)
        if not part:
            raise EOFError("the other end closed")
        parts.append(part)
        left -= len(part)
    return b"".join(parts)


def draw_all(makers: list[tuple[str, Callable[[], Path | None]]], helper: PlotHelper | None,
             ) -> list[tuple[str, Path | BaseException | None]]:
    """Make every plot of ``makers`` (what it shows, a call that draws it): every other
    one in ``helper`` where there is one, the rest here, at the same time. Returns each
    one's path (None: nothing to draw) or the exception it raised, in ``makers``'
    order."""
    sent: list[int] = []
    if helper is not None:
        halves = list(range(1, len(makers), 2))
        accepted = helper.submit([makers[i][1] for i in halves])
        sent = [i for i, ok in zip(halves, accepted, strict=True) if ok]
    drawn: dict[int, Path | BaseException | None] = {}
    for i, (_, make) in enumerate(makers):
        if i not in sent:
            drawn[i] = _made(make)
    for i in sent:
        assert helper is not None
        try:
            drawn[i] = helper.result()
        except OSError:  # the helper is gone: drawn here
            drawn[i] = _made(makers[i][1])
        except RuntimeError as exc:  # the plot's own failure, in the helper
            drawn[i] = exc
    return [(what, drawn[i]) for i, (what, _) in enumerate(makers)]


def _made(make: Callable[[], Path | None]) -> Path | BaseException | None:
    try:
        return make()
    except Exception as exc:  # a plot must not lose a finished stage: the caller says so
        return exc
