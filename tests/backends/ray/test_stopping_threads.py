"""A workflow run in a thread (tests, a notebook's background run) after a run in the
main thread installed nestor's stop handlers: taking the signals back after a backend
starts is the main thread's job only, never a ValueError that fails the run (seen as
test_simulated failing after an in-process `nestor run` earlier in the same process)."""

from __future__ import annotations

import signal
import threading

from nestor.orchestrator.backends import stopping


def test_reinstalling_the_handlers_off_the_main_thread_is_a_no_op() -> None:
    saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1)}
    try:
        stopping.install_handlers()
        failed: list[BaseException] = []

        def run() -> None:
            try:
                stopping.reinstall_handlers()
            except BaseException as exc:
                failed.append(exc)

        thread = threading.Thread(target=run)
        thread.start()
        thread.join(10)
        assert not failed, failed
        assert signal.getsignal(signal.SIGTERM) is stopping._on_signal  # the main's stay
    finally:
        for signum, handler in saved.items():
            signal.signal(signum, handler)
        stopping._installed = False
