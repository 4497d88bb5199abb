"""Talking to Slurm: submit a job, ask for its state. One helper runs every
Slurm command, as an argv list (never through a shell).

Accounting (``sacct``) is often off on small clusters, so a job's state comes
from ``squeue --states=all`` (which still lists a job for MinJobAge after it
ends) and ``sacct`` is asked only when squeue no longer knows the job; a
failing ``sacct`` is not an error.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from nestor.orchestrator.slurm.options import SubmitOptions
from nestor.orchestrator.slurm.script import render_script, sbatch_argv

_JOB_ID = re.compile(r"^\d+(_\d+)?$")
_COMMENT = "nestor run_dir="


class SlurmError(RuntimeError):
    """A Slurm command is missing or failed; the message says which and why."""


def require(tool: str) -> None:
    if shutil.which(tool) is None:
        raise SlurmError(
            f"{tool} is not on PATH: nestor submit and status need Slurm's client"
            " commands (Debian: apt-get install slurm-client); a one-machine Slurm for"
            " trying nestor: slurm/local-slurm.sh start"
        )


def slurm(argv: list[str], *, stdin: str | None = None, timeout: float = 60) -> str:
    """Run one Slurm client command and return its stdout; SlurmError if it fails."""
    require(argv[0])
    try:
        done = subprocess.run(argv, input=stdin, capture_output=True, text=True,
                              timeout=timeout, check=False)
    except subprocess.TimeoutExpired as exc:
        raise SlurmError(f"{argv[0]} did not answer within {timeout:g} s") from exc
    if done.returncode != 0:
        message = done.stderr.strip() or done.stdout.strip() or f"exit status {done.returncode}"
        raise SlurmError(f"{argv[0]} failed: {message}")
    return done.stdout


def is_job_id(text: str) -> bool:
    return bool(_JOB_ID.match(text))


def submit(opts: SubmitOptions) -> str:
    """Submit the job; returns its id. The run directory must exist first:
    Slurm opens the job's output file there when the job starts."""
    require("sbatch")
    opts.run_dir.mkdir(parents=True, exist_ok=True)
    out = slurm(sbatch_argv(opts), stdin=render_script(opts))
    job_id = out.strip().split(";")[0]
    if not is_job_id(job_id):
        raise SlurmError(f"sbatch printed {out.strip()!r}, not a job id")
    return job_id


@dataclass(frozen=True)
class JobInfo:
    job_id: str
    state: str          # PENDING, RUNNING, COMPLETED, CANCELLED, FAILED, TIMEOUT, ...
    reason: str         # why pending, or the exit code; "" when Slurm gives none
    run_dir: Path | None
    source: str         # "squeue" or "sacct"


def _run_dir(comment: str) -> Path | None:
    comment = comment.strip()
    return Path(comment[len(_COMMENT):]) if comment.startswith(_COMMENT) else None


def job_info(job_id: str) -> JobInfo:
    """The job's Slurm state and the run directory it drives."""
    if not is_job_id(job_id):
        raise SlurmError(f"a Slurm job id must be digits (e.g. 1234 or 1234_5), but got {job_id!r}")
    try:  # %k (the comment) last: it may contain the separator
        out = slurm(["squeue", "--noheader", "--states=all", "--jobs", job_id,
                     "--format=%i|%T|%r|%k"])
    except SlurmError as exc:
        if "Invalid job id" not in str(exc):
            raise
        out = ""
    for line in out.splitlines():
        jid, state, reason, comment = [*line.split("|", 3), "", "", ""][:4]
        if jid.strip() == job_id:
            reason = "" if reason.strip() in ("None", "(null)") else reason.strip()
            return JobInfo(job_id, state.strip(), reason, _run_dir(comment), "squeue")
    try:
        out = slurm(["sacct", "--noheader", "--parsable2", "--allocations", "--jobs", job_id,
                     "--format=JobID,State,ExitCode,Comment"])
    except SlurmError as exc:
        raise SlurmError(
            f"job {job_id} is not in squeue, and sacct cannot tell ({exc}); give the run"
            " directory instead: nestor status RUNDIR"
        ) from exc
    for line in out.splitlines():
        jid, state, exit_code, comment = [*line.split("|", 3), "", "", ""][:4]
        if jid == job_id:
            return JobInfo(job_id, state.split()[0], f"exit {exit_code}", _run_dir(comment),
                           "sacct")
    raise SlurmError(f"Slurm knows no job {job_id} (neither squeue nor sacct lists it)")
