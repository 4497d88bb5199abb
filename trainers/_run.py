"""`run_trial`: the one entry point the orchestrator calls, in every rank of a gang."""

from __future__ import annotations

import contextlib
import os
import time
import traceback
from collections.abc import Iterator, Mapping

from nestor.trainers._types import (
    Heartbeat,
    Report,
    ResultStatus,
    ShouldStop,
    TrialRequest,
    TrialResult,
)


def run_trial(request: TrialRequest, *, report: Report | None = None,
              should_stop: ShouldStop | None = None,
              heartbeat: Heartbeat | None = None) -> TrialResult:
    """Run one trial in this process and return how it ended; never raises for the trial's faults.

    Built-in and function trainers: call it in **every rank** of a gang of
    ``request.data_parallel * request.model_parallel`` ranks (Horovod, or
    torch.distributed with ``request.backend="torch"``), at the same time,
    with the same request (a plain single process when both are 1). It
    initialises the backend once per process and the groups a shape needs
    once per shape, so a warm gang may run trial after trial::

        executor = horovod.ray.RayExecutor(settings, num_workers=dp * mp)
        executor.start()
        results = executor.run(trainers.run_trial, args=[request])  # one per rank
        result = results[0]                                          # rank 0's

    ``report(metrics, step)`` is called on rank 0 after each epoch; pass
    the orchestrator's callback (it must be picklable for Ray, e.g. an actor
    handle's method). ``should_stop()`` is asked on rank 0 after each epoch;
    its answer is broadcast so all ranks stop together. ``heartbeat()`` is
    called on rank 0 as training makes progress (each batch; each output line
    of a command), so that a hung trial is found without a trial timeout.

    Command trainers run once, as a subprocess of rank 0 (of the calling process
    when there is no gang): the command starts its own ranks (``horovodrun``,
    ``torchrun``, ``srun``) on the slots the gang holds, so the other ranks
    return at once, holding their slots until the trial ends. A command that
    names ``{node_rank}`` runs once per node instead, on each node's first rank.
    Every rank returns a result; rank 0's carries the metrics, and is first
    written to ``request.result_path`` when one is given. Failures (bad
    options, missing data, a crashing user function, a diverging loss) come
    back as ``status=ResultStatus.FAILED`` with a one-line ``reason`` and the traceback
    in ``details``.
    """
    started = time.perf_counter()
    with trial_env(request.env):
        result, rank = _run_kind(request, report, should_stop, heartbeat, started)
    if request.result_path and rank == 0:
        from nestor.durable import write_json_durably

        try:
            write_json_durably(request.result_path, result.to_dict())
        except OSError as exc:  # a full or lost disk: the result still goes back by Ray
            result = TrialResult(
                trial_id=request.trial_id, status=ResultStatus.FAILED,
                reason=f"could not write the result file {request.result_path}: {exc}",
                metrics=result.metrics, history=result.history, details=traceback.format_exc())
    return result


def _run_kind(request: TrialRequest, report: Report | None, should_stop: ShouldStop | None,
              heartbeat: Heartbeat | None, started: float) -> tuple[TrialResult, int]:
    """The trial by its trainer's kind, and this process's rank; failures as results."""
    rank = 0
    try:
        if request.trainer.kind == "command":
            from nestor.trainers.command import run_command_rank

            rank = command_rank()
            # A launcher runs in rank 0 (once per node where it names {node_rank}); the
            # ranks it starts use the slots the others hold.
            result = run_command_rank(request, rank, report, should_stop, heartbeat)
        else:
            from nestor.trainers.parallel import setup

            par = setup(request.data_parallel, request.model_parallel, request.backend)
            rank = par.rank
            if request.trainer.kind == "builtin":
                from nestor.trainers.builtin import run_builtin

                result = run_builtin(request, par, report, should_stop, heartbeat)
            else:
                from nestor.trainers.function import run_function

                result = run_function(request, par, report, should_stop, heartbeat)
    except Exception as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        if type(exc).__name__ not in ("TrialFailed", "ValueError", "DatasetError",
                                       "GpuUnusable"):
            reason = f"{type(exc).__name__}: {reason}"
        result = TrialResult(
            trial_id=request.trial_id, status=ResultStatus.FAILED, reason=reason,
            metrics={"wall_time": time.perf_counter() - started},
            details=traceback.format_exc(), repeats=error_repeats(exc),
            logged=getattr(exc, "nestor_logged", None) or {},  # a function's, before it failed
        )
    return result, rank


# Errors a rerun of the same trial meets again: code that does not import or parse, a
# file that is not there. (A ValueError raised from one, as resolving a trainer
# function's module does, counts as it.)
REPEATING_ERRORS = (ImportError, SyntaxError, FileNotFoundError)


def error_repeats(exc: BaseException) -> bool:
    """Would a rerun fail with this error again (so retrying it only costs slots)?

    >>> error_repeats(ModuleNotFoundError("no module named 'sklearn'"))
    True
    >>> error_repeats(RuntimeError("NCCL error: unhandled system error"))
    False
    """
    return isinstance(exc, REPEATING_ERRORS) or isinstance(exc.__cause__, REPEATING_ERRORS)


@contextlib.contextmanager
def trial_env(env: Mapping[str, str]) -> Iterator[None]:
    """``env`` set in this process while a trial runs, and put back after: a warm
    gang's next trial (another stage's) does not inherit it."""
    saved = {name: os.environ.get(name) for name in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def command_rank() -> int:
    """This process's rank in its gang (0 outside one): the gang's ranks carry it
    from their start (``HOROVOD_RANK``; ``NESTOR_GANG_RANK`` in a torch gang), before
    any backend is initialised."""
    from nestor.trainers.comm import RANK_ENV

    return int(os.environ.get("HOROVOD_RANK") or os.environ.get(RANK_ENV) or 0)
