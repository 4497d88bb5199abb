"""What the orchestrator hands a trial, and what it gets back.

Plain dataclasses of builtins only, so that they pickle across Ray and
Horovod process boundaries and never import torch. The orchestrator builds a
`TrialRequest` from a spec's ``trainer:`` and ``parallel:`` sections plus the
configuration its searcher asked for, and calls `trainers.run_trial` with it
in every rank of a gang.
"""

from __future__ import annotations

import math
import re
import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Literal

DEFAULT_RESULT_PATTERN = r"FoM: (\S+)"
DEFAULT_FLAG_PREFIX = "--"
DATA_SPLITS = ("train", "train+val")  # what a trial may train on

Report = Callable[[dict[str, float], int], None]
ShouldStop = Callable[[], bool]
# Called by rank 0 as it makes progress (cheap: it throttles itself); a driver that
# hears none for a while kills the trial as hung.
Heartbeat = Callable[[], None]


@dataclass(frozen=True)
class TrainerRef:
    """Which trainer a trial runs: a built-in, a Python function, or a command.

    Exactly one of ``name``, ``function`` and ``argv`` is set. Build it with
    the class methods, or with `TrainerRef.from_spec` from an orchestrator
    spec's trainer (anything with the attributes ``name``, ``function``,
    ``argv``/``command``, ``result_pattern`` and ``flag_prefix``)::

        TrainerRef.builtin("cnn")
        TrainerRef.python("mypkg.fit:train")
        TrainerRef.command(["python3", "fit.py"], result_pattern=r"acc=(\\S+)")
    """

    name: str | None = None
    function: str | None = None
    argv: tuple[str, ...] | None = None
    result_pattern: str = DEFAULT_RESULT_PATTERN
    flag_prefix: str = DEFAULT_FLAG_PREFIX
    result_metric: str = "result"
    """Command trainers: the metric name under which the parsed number is
    reported (set it to the objective's metric, e.g. ``val_accuracy``)."""
    code: bytes | None = field(default=None, repr=False, compare=False)
    """Function trainers: the function itself, pickled by value (cloudpickle), for a
    function no worker can import by its name (one defined in a script's
    ``__main__`` or a notebook, given to the Python API)."""

    def __post_init__(self) -> None:
        given = [k for k in ("name", "function", "argv") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(
                "a trainer needs exactly one of name, function, argv, but got "
                + (", ".join(given) or "none")
            )
        if self.function is not None and not re.fullmatch(
            r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*", self.function
        ):
            raise ValueError(
                f"function must look like 'package.module:function', but got {self.function!r}"
            )
        if self.argv is not None:
            if isinstance(self.argv, str):
                raise TypeError("argv must be a sequence of words, but got a string")
            object.__setattr__(self, "argv", tuple(str(word) for word in self.argv))
            if not self.argv or not self.argv[0].strip():
                raise ValueError("a command must name a program, but got an empty command")
        try:
            pattern = re.compile(self.result_pattern)
        except re.error as exc:
            raise ValueError(
                f"result_pattern must be a regular expression, but {self.result_pattern!r}"
                f" does not compile: {exc}"
            ) from None
        if pattern.groups < 1:
            raise ValueError(
                "result_pattern must have a group around the number, e.g. 'FoM: (\\S+)',"
                f" but got {self.result_pattern!r}"
            )

    @property
    def kind(self) -> Literal["builtin", "function", "command"]:
        if self.name is not None:
            return "builtin"
        return "function" if self.function is not None else "command"

    @classmethod
    def builtin(cls, name: str) -> TrainerRef:
        return cls(name=name)

    @classmethod
    def python(cls, function: str) -> TrainerRef:
        return cls(function=function)

    @classmethod
    def command(
        cls,
        command: str | Sequence[str],
        *,
        result_pattern: str | None = None,
        flag_prefix: str | None = None,
        result_metric: str = "result",
    ) -> TrainerRef:
        """A command, given as an argument vector or a string split like a shell would
        (`shlex.split`) -- but it is never run through a shell."""
        argv = shlex.split(command) if isinstance(command, str) else list(command)
        return cls(
            argv=tuple(argv),
            result_pattern=result_pattern or DEFAULT_RESULT_PATTERN,
            flag_prefix=DEFAULT_FLAG_PREFIX if flag_prefix is None else flag_prefix,
            result_metric=result_metric,
        )

    @classmethod
    def from_spec(cls, spec: Any, *, result_metric: str = "result") -> TrainerRef:
        """From an `orchestrator.spec.model.Trainer` (duck-typed: no import)."""
        if getattr(spec, "name", None) is not None:
            return cls.builtin(spec.name)
        if getattr(spec, "function", None) is not None:
            return cls.python(spec.function)
        return cls.command(
            spec.command,
            result_pattern=getattr(spec, "result_pattern", None),
            flag_prefix=getattr(spec, "flag_prefix", None),
            result_metric=result_metric,
        )

    def describe(self) -> str:
        if self.name is not None:
            return self.name
        if self.function is not None:
            return self.function
        return shlex.join(self.argv or ())


@dataclass(frozen=True)
class TrialRequest:
    """Everything one trial needs; the same object goes to every rank.

    ``settings`` are the trainer's fixed settings, ``config`` the
    hyperparameters the searcher chose; for built-in trainers a key may be
    given in either (``config`` wins), so a search may tune ``epochs`` too.

    ``checkpoint_dir``: where rank 0 saves a checkpoint every epoch; if it
    already holds one, the trial resumes from it (a restarted trial).
    ``init_from``: a checkpoint file, or a directory holding checkpoints (its
    latest is used), whose weights start this trial when it has none of its
    own yet; several: the mean of their weights (hierarchical transfer);
    ``init_groups`` limits which layer groups are loaded (None: all)
    and ``freeze`` names groups that are not trained (transfer learning).
    ``continue_from``: a checkpoint (file, or a trial's checkpoint directory) this
    trial carries on from when it has none of its own yet: weights, optimizer
    state, epoch and history (a PBT exploit, a successive-halving promotion);
    it trains on up to its own ``epochs``.
    ``backend``: what the ranks communicate over, ``horovod`` or ``torch``
    (torch.distributed); None: the gang's (``NESTOR_GANG_COMM``), else Horovod.
    ``log_dir``: where a command trainer's stdout and stderr are kept.
    ``workdir``: a command trainer's working directory (default: current).
    ``timeout``: seconds before a command trainer is killed.
    ``result_path``: where rank 0 writes the trial's result (durably) before
    returning it, so a driver killed before it heard the result adopts it on
    resume instead of training again.
    ``data_split``: what the trial trains on, ``train`` or ``train+val`` (a train
    stage's ``data:``); a function trainer reads it as ``ctx.data_split``, a command
    as ``NESTOR_DATA_SPLIT`` (a built-in trainer has its ``train_data`` setting).
    ``artifact_dir``: the trial's artifact folder (``ctx.artifact_dir``,
    ``NESTOR_ARTIFACT_DIR``): the files it holds when the trial ends become its
    MLflow run's artifacts (trainers.logged).
    ``env``: variables set in this rank's environment while the trial runs (a
    spec's ``trial.env``; a command trainer's program inherits them). Libraries
    that read theirs once per process (NCCL, at a process's first communicator)
    see them in a gang's first trial.
    """

    trial_id: str
    trainer: TrainerRef
    settings: Mapping[str, Any] = field(default_factory=dict)
    config: Mapping[str, Any] = field(default_factory=dict)
    data_parallel: int = 1
    model_parallel: int = 1
    checkpoint_dir: str | None = None
    init_from: str | tuple[str, ...] | None = None
    init_groups: tuple[str, ...] | None = None
    freeze: tuple[str, ...] = ()
    continue_from: str | None = None
    backend: str | None = None
    log_dir: str | None = None
    workdir: str | None = None
    timeout: float | None = None
    result_path: str | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    data_split: str = "train"
    artifact_dir: str | None = None

    def __post_init__(self) -> None:
        if self.data_split not in DATA_SPLITS:
            raise ValueError(f"data_split must be one of {', '.join(DATA_SPLITS)}, but got"
                             f" {self.data_split!r}")
        if not isinstance(self.trainer, TrainerRef):
            raise TypeError(
                f"trainer must be a TrainerRef, but got {type(self.trainer).__name__}"
            )
        for name in ("data_parallel", "model_parallel"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an integer of at least 1, but got {value!r}")
        if self.timeout is not None and not (self.timeout > 0 and math.isfinite(self.timeout)):
            raise ValueError(
                f"timeout must be a positive number of seconds, but got {self.timeout}"
            )
        for name in ("init_groups", "freeze"):
            value = getattr(self, name)
            if isinstance(value, str):
                raise TypeError(f"{name} must be a sequence of group names, but got a string")
            if value is not None:
                object.__setattr__(self, name, tuple(value))
        if self.backend is not None:
            from nestor.trainers.comm import comm_class

            comm_class(self.backend)  # a name no backend has: refused, naming the known
        object.__setattr__(self, "env", {str(k): str(v) for k, v in self.env.items()})
        object.__setattr__(self, "settings", dict(self.settings))
        object.__setattr__(self, "config", dict(self.config))

    @property
    def ranks(self) -> int:
        return self.data_parallel * self.model_parallel


class ResultStatus(StrEnum):
    """How a trainer says its trial ended (``TrialResult.status``); a string like
    ``"ok"``, so a result file reads as before. The orchestrator's statuses of a
    trial (``completed``, ``pruned``, ...) are its own: trainers do not import it."""

    OK = "ok"
    FAILED = "failed"


@dataclass
class TrialResult:
    """How a trial ended.

    ``status`` is ``ResultStatus.OK`` or ``FAILED`` (then ``reason`` says why, in one
    line, and ``details`` may hold a traceback or the tail of a log).
    ``metrics`` are the final figures: for built-in trainers ``test_accuracy``,
    ``test_loss``, ``val_accuracy``, ``val_loss``, ``train_loss`` (last epoch),
    ``epochs``, ``samples_per_second`` and ``wall_time`` (seconds, this run
    only); for command trainers the parsed result under the trainer's
    ``result_metric`` plus ``wall_time``. ``history`` has one dict per epoch
    (built-ins: ``epoch``, ``train_loss``, ``val_loss``, ``val_accuracy``,
    ``samples_per_second``, ``epoch_time``, ``lr``). ``stopped_early`` is True
    when ``should_stop()`` ended the trial. ``checkpoint`` is the path of the
    last checkpoint saved (a function or command trainer's: its checkpoint
    folder, when it left a file there), ``resumed_from_epoch`` the epoch a
    restart resumed after (0: started fresh). ``repeats``: the failure would happen
    again on a rerun of the same trial (a usage error, a missing file, module or
    program, a syntax error, no result printed), so it is not retried unless the
    stage's ``trial.retry_on`` is ``any``; a killed or crashed rank may pass next time.
    ``logged``: what the trainer logged for its MLflow run besides its results
    (metrics at steps, tags, its artifact folder's files: ``Logged.record``).
    """

    trial_id: str
    status: ResultStatus
    reason: str | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    history: list[dict[str, float]] = field(default_factory=list)
    stopped_early: bool = False
    checkpoint: str | None = None
    resumed_from_epoch: int = 0
    logs: dict[str, str] = field(default_factory=dict)
    details: str | None = None
    repeats: bool = False
    logged: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.status == ResultStatus.OK

    def to_dict(self) -> dict[str, Any]:
        return {
            "trial_id": self.trial_id,
            "status": self.status,
            "reason": self.reason,
            "metrics": dict(self.metrics),
            "history": [dict(h) for h in self.history],
            "stopped_early": self.stopped_early,
            "checkpoint": self.checkpoint,
            "resumed_from_epoch": self.resumed_from_epoch,
            "logs": dict(self.logs),
            "details": self.details,
            "repeats": self.repeats,
            "logged": dict(self.logged),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TrialResult:
        """The inverse of ``to_dict`` (a result read back from ``result_path``)."""
        fields = {name: data[name] for name in cls.__dataclass_fields__ if name in data}
        if "status" in fields:
            fields["status"] = ResultStatus(fields["status"])
        return cls(**fields)
