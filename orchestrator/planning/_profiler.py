"""The profiling step: a few real training steps at each candidate shape.

Each shape is one short job of real ranks (``horovodrun --gloo``, or
``torchrun`` for a stage on the torch backend, or a plain process for 1 x 1)
running ``python -m trainers.probe``; every rank gets one
thread (``OMP_NUM_THREADS=1``), as a slot is one core: that is how a trial's
ranks run under Ray too. The shapes profiled are the small ones that fit the
slots at hand; the cost model predicts the rest. Results are cached (see
_profile.py) so a later plan, validate or resume does not profile again.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ._profile import CommSample, Profile, StepSample, cost_options, load, machine, profile_key
from ._profile import save as save_profile

REPO = Path(__file__).resolve().parents[2]
DEFAULT_BATCHES = (16, 64, 128)


class ProfileError(RuntimeError):
    """A probe job failed; the message carries its output's tail."""


def default_shapes(slots: int, max_mp: int = 2) -> list[tuple[int, int]]:
    """1x1, then 2x1 and 1x2 where two slots exist: the fewest shapes that identify
    compute, the data-parallel allreduce and the model-parallel gathers."""
    shapes = [(1, 1)]
    if slots >= 2:
        shapes.append((2, 1))
        if max_mp >= 2:
            shapes.append((1, 2))
    return shapes


def run_argv(argv: list[str], *, env: Mapping[str, str], timeout: float) -> tuple[int, str]:
    """The one place the planner starts a program: an argv list, never a shell.

    The program runs in its own session; on a timeout its whole process
    group is killed (horovodrun leaves ranks otherwise).
    """
    import signal

    proc = subprocess.Popen(argv, cwd=REPO, env=dict(env), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(proc.pid, sig)
                proc.wait(10)
                break
            except (ProcessLookupError, subprocess.TimeoutExpired):
                continue
        out, _ = proc.communicate()
        return 124, out
    return proc.returncode, out


def rank_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env["OMP_NUM_THREADS"] = "1"  # one slot, one core
    return env


def launcher_argv(ranks: int, module_args: list[str], backend: str = "horovod") -> list[str]:
    """``python -m ...`` as ``ranks`` ranks over Gloo on this machine: Horovod's, or
    torch.distributed's (torchrun)."""
    if ranks == 1:
        return [sys.executable, *module_args]
    from nestor.trainers.comm import comm_class

    return comm_class(backend).launcher(ranks, module_args)


def probe_shape(trainer: str, settings: Mapping[str, Any], config: Mapping[str, Any],
                dp: int, mp: int, batches: Sequence[int], *, steps: int = 5, warmup: int = 2,
                timeout: float = 300, backend: str = "horovod") -> dict[str, Any]:
    """Run the probe as dp x mp real ranks; return rank 0's measurements."""
    with tempfile.TemporaryDirectory(prefix="nestor-probe-") as tmp:
        job_path, out_path = Path(tmp) / "job.json", Path(tmp) / "out.json"
        job_path.write_text(json.dumps({
            "trainer": trainer, "settings": dict(settings), "config": dict(config),
            "dp": dp, "mp": mp, "batches": list(batches), "steps": steps, "warmup": warmup,
            "backend": backend,
        }))
        argv = launcher_argv(dp * mp, ["-m", "nestor.trainers.probe", str(job_path), str(out_path)],
                             backend)
        code, out = run_argv(argv, env=rank_env(), timeout=timeout)
        if code != 0 or not out_path.is_file():
            raise ProfileError(
                f"profiling {trainer} at {dp}x{mp} failed (exit {code}):\n{out[-3000:]}")
        return json.loads(out_path.read_text())


def profile(trainer: str, options: Mapping[str, Any], *, shapes: Sequence[tuple[int, int]],
            batches: Sequence[int] = DEFAULT_BATCHES, steps: int = 8,
            repeats: int = 2, places: Sequence[Path] = (), refresh: bool = False,
            echo: Callable[[str], None] | None = None, backend: str = "horovod") -> Profile:
    """The profile of ``trainer`` with ``options`` at ``shapes``: from the cache, or measured.

    ``options`` are the trainer's settings and fixed hyperparameters (what a
    trial would get); only the cost-relevant ones are passed to the probe.
    """
    info = machine(backend)
    key = profile_key(trainer, options, info, batches)
    if not refresh:
        cached = load(key, places)
        if cached is not None and set(shapes) <= set(cached.shapes):
            return cached
    started = time.perf_counter()
    probe_options = cost_options(options)
    best: dict[tuple[int, int, int], StepSample] = {}
    comm: dict[tuple[str, int, int], CommSample] = {}
    train_samples = 0
    # Shapes interleaved, each ``repeats`` times, the fastest kept: a shared
    # machine's passing load then spoils one repeat, not a whole shape.
    for _ in range(repeats):
        for dp, mp in sorted(set(shapes)):
            if echo is not None:
                echo(f"profiling {trainer} at dp {dp} x mp {mp} (batches {list(batches)})")
            got = probe_shape(trainer, probe_options, {}, dp, mp, batches, steps=steps,
                              backend=backend)
            train_samples = int(got["train_samples"])
            for row in got["rows"]:
                sample = StepSample(
                    dp=dp, mp=mp, batch=int(row["batch"]), compute_s=float(row["compute_s"]),
                    gather_s=float(row["gather_s"]), allreduce_s=float(row["allreduce_s"]),
                    step_s=float(row["step_s"]),
                    peak_memory_bytes=int(row["peak_memory_bytes"]))
                key3 = (dp, mp, sample.batch)
                if key3 not in best or sample.step_s < best[key3].step_s:
                    best[key3] = sample
            for c in got["comm"]:
                point = CommSample(c["kind"], int(c["ranks"]), int(c["bytes"]),
                                   float(c["seconds"]))
                ckey = (point.kind, point.ranks, point.bytes)
                if ckey not in comm or point.seconds < comm[ckey].seconds:
                    comm[ckey] = point
    steps_out = [best[k] for k in sorted(best)]
    result = Profile(key=key, trainer=trainer, options=probe_options, machine=info,
                     steps=tuple(steps_out), comm=tuple(comm[k] for k in sorted(comm)),
                     train_samples=train_samples,
                     seconds_spent=round(time.perf_counter() - started, 3),
                     notes=[f"load average at the end: {os.getloadavg()[0]:.2f}"])
    save_profile(result, places)
    return result
