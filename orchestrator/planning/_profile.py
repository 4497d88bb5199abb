"""What a profiling step measured, as plain data, and where it is kept.

A `Profile` is JSON-able on purpose: the driver can journal it (a resumed
run reads it back instead of profiling again) and a cache keeps it per
trainer, model settings and machine, under ``~/.cache/nestor/profiles/``
(``NESTOR_CACHE_DIR`` moves it) and a run directory's ``profiles/``. The key
leaves out what does not change the cost of a step (learning rate, seeds,
epochs), so every trial of a search shares one profile.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

FORMAT = 1
# Options that change neither the model nor the cost of a training step.
NOT_COST_RELEVANT = frozenset({
    "lr", "momentum", "weight_decay", "seed", "split_seed", "warmup_epochs", "epochs",
    "batch_size", "batch_per_rank", "lr_scaling", "bootstrap", "dropout",
})


@dataclass(frozen=True)
class StepSample:
    """The slowest rank's median times of one training step at one shape and batch."""

    dp: int
    mp: int
    batch: int  # per data-parallel rank
    compute_s: float
    gather_s: float
    allreduce_s: float
    step_s: float
    peak_memory_bytes: int


@dataclass(frozen=True)
class CommSample:
    """One collective of ``bytes`` (allreduce: the vector; allgather: the result) on ``ranks``."""

    kind: str  # "allreduce" | "allgather"
    ranks: int
    bytes: int
    seconds: float


@dataclass(frozen=True)
class Profile:
    """Everything measured for one trainer, model settings and machine."""

    key: str
    trainer: str
    options: dict[str, Any]  # the cost-relevant options profiled
    machine: dict[str, Any]
    steps: tuple[StepSample, ...]
    comm: tuple[CommSample, ...]
    train_samples: int
    seconds_spent: float = 0.0
    notes: list[str] = field(default_factory=list)

    @property
    def shapes(self) -> list[tuple[int, int]]:
        return sorted({(s.dp, s.mp) for s in self.steps})

    def to_record(self) -> dict[str, Any]:
        """A plain dict for JSON and the journal."""
        record = asdict(self)
        record["format"] = FORMAT
        return record

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> Profile:
        if record.get("format") != FORMAT:
            raise ValueError(f"profile format must be {FORMAT}, but got {record.get('format')!r}")
        return cls(
            key=record["key"], trainer=record["trainer"], options=dict(record["options"]),
            machine=dict(record["machine"]),
            steps=tuple(StepSample(**s) for s in record["steps"]),
            comm=tuple(CommSample(**c) for c in record["comm"]),
            train_samples=int(record["train_samples"]),
            seconds_spent=float(record.get("seconds_spent", 0.0)),
            notes=list(record.get("notes", [])),
        )

    def without(self, dp: int, mp: int) -> Profile:
        """The profile less one shape's steps (leave-one-out)."""
        kept = tuple(s for s in self.steps if (s.dp, s.mp) != (dp, mp))
        return Profile(self.key, self.trainer, self.options, self.machine, kept, self.comm,
                       self.train_samples, self.seconds_spent, self.notes)


def machine(backend: str = "horovod") -> dict[str, Any]:
    """What makes a profile valid elsewhere: the kind of machine, not its name, and
    (when not Horovod, the default) the backend the ranks communicate over."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    info = {"cpu": cpu, "cores": cores, "gpus": _gpu_names(),
            "python": platform.python_version(), "torch": _version("torch"),
            "horovod": _version("horovod")}
    if backend != "horovod":  # only then: Horovod profiles keep their cached keys
        info["backend"] = backend
    return info


def _version(package: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(package)
    except PackageNotFoundError:
        return None


def _gpu_names() -> list[str]:
    """GPU names from /proc (no nvidia-smi call, no torch import): [] where none."""
    root = Path("/proc/driver/nvidia/gpus")
    names = []
    if root.is_dir():
        for info in sorted(root.glob("*/information")):
            for line in info.read_text(errors="replace").splitlines():
                if line.startswith("Model:"):
                    names.append(line.split(":", 1)[1].strip())
    return names


def cost_options(options: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in sorted(options.items()) if k not in NOT_COST_RELEVANT}


def profile_key(trainer: str, options: Mapping[str, Any], machine_info: Mapping[str, Any],
                batches: Sequence[int]) -> str:
    """A short stable name for (trainer, cost-relevant options, machine, batches profiled)."""
    blob = json.dumps({"trainer": trainer, "options": cost_options(options),
                       "machine": dict(machine_info), "batches": list(batches)},
                      sort_keys=True, default=str)
    return f"{trainer}-{hashlib.sha256(blob.encode()).hexdigest()[:16]}"


def cache_dir() -> Path:
    root = os.environ.get("NESTOR_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "nestor")
    return Path(root) / "profiles"


def load(key: str, places: Sequence[Path] = ()) -> Profile | None:
    """The profile named ``key`` from the first of ``places`` (then the cache) that has it."""
    for folder in [*places, cache_dir()]:
        path = Path(folder) / f"{key}.json"
        if path.is_file():
            try:
                return Profile.from_record(json.loads(path.read_text()))
            except (ValueError, KeyError, TypeError, json.JSONDecodeError):
                continue  # a stale or torn file: profile again rather than plan on it
    return None


def save(profile: Profile, places: Sequence[Path] = ()) -> list[Path]:
    """Write the profile atomically to the cache and each of ``places``."""
    written = []
    text = json.dumps(profile.to_record(), indent=1, sort_keys=True)
    for folder in [cache_dir(), *places]:
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{profile.key}.json"
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(text)
        os.replace(tmp, path)
        written.append(path)
    return written
