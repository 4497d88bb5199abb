"""Slurm batch submission: a Ray cluster across a job's nodes, driven by nestor.

``options`` checks what a user asks for, ``script`` renders the batch script
from ``slurm/nestor.sbatch.tmpl``, ``jobs`` submits and asks Slurm for state,
and ``node`` runs inside the job (per-node Ray start, wait, clean-up).
"""

from __future__ import annotations

from nestor.orchestrator.slurm.jobs import JobInfo, SlurmError, is_job_id, job_info, submit
from nestor.orchestrator.slurm.options import SubmitError, SubmitOptions, time_seconds
from nestor.orchestrator.slurm.script import render_script, sbatch_argv

__all__ = [
    "JobInfo",
    "SlurmError",
    "SubmitError",
    "SubmitOptions",
    "is_job_id",
    "job_info",
    "render_script",
    "sbatch_argv",
    "submit",
    "time_seconds",
]
