"""A command's process group ends with the rank that started it.

A command trial runs in a session of its own (so that its whole group, launcher
and ranks, can be ended with one ``killpg``). When the rank's Ray worker dies
without running its own code (SIGKILL by a person, Ray's memory monitor or the
kernel's OOM killer), nothing ends that group: the command is re-parented to
PID 1 and runs on beside the retry of the same trial, in the same checkpoint
folder, on the same GPU. ``PR_SET_PDEATHSIG`` would end the command's first
process only, not what it started.

So the rank's process keeps a warden: a ``/bin/sh`` in a session of its own,
reading a pipe whose writing end only this process holds. Each command's group is
named to it when the command starts (``watch N``) and again when it has ended
(``done N``: by then the number may be another's). The process's death, however it
comes, closes the pipe; the warden reads end-of-file and kills every group still
watched. One warden serves every trial the rank runs: a warden per trial cost each
trial a ``/bin/sh`` started and waited for, about a millisecond and a half of a
trivial command trial's few.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import threading
from typing import IO

# The groups watched, space-separated in $w (no other process is started: a builtin
# shell's parameter expansions alone). At end-of-file each one left is killed. (No
# "--": dash's kill takes none; "-N" after the signal is the group N, in dash and bash.)
WARDEN_SCRIPT = """w=' '
while IFS= read -r line; do
  case $line in
    'watch '*) w="$w${line#watch } " ;;
    'done '*) g=${line#done }
      case $w in *" $g "*) w="${w%% $g *} ${w#* $g }" ;; esac ;;
  esac
done
for g in $w; do kill -9 "-$g" 2>/dev/null; done
exit 0"""


class _Keeper:
    """This process's warden: started on the first command, again if it is gone."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.pid = -1  # the process that started it (a fork must start its own)
        self.pipe: IO[bytes] | None = None
        self.process: subprocess.Popen[bytes] | None = None

    def say(self, line: str) -> bool:
        """Send ``line`` to the warden, starting one if this process has none; False
        where no warden can run (no /bin/sh)."""
        with self.lock:
            for _attempt in range(2):
                if (self.pipe is None or self.pid != os.getpid()) and not self._start():
                    return False
                try:
                    assert self.pipe is not None
                    self.pipe.write(line.encode() + b"\n")
                    self.pipe.flush()
                    return True
                except OSError:  # the warden was killed: a new one, told again
                    self._forget()
            return False

    def _start(self) -> bool:
        try:
            self.process = subprocess.Popen(
                ["/bin/sh", "-c", WARDEN_SCRIPT], stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        except OSError:  # no /bin/sh: the group is ended by this process's own code only
            return False
        self.pipe, self.pid = self.process.stdin, os.getpid()
        return True

    def _forget(self) -> None:
        with contextlib.suppress(OSError):
            if self.pipe is not None:
                self.pipe.close()
        if self.process is not None:
            with contextlib.suppress(OSError):
                self.process.poll()  # reaped if it is gone
        self.pipe = self.process = None


_KEEPER = _Keeper()


class Warden:
    """Watches the process group ``pgid`` for as long as this process lives, or until
    :meth:`release`."""

    def __init__(self, pgid: int) -> None:
        self.pgid = pgid
        self._watched = _KEEPER.say(f"watch {pgid}")

    def release(self) -> None:
        """The group has ended (or been killed) here: the warden leaves it alone."""
        if self._watched:
            _KEEPER.say(f"done {self.pgid}")
            self._watched = False
