"""Real training runs to hold predictions against: `nestor plan --measure` and the bench.

``at_once`` trials of one shape run side by side, each a real Horovod job of
the built-in trainer (``python -m nestor.trainers``, one thread per rank: a slot is
a core), and each reports its epochs' training time. A wave's time is its
slowest trial's; process start-up and data loading are left out, as a warm
gang does not pay them per trial, and so is evaluation, which the cost model
does not predict either.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ._profiler import REPO, launcher_argv, rank_env


@dataclass(frozen=True)
class Wave:
    dp: int
    mp: int
    at_once: int
    epoch_times: tuple[tuple[float, ...], ...]  # per trial, per epoch (seconds)

    @property
    def run_s(self) -> float:
        """The slowest trial's training time: the wave ends when it does."""
        return max(sum(times) for times in self.epoch_times)

    def epoch_s(self, skip_first: bool = True) -> float:
        """Mean epoch time of the slowest trial (its first epoch left out when it had more)."""
        slowest = max(self.epoch_times, key=sum)
        kept = slowest[1:] if skip_first and len(slowest) > 1 else slowest
        return sum(kept) / len(kept)


def trainer_args(options: Mapping[str, Any]) -> list[str]:
    args: list[str] = []
    for key, value in sorted(options.items()):
        if value is not None:
            args += ["--set", f"{key}={json.dumps(value)}"]
    return args


def measure_wave(trainer: str, options: Mapping[str, Any], dp: int, mp: int, at_once: int = 1,
                 *, timeout: float = 600, backend: str = "horovod") -> Wave:
    """Run ``at_once`` trials of dp x mp at the same time; their epochs' times."""
    with tempfile.TemporaryDirectory(prefix="nestor-measure-") as tmp:
        procs = []
        for i in range(at_once):
            out = Path(tmp) / f"trial-{i}.json"
            argv = launcher_argv(dp * mp, [
                "-m", "trainers", "--trainer", trainer, "--quiet", "--json", str(out),
                "--trial-id", f"measure-{i}", "--data-parallel", str(dp),
                "--model-parallel", str(mp), "--backend", backend, *trainer_args(options)],
                backend)
            procs.append((subprocess.Popen(argv, cwd=REPO, env=rank_env(), text=True,
                                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                           start_new_session=True), out))
        deadline = time.monotonic() + timeout
        times = []
        for proc, out in procs:
            try:
                text, _ = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                text, _ = proc.communicate()
            if proc.returncode != 0 or not out.is_file():
                raise RuntimeError(f"measuring {trainer} at {dp}x{mp} failed"
                                   f" (exit {proc.returncode}):\n{text[-3000:]}")
            result = json.loads(out.read_text())
            times.append(tuple(float(h["epoch_time"]) for h in result["history"]))
    return Wave(dp, mp, at_once, tuple(times))
