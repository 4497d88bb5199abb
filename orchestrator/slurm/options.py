"""What `nestor submit` may ask of Slurm, checked before anything is written.

Values that land in ``#SBATCH`` lines are checked against what Slurm allows,
because sbatch parses those lines itself (not as a shell would), so quoting
cannot make an arbitrary value safe there. Free-form values (paths, extra
sbatch arguments) never go into ``#SBATCH`` lines: paths become shell words
quoted with :func:`shlex.quote`, and extra arguments go to sbatch's argv.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

# Slurm's --time forms: MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS.
_TIME = re.compile(r"^(\d+|\d+:\d{1,2}|\d+:\d{1,2}:\d{1,2}|\d+-\d{1,2}(:\d{1,2}){0,2})$")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]{0,63}$")
TIME_FORMS = "MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS"


class SubmitError(ValueError):
    """A submit option is not acceptable; the message names it and what is allowed."""


def time_seconds(value: str) -> int:
    """Seconds in a Slurm --time value; raises SubmitError for another form."""
    if not _TIME.match(value):
        raise SubmitError(f"--time must be {TIME_FORMS}, but got {value!r}")
    days = 0
    if "-" in value:
        day, value = value.split("-", 1)
        days = int(day)
        parts = [int(p) for p in value.split(":")] + [0] * 2
        hours, minutes, seconds = parts[:3]
    else:
        parts = [int(p) for p in value.split(":")]
        if len(parts) == 1:
            hours, minutes, seconds = 0, parts[0], 0
        elif len(parts) == 2:
            hours, minutes, seconds = 0, parts[0], parts[1]
        else:
            hours, minutes, seconds = parts
    return ((days * 24 + hours) * 60 + minutes) * 60 + seconds


def _name(option: str, value: str | None) -> str | None:
    if value is not None and not _NAME.match(value):
        raise SubmitError(
            f"{option} must be a Slurm name (letters, digits, '_', '.', '+', '-'; at most 64),"
            f" but got {value!r}"
        )
    return value


@dataclass(frozen=True)
class SubmitOptions:
    """One job: the run it drives and the resources it asks for.

    ``spec`` is the workflow to run, or None to resume ``run_dir``. Paths are
    made absolute, because the job runs in whatever directory Slurm gives it.
    """

    run_dir: Path
    spec: Path | None
    nodes: int = 1
    time: str | None = None
    partition: str | None = None
    account: str | None = None
    cpus_per_node: int | None = None
    gpus_per_node: int | None = None
    sbatch_args: tuple[str, ...] = ()
    job_name: str = "nestor"
    requeue: bool = False
    warn_s: int = 120
    boot_timeout_s: int = 180
    grace_s: int = 20
    python: str = ""
    nestor: str = ""
    template: Path | None = None
    verbosity: int = 0  # -1: the driver runs with --quiet, 1: --verbose

    def __post_init__(self) -> None:
        if self.nodes < 1:
            raise SubmitError(f"--nodes must be at least 1, but got {self.nodes}")
        for option, value in (("--cpus-per-node", self.cpus_per_node),
                              ("--gpus-per-node", self.gpus_per_node)):
            if value is not None and value < (1 if option == "--cpus-per-node" else 0):
                raise SubmitError(f"{option} must be at least 1, but got {value}")
        if self.time is not None:
            limit = time_seconds(self.time)
            # Slurm may send the --signal warning up to 60 s early, and the job
            # needs a minute or two to start Ray and the driver before it.
            if limit < self.warn_s + 180:
                raise SubmitError(
                    f"--time must leave room for the {self.warn_s} s stop warning (at least"
                    f" --warn + 180 s: Slurm may warn 60 s early, and start-up takes time),"
                    f" but got {self.time!r} ({limit} s)"
                )
        if self.template is not None and not self.template.is_file():
            raise SubmitError(f"--template {self.template} is not a file")
        _name("--partition", self.partition)
        _name("--account", self.account)
        _name("the job name", self.job_name)
        for arg in self.sbatch_args:
            if not arg.startswith("-"):
                raise SubmitError(
                    f"--sbatch-arg must be an sbatch option such as --qos=high, but got {arg!r}"
                )
