"""The driver's MLflow projector, run in a process of its own.

The projector (``projector.Projector``) only reads the journal from disk and writes
MLflow, so it needs nothing of the driver's but the workflow. In the driver's process
its work (importing MLflow and SQLAlchemy, building the store, writing the runs,
drawing each stage's plots: about 3.4 s of CPU for a 250-trial sweep here, measured
with py-spy) held the GIL against the scheduling loop: on 2 cores a 250-trial sweep
took 5.7-6.1 s with it and 3.5-3.7 s without it. In a child process it runs on
another core beside the loop, and the driver never imports MLflow.

What the driver sees is the thread's interface (``wake``, ``close``, ``done``,
``run_dir``, ``uri``), so ``wait_for_mlflow`` shows the wait the same way. The two
talk over the child's stdin and stdout:

- driver -> child: the run (8 bytes of length, then the pickle of its run directory,
  journal file, log level and workflow), then lines:
  ``w`` something was appended, ``c SECONDS`` close (``Projector.close``'s
  timeout), ``s`` stop waiting (a Ctrl-C). End of input (the driver gone, even
  killed) is a close that stops at once: MLflow's writes are idempotent and the
  cursor file says how far they got, so the next driver (``nestor resume``) goes on.
- child -> driver: ``done N`` as the events MLflow shows grow, ``closed LEFT DONE``
  at the end.

The child can be started before the driver knows its run (``prestart``, first thing
in ``nestor run``): it loads MLflow, SQLAlchemy and matplotlib (some 2.5 s of CPU)
while the driver imports its own modules and reads the spec, on the core the driver
leaves idle, rather than against Ray's start; ``start_projector`` then sends it the
run. A child given no run (the spec was refused) ends when the driver's end closes
its input, at once, without waiting for its imports.

The child ignores SIGINT: a Ctrl-C at the terminal reaches the driver's whole
process group, and the driver, not the signal, decides how long MLflow is waited
for. Where the child cannot be started, the projector runs in a thread, as before.
"""

from __future__ import annotations

import contextlib
import logging
import os
import pickle
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from nestor.orchestrator.projections.cursor import JournalLines, read_cursor
from nestor.orchestrator.projections.local_store import default_tracking_uri
from nestor.orchestrator.projections.plot_helper import send_frame

log = logging.getLogger(__name__)

REPORT_EVERY_S = 0.05  # how often the child says how far it got, and the driver's wait looks
WAKE_EVERY_S = 0.05  # the driver's wakes, at most this often (the child wakes itself too)
CHILD_WAKES_EVERY_S = 0.5  # the child's own wake: a wake the driver left out costs no more
EXIT_WAIT_S = 10.0  # after ``closed``, or a stop, for the child to exit before it is killed


class ProjectorProcess:
    """``Projector``'s driver side, with the projector itself in a child process.

    >>> projector = start_projector(run_dir, workflow)      # doctest: +SKIP
    >>> journal = Journal(path, on_append=projector.wake)   # doctest: +SKIP
    >>> projector.close(timeout_s=20)                       # what MLflow still lacks
    """

    def __init__(self, run_dir: Path, workflow: Any, *,
                 journal_file: str = "journal.jsonl") -> None:
        self.run_dir = Path(run_dir)
        self.uri = workflow.tracking.uri or default_tracking_uri(self.run_dir)
        self._lines = JournalLines(self.run_dir / journal_file)
        self.done = read_cursor(self.run_dir) or 0
        self._left: int | None = None  # the child's last word: events MLflow lacks
        self._woken_at = 0.0
        level = logging.getLogger("nestor").getEffectiveLevel()  # `-q`: errors only
        try:  # before the child is given the run: a run that cannot be sent, no child
            payload = pickle.dumps((str(self.run_dir), journal_file, level, workflow))
        except BaseException:
            discard_prestarted()
            raise
        self._child = _take_prestarted() or _spawn()
        assert self._child.stdin is not None and self._child.stdout is not None
        self._stdin = self._child.stdin.fileno()
        try:
            send_frame(self._stdin, payload)
        except OSError:
            self._child.kill()
            raise
        os.set_blocking(self._stdin, False)  # a wake never blocks the loop
        self._reader = threading.Thread(target=self._read, args=(self._child.stdout,),
                                        name="nestor-mlflow-projector-reader", daemon=True)
        self._reader.start()

    # -- the driver's side (Projector's) -------------------------------------------------

    def wake(self, *_: Any) -> None:
        """Something was appended (called by the journal; cheap, never blocks): at most
        one line every ``WAKE_EVERY_S``; the child wakes itself too."""
        now = time.monotonic()
        if now - self._woken_at >= WAKE_EVERY_S:
            self._woken_at = now
            self._send(b"w\n")

    @property
    def behind(self) -> int:
        """Events on disk that MLflow does not show yet."""
        return max(0, self._lines.count() - self.done)

    def close(self, timeout_s: float = 20.0, *,
              report: Callable[[int, int, float | None], None] | None = None,
              stop: Callable[[], bool] | None = None) -> int:
        """``Projector.close``, in the child: project what is left, then stop; returns
        the events MLflow still lacks. ``report(written, of, seconds_left)`` every 50 ms
        while it waits; ``stop()`` ends the wait (the child is told, and exits)."""
        began, first, stopped = time.monotonic(), self.done, False
        os.set_blocking(self._stdin, True)
        self._send(f"c {timeout_s}\n".encode())
        while self._left is None and self._child.poll() is None:
            if not stopped and stop is not None and stop():
                stopped = True
                self._send(b"s\n")
            if report is not None and not stopped:
                now, behind = time.monotonic(), self.behind
                rate = (self.done - first) / (now - began) if now > began else 0.0
                report(self.done, self.done + behind, behind / rate if rate > 0 else None)
            time.sleep(REPORT_EVERY_S)
        self._finish()
        left = self.behind
        if self._left is None:
            log.warning("the MLflow projector's process ended (exit %s) before it was"
                        " done", self._child.returncode)
        if left and report is None:
            log.warning("%d journal events are not in MLflow at %s yet; `nestor resume %s`"
                        " (or the next driver on it) sends them", left, self.uri,
                        self.run_dir)
        return left

    # -- talking to the child --------------------------------------------------------------

    def _send(self, line: bytes) -> None:
        with contextlib.suppress(BlockingIOError, BrokenPipeError, OSError):
            os.write(self._stdin, line)  # full pipe: the child has wakes enough

    def _read(self, stdout: IO[bytes]) -> None:
        for raw in stdout:
            words = raw.split()
            if len(words) == 2 and words[0] == b"done":
                self.done = max(self.done, int(words[1]))
            elif len(words) == 3 and words[0] == b"closed":
                self.done = max(self.done, int(words[2]))
                self._left = int(words[1])

    def _finish(self) -> None:
        with contextlib.suppress(OSError):
            assert self._child.stdin is not None
            self._child.stdin.close()  # end of input: a child still waiting stops now
        try:
            self._child.wait(timeout=EXIT_WAIT_S)
        except subprocess.TimeoutExpired:
            log.warning("the MLflow projector's process did not exit; killed (the next"
                        " driver on %s projects what it had not)", self.run_dir)
            self._child.kill()
            self._child.wait()
        self._reader.join(timeout=1.0)


_prestarted: subprocess.Popen[bytes] | None = None  # a child not given its run yet


def prestart() -> None:
    """Start the projector's process now, ahead of the run it will serve (module
    docstring); ``start_projector`` gives it the run. Where it cannot be started,
    ``start_projector`` tries again (and falls back to a thread)."""
    global _prestarted
    if _prestarted is None:
        with contextlib.suppress(OSError):
            _prestarted = _spawn()


def discard_prestarted() -> None:
    """End the prestarted child if no run took it (the spec was refused, or the run
    ended before its projector started): in a process that goes on (the Python API,
    a notebook) it would otherwise wait there, and be given a later run from the
    environment of this one."""
    _end(_take_prestarted())


def _take_prestarted() -> subprocess.Popen[bytes] | None:
    """The prestarted child, still running, for the caller to give a run to (None:
    none)."""
    global _prestarted
    child, _prestarted = _prestarted, None
    if child is not None and child.poll() is not None:
        return None
    return child


def _spawn() -> subprocess.Popen[bytes]:
    # -P: the driver's working directory is not put on the child's import path (a
    # user's logging.py or mlflow.py there is not imported in MLflow's place).
    return subprocess.Popen([sys.executable, "-P", "-m", __name__], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, close_fds=True)


def _end(child: subprocess.Popen[bytes] | None) -> None:
    """End a child given no run: its input closed, it exits at once."""
    if child is None:
        return
    with contextlib.suppress(OSError):
        assert child.stdin is not None
        child.stdin.close()
    try:
        child.wait(timeout=EXIT_WAIT_S)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()


def start_projector(run_dir: Path, workflow: Any) -> Any:
    """The driver's projector: in a child process (``ProjectorProcess``), or where one
    cannot be started (no fork left, a Python that cannot run it), in a thread."""
    try:
        return ProjectorProcess(run_dir, workflow)
    except (OSError, pickle.PicklingError, TypeError, AttributeError) as exc:
        from nestor.orchestrator.projections.projector import Projector

        log.warning("MLflow is written from the driver's own process (%s)", exc)
        return Projector(run_dir, workflow, warm=True)



# -- the child ---------------------------------------------------------------------------


def _load_ahead() -> None:
    """Import what the projector will need (MLflow's client and SQL store, SQLAlchemy,
    matplotlib) before its run is known; what fails here is said when it is used."""
    with contextlib.suppress(Exception):
        from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore  # noqa: F401
        from mlflow.tracking import MlflowClient  # noqa: F401
    with contextlib.suppress(Exception):
        from nestor.orchestrator.projections import plots

        plots.warm()


def _child() -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the driver says when to stop
    # Loaded in a thread, so that a driver that ends before it sends the run (its spec
    # refused) ends this process at once, not after the imports.
    ahead = threading.Thread(target=_load_ahead, name="nestor-mlflow-load-ahead", daemon=True)
    ahead.start()
    stdin = sys.stdin.buffer
    head = stdin.read(8)
    if len(head) < 8:  # the driver ended before it sent the run: nothing to do
        return 0
    payload = stdin.read(int.from_bytes(head, "big"))
    ahead.join()  # no two threads importing at once (Python's import locks may deadlock)
    run_dir, journal_file, level, workflow = pickle.loads(payload)
    # Warnings said as the driver says them (Python's last-resort handler: the message
    # alone, on stderr, shared with the driver), at the driver's level.
    logging.getLogger("nestor").setLevel(level)
    from nestor.orchestrator.projections.plot_helper import PlotHelper
    from nestor.orchestrator.projections.projector import Projector

    # Forked now, with everything loaded and no other thread yet (plot_helper).
    helper = PlotHelper.start()
    projector = Projector(Path(run_dir), workflow, journal_file=journal_file, warm=True,
                          plot_helper=helper)
    said = threading.Lock()
    close_for: list[float] = []
    asked, stopping, ended = threading.Event(), threading.Event(), threading.Event()

    def say(line: str) -> None:
        with said, contextlib.suppress(OSError, ValueError):
            sys.stdout.write(line)
            sys.stdout.flush()

    def listen() -> None:
        for raw in stdin:
            words = raw.split()
            if words == [b"w"]:
                projector.wake()
            elif words == [b"s"]:
                stopping.set()
            elif len(words) == 2 and words[0] == b"c":
                close_for.append(float(words[1]))
                asked.set()
        stopping.set()  # the driver is gone (or done): stop waiting at once
        asked.set()

    def tell() -> None:
        shown = -1
        while not ended.wait(REPORT_EVERY_S):
            if projector.done != shown:
                shown = projector.done
                say(f"done {shown}\n")

    def tick() -> None:
        while not ended.wait(CHILD_WAKES_EVERY_S):
            projector.wake()

    for target in (listen, tell, tick):
        threading.Thread(target=target, daemon=True).start()
    asked.wait()
    left = projector.close(close_for[0] if close_for else 5.0,
                           report=lambda *_: None, stop=stopping.is_set)
    ended.set()
    if helper is not None:
        helper.close()
    say(f"closed {left} {projector.done}\n")
    return 0


if __name__ == "__main__":
    code = _child()
    logging.shutdown()
    # Not the interpreter's own exit: its listening thread still reads stdin, which the
    # interpreter's shutdown would wait for (a fatal error, seen), and the projector has
    # closed its store already.
    os._exit(code)
