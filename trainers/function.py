"""User trainers written as a Python function ``module:function(config, ctx)``.

The function runs in every rank of the trial's gang, like a built-in
trainer, and gets a `TrialContext`: where it sits (rank, size, dp/mp ranks,
Horovod process sets), a ``report(metrics, step)`` for per-epoch metrics,
``should_stop()`` for early stopping, and a checkpoint directory. It
returns a dict of final metrics (or None: the last report is used)::

    def train(config, ctx):
        for epoch in range(config["epochs"]):
            ...
            ctx.report({"val_accuracy": acc}, step=epoch + 1)
            if ctx.should_stop():
                break
        return {"val_accuracy": acc, "test_accuracy": test_acc}

``config`` is the trial's settings updated with its hyperparameters.

Checkpoints (what PBT, ASHA/Hyperband promotions, a replayed schedule and
transfer need; declare them with ``trainer: {checkpoints: true}``): save into
the folder ``ctx.checkpoint_dir`` (it exists); any file left there is the
trial's checkpoint. At the start, load your own if that folder already holds one
(a retried attempt), else the folder ``ctx.continue_from`` when it is set (the
trial carries on from another's: weights, optimizer, epochs so far; train on up
to ``config["epochs"]``), else ``ctx.init_from`` when set (transfer: a
pretrained folder, or a tuple of several). Ensembles (``predictions: true``):
also write ``predictions.npz`` there (trainers.outputs). ``ctx.data_split`` is
what to train on: ``train``, or ``train+val`` (a train stage's ``data:``).

What else goes into the trial's MLflow run (trainers.logged): ``ctx.log_metrics(
{"loss": 0.3}, step=3)`` (step None: each metric's next, from 0),
``ctx.set_tags({"arch": "mlp"})`` and ``ctx.log_artifact("confusion.png")``,
which copies the file into the trial's artifact folder ``ctx.artifact_dir``
(files written there directly count too). Only rank 0's count. They reach
MLflow through the journal with the trial's end, exactly once.
"""

from __future__ import annotations

import contextlib
import importlib
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from nestor.trainers._types import (
    Heartbeat,
    Report,
    ResultStatus,
    ShouldStop,
    TrialRequest,
    TrialResult,
)
from nestor.trainers.gpu import device_metrics, select_device, surely_cpu
from nestor.trainers.history import BoundedHistory
from nestor.trainers.logged import Logged, copy_artifact, prepare_artifacts
from nestor.trainers.outputs import left_checkpoint, prepare_folder
from nestor.trainers.parallel import Parallel, broadcast_flag


def resolve_function(path: str) -> Callable[..., Any]:
    """Import ``package.module:function``, saying what is wrong if it cannot."""
    module_name, _, attr = path.partition(":")
    if not module_name or not attr:
        raise ValueError(f"function must look like 'package.module:function', but got {path!r}")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(f"function {path!r}: cannot import module {module_name!r}: {exc}") from exc
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise ValueError(f"function {path!r}: module {module_name!r} has no function {attr!r}")
    return fn


def shipped_function(code: bytes) -> Callable[..., Any]:
    """A function shipped by value (cloudpickle's bytes, which the standard unpickler
    reads where cloudpickle is installed, as it is beside Ray): one defined in the
    driver's ``__main__`` or notebook, which no worker could import by name."""
    import pickle

    fn = pickle.loads(code)  # the user's own function, from the user's own run directory
    if not callable(fn):
        raise ValueError(f"the shipped trainer is a {type(fn).__name__}, not a function")
    return fn


@dataclass
class TrialContext:
    """What a user trainer function knows about its trial (one per rank).

    ``backend`` is what the ranks communicate over (``horovod`` or ``torch``;
    None in a plain single process) and ``comm`` its collectives
    (trainers.comm: ``allreduce_sum``, ``allgather``, ``broadcast_``...).
    ``dp_set``/``mp_set`` are its groups for collectives inside the data- or
    model-parallel group (None when the group has one rank): Horovod process
    sets or torch.distributed groups. ``hvd`` is ``horovod.torch`` on the
    Horovod backend (None otherwise), for code that calls Horovod itself.
    ``device`` is the rank's own device, already made current (``cuda:<local
    rank>`` on a GPU node, so eight ranks use eight GPUs; the CPU elsewhere):
    put the model and batches there.
    :meth:`distribute` makes a model and optimizer data-parallel on either.
    """

    trial_id: str
    par: Parallel
    checkpoint_dir: str | None
    init_from: str | tuple[str, ...] | None
    log_dir: str | None
    _report: Report | None = None
    _should_stop: ShouldStop | None = None
    _heartbeat: Heartbeat | None = None
    # every report's metrics, thinned beyond MAX_HISTORY rows (trainers.history)
    history: list[dict[str, float]] = field(default_factory=BoundedHistory)
    _stopped: bool = False
    # the checkpoint of the trial this one carries on from (PBT, promotions): load it
    # when checkpoint_dir holds none of this trial's own yet
    continue_from: str | None = None
    # this rank's own device, already current (torch.cuda.set_device(local rank)), read
    # through ``device``; None until first asked where the rank can only have the CPU
    # (gpu.surely_cpu), so a trial that never uses torch does not import it
    _device: Any = None
    # what to train on: the training split, or train+val (a train stage's data:)
    data_split: str = "train"
    # the trial's artifact folder: its files end up in the trial's MLflow run
    artifact_dir: str | None = None
    _logged: Logged = field(default_factory=Logged)

    @property
    def device(self) -> Any:
        """This rank's own torch device, already current: ``model.to(ctx.device)``
        (``cuda:<local rank>`` on a GPU node, the CPU where the rank holds no GPU)."""
        if self._device is None:
            self._device = select_device(self.par)
        return self._device

    @property
    def rank(self) -> int:
        return self.par.rank

    @property
    def size(self) -> int:
        return self.par.size

    @property
    def local_rank(self) -> int:
        return self.par.local_rank

    @property
    def dp_rank(self) -> int:
        return self.par.dp_rank

    @property
    def dp_size(self) -> int:
        return self.par.dp

    @property
    def mp_rank(self) -> int:
        return self.par.mp_rank

    @property
    def mp_size(self) -> int:
        return self.par.mp

    @property
    def dp_set(self) -> Any:
        return self.par.dp_set

    @property
    def mp_set(self) -> Any:
        return self.par.mp_set

    @property
    def hvd(self) -> Any:
        return self.par.hvd

    @property
    def backend(self) -> str | None:
        return self.par.backend

    @property
    def comm(self) -> Any:
        return self.par.comm

    def distribute(self, model: Any, optimizer: Any, *, fp16: bool = False) -> tuple[Any, Any]:
        """Data parallelism on whichever backend the trial runs: returns (what to call
        forward on, what to step). Gradients are averaged over the data-parallel group
        (Horovod's DistributedOptimizer, or torch's DistributedDataParallel) and every
        rank starts from its group root's weights. Unchanged when dp is 1."""
        if self.par.dp == 1 or self.par.comm is None:
            return model, optimizer
        comm = self.par.comm
        for name, tensor in sorted(model.state_dict().items()):
            comm.broadcast_(tensor, self.par.dp_root, self.par.dp_set, f"ctx.bcast.{name}")
        named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
        return comm.data_parallel(model, optimizer, named, self.par.dp_set, fp16)

    def report(self, metrics: dict[str, float], step: int) -> None:
        """Record per-epoch metrics; rank 0 passes them on to the orchestrator."""
        clean = {str(k): float(v) for k, v in metrics.items()}
        self.heartbeat()
        kept = self.history.append({"step": float(step), **clean})
        if kept is not False and self.par.is_root and self._report is not None:
            self._report(clean, int(step))  # the rows kept: the pruner's memory is bounded too

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        """Log metrics into the trial's MLflow run at ``step`` (None: each metric's
        next step, 0, 1, ...), beside what ``report`` sends: a loss per batch, a
        per-class score. Not seen by the search. Each metric keeps at most
        ``trainers.logged.MAX_POINTS`` points (thinned evenly). A bad name raises
        ValueError; rank 0's count."""
        if self.par.is_root:
            self._logged.log_metrics(metrics, step)

    def set_tags(self, tags: dict[str, Any]) -> None:
        """Set tags on the trial's MLflow run (names starting ``nestor.`` or
        ``mlflow.`` are refused); rank 0's count."""
        if self.par.is_root:
            self._logged.set_tags(tags)

    def log_artifact(self, path: str, name: str | None = None) -> str | None:
        """Copy the file ``path`` into the trial's artifact folder (as ``name``,
        default its own name; ``plots/a.png`` makes a subfolder): it becomes an
        artifact of the trial's MLflow run, and lives in the run directory. Returns
        the copy's path (rank 0; other ranks copy nothing and get None)."""
        if not self.par.is_root:
            return None
        return copy_artifact(path, self.artifact_dir, name)

    def heartbeat(self) -> None:
        """Tell the orchestrator this trial is making progress (``report`` does too).

        A trial that neither reports nor beats for ``trial.progress_timeout``
        seconds is killed as hung; call it in long stretches between reports."""
        if self.par.is_root and self._heartbeat is not None:
            self._heartbeat()

    def should_stop(self) -> bool:
        """Whether the orchestrator wants this trial stopped (rank 0 decides).

        Collective when the trial has several ranks: call it on every rank at
        the same point (e.g. at the end of each epoch).
        """
        wants = bool(self._should_stop()) if (self.par.is_root and self._should_stop) else False
        reports = getattr(self.history, "seen", len(self.history))  # the same on every rank
        stop = broadcast_flag(wants, self.par, f"ctx.should_stop.{reports}")
        self._stopped = self._stopped or stop
        return stop


def run_function(request: TrialRequest, par: Parallel, report: Report | None,
                 should_stop: ShouldStop | None,
                 heartbeat: Heartbeat | None = None) -> TrialResult:
    """Call the user's function in this rank; its return value becomes the metrics."""
    started = time.perf_counter()
    fn = shipped_function(request.trainer.code) if request.trainer.code else \
        resolve_function(request.trainer.function or "")
    device = None if surely_cpu() else select_device(par)
    ctx = TrialContext(request.trial_id, par, request.checkpoint_dir, request.init_from,
                       request.log_dir, report, should_stop, _heartbeat=heartbeat,
                       continue_from=request.continue_from, _device=device,
                       data_split=request.data_split, artifact_dir=request.artifact_dir)
    config = {**request.settings, **request.config}
    prepare_folder(request.checkpoint_dir)
    if par.is_root:
        prepare_artifacts(request.artifact_dir)
    try:
        returned = fn(config, ctx)
    except Exception as exc:  # what it logged before it failed goes with the failure
        with contextlib.suppress(Exception):
            exc.nestor_logged = logged(ctx, request, par)  # type: ignore[attr-defined]
        raise
    if returned is None:
        metrics = {k: v for k, v in (ctx.history[-1] if ctx.history else {}).items()
                   if k != "step"}
    elif isinstance(returned, dict):
        try:
            metrics = {str(k): float(v) for k, v in returned.items()}
        except (TypeError, ValueError) as exc:
            raise ValueError(f"function {request.trainer.function} must return a dict of numbers,"
                             f" but got {returned!r}") from exc
    else:
        raise ValueError(f"function {request.trainer.function} must return a dict of metrics or"
                         f" None, but got {type(returned).__name__}")
    metrics.setdefault("wall_time", time.perf_counter() - started)
    for key, value in device_metrics(ctx._device).items():
        metrics.setdefault(key, value)
    bad = sorted(k for k, v in metrics.items() if not math.isfinite(v))
    status = ResultStatus.OK
    reason: str | None = None
    if bad:
        status = ResultStatus.FAILED
        reason = f"function returned non-finite metrics: {', '.join(bad)}"
    # Whatever the function left in its folder is the trial's checkpoint (rank 0's
    # result is the trial's; other ranks leave the folder to it).
    checkpoint = left_checkpoint(request.checkpoint_dir) if par.is_root else None
    return TrialResult(trial_id=request.trial_id, status=status, reason=reason, metrics=metrics,
                       history=ctx.history, stopped_early=ctx._stopped, checkpoint=checkpoint,
                       logged=logged(ctx, request, par))


def logged(ctx: TrialContext, request: TrialRequest, par: Parallel) -> dict[str, Any]:
    """What the trial logged (rank 0's: the trial's result is rank 0's)."""
    return ctx._logged.record(request.artifact_dir) if par.is_root else {}
