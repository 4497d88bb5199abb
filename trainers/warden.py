"""A command's process group ends with the rank that started it.

A command trial runs in a session of its own (so that its whole group, launcher
and ranks, can be ended with one ``killpg``). When the rank's Ray worker dies
without running its own code (SIGKILL by a person, Ray's memory monitor or the
kernel's OOM killer), nothing ends that group: the command is re-parented to
PID 1 and runs on beside the retry of the same trial, in the same checkpoint
folder, on the same GPU. ``PR_SET_PDEATHSIG`` would end the command's first
process only, not what it started.

So each command gets a warden: a ``/bin/sh`` in a session of its own, reading a
pipe whose writing end only the rank holds. The rank's death, however it comes,
closes that end; the warden reads end-of-file and kills the command's group.
When the command ends normally the rank says so first (a line on the pipe) and
the warden leaves without killing anything: by then the group's number may be
another's.
"""

from __future__ import annotations

import contextlib
import subprocess
from typing import IO

# $0 is the group to end: the read fails only at end-of-file without a line. (No "--":
# dash's kill takes none; "-N" after the signal is the group N, in dash and bash.)
WARDEN_SCRIPT = 'IFS= read -r _done || kill -9 "-$0" 2>/dev/null; exit 0'


class Warden:
    """Watches the process group ``pgid`` for as long as this process lives."""

    def __init__(self, pgid: int) -> None:
        self.pgid = pgid
        self._pipe: IO[bytes] | None = None
        try:
            warden = subprocess.Popen(
                ["/bin/sh", "-c", WARDEN_SCRIPT, str(pgid)], stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        except OSError:  # no /bin/sh: the group is ended by this process's own code only
            return
        self._process = warden
        self._pipe = warden.stdin

    def release(self) -> None:
        """The group has ended (or been killed) here: the warden leaves it alone."""
        if self._pipe is None:
            return
        with contextlib.suppress(OSError):  # a warden already gone
            self._pipe.write(b"done\n")
            self._pipe.flush()
        with contextlib.suppress(OSError):
            self._pipe.close()
        self._pipe = None
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._process.wait(timeout=5)
