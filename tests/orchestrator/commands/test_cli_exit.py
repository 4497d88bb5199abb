"""The command's exit: no garbage collection of the whole heap once it is done.

Python's teardown searched every object the command had imported or built for
cycles: 6 to 11 s after a trivial sweep's last word on a busy machine."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def test_the_heap_is_frozen_before_python_tears_it_down() -> None:
    script = textwrap.dedent("""
        import atexit, gc, sys

        # Registered before the command: run after every handler the command registers.
        atexit.register(lambda: print(f"frozen {gc.get_freeze_count()}", flush=True))
        from nestor.orchestrator.commands.cli import main

        sys.argv = ["nestor", "--help"]
        main()
        """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Usage: nestor" in done.stdout  # the command ran, and said what it says
    frozen = int(done.stdout.rsplit("frozen ", 1)[1].split()[0])
    assert frozen > 10_000, f"only {frozen} objects frozen at exit"
