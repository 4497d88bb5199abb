"""`nestor submit` and the Slurm half of `nestor status`.

Everything that can be wrong is checked before sbatch is called: the spec
(the same check as `nestor validate`), the options, the run directory, and
that sbatch exists. A job that could only fail is never queued.
"""

from __future__ import annotations

import shlex
import sys
from datetime import datetime
from pathlib import Path

import click

from nestor.orchestrator.commands.console import verbosity, verbosity_options

EXIT_ERROR = 2


def _fail(problems: list[object]) -> None:
    from nestor.orchestrator.commands.console import console, print_errors

    print_errors(console(stderr=True), problems)
    sys.exit(EXIT_ERROR)


def _check_run(spec: Path | None, resume: Path | None, run_dir: Path | None) -> tuple[Path, str]:
    """The run directory (absolute) and the workflow's name; exits on a bad spec."""
    from nestor.orchestrator.spec import SpecError, load_spec

    if (spec is None) == (resume is None):
        _fail(["give exactly one of SPEC (a new run) or --resume RUNDIR (continue a run)"])
    try:
        if resume is not None:
            if run_dir is not None:
                _fail(["--run-dir and --resume RUNDIR both name the run directory; give one"])
            if not (resume / "spec.yaml").is_file():
                _fail([f"--resume must name a nestor run directory (with spec.yaml), but got"
                       f" {str(resume)!r}"])
            workflow = load_spec(resume / "spec.yaml")
            return resume.resolve(), workflow.name
        assert spec is not None
        workflow = load_spec(spec)
    except SpecError as exc:
        _fail(list(exc.problems))
    if run_dir is None:
        stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
        run_dir = Path("runs") / f"{workflow.name}-{stamp}"
    if (run_dir / "journal.jsonl").exists():
        _fail([f"{run_dir} already holds a workflow run; continue it with"
               f" `nestor submit --resume {run_dir}` or choose another --run-dir"])
    return run_dir.resolve(), workflow.name


@click.command()
@click.argument("spec", required=False, type=click.Path(path_type=Path, dir_okay=False))
@click.option("--nodes", "-N", type=click.IntRange(min=1), default=1, show_default=True,
              help="Slurm nodes: a Ray head on the first, a Ray worker on each other.")
@click.option("--time", "-t", "time_limit", metavar="HH:MM:SS",
              help="Time limit (any Slurm form: MM, HH:MM:SS, D-HH:MM, ...). The driver is"
              " warned --warn seconds before it and stops cleanly.")
@click.option("--partition", "-p", metavar="P")
@click.option("--account", "-A", metavar="A")
@click.option("--cpus-per-node", "-c", type=click.IntRange(min=1), metavar="C",
              help="CPUs per node for Ray (default: whole nodes, sbatch --exclusive).")
@click.option("--gpus-per-node", type=click.IntRange(min=0), metavar="G")
@click.option("--sbatch-arg", "sbatch_args", multiple=True, metavar="ARG",
              help="Passed to sbatch as one argument, e.g. --sbatch-arg=--qos=high. Repeat.")
@click.option("--run-dir", type=click.Path(path_type=Path, file_okay=False),
              help="Where results go (default: runs/NAME-TIMESTAMP); the job's output"
              " is RUNDIR/slurm-JOBID.out.")
@click.option("--resume", type=click.Path(path_type=Path, file_okay=False, exists=True),
              metavar="RUNDIR", help="Continue this run instead of starting one (no SPEC).")
@click.option("--requeue", is_flag=True,
              help="Near the time limit, stop cleanly and requeue the job, which continues"
              " the run; Slurm's own requeues (preemption) continue it too.")
@click.option("--warn", "warn_s", type=click.IntRange(min=10), default=120, show_default=True,
              metavar="SECONDS", help="How long before the time limit the driver is told to stop.")
@click.option("--boot-timeout", "boot_timeout_s", type=click.IntRange(min=5), default=180,
              show_default=True, metavar="SECONDS",
              help="How long every node's Ray may take to join before the job gives up.")
@click.option("--template", type=click.Path(path_type=Path, dir_okay=False, exists=True),
              metavar="PATH", help="Your site's sbatch template instead of nestor's"
              " slurm/nestor.sbatch.tmpl (same $names; `--dry-run` shows the result).")
@verbosity_options
@click.option("--dry-run", is_flag=True,
              help="Print the sbatch command and script; submit nothing.")
def submit(spec: Path | None, nodes: int, time_limit: str | None, partition: str | None,
           account: str | None, cpus_per_node: int | None, gpus_per_node: int | None,
           sbatch_args: tuple[str, ...], run_dir: Path | None, resume: Path | None,
           requeue: bool, warn_s: int, boot_timeout_s: int, template: Path | None,
           dry_run: bool, quiet: bool, verbose: bool) -> None:
    """Submit a workflow as a Slurm batch job: Ray across the job's nodes, nestor on top.

    \b
    nestor submit configs/quickstart.yaml --nodes 2 --time 01:00:00 -p gpu
    nestor submit --resume runs/quickstart-20261121-101500 --nodes 2 --time 01:00:00

    Prints the job id and the run directory; `nestor status JOBID` shows both
    Slurm's state and the workflow's progress. On scancel, or --warn seconds
    before the time limit, the driver stops cleanly and journals what it
    finished; `--resume RUNDIR` continues without re-running finished trials.
    """
    from nestor.orchestrator.commands.console import console, private_files
    from nestor.orchestrator.slurm import (
        SlurmError,
        SubmitError,
        SubmitOptions,
        render_script,
        sbatch_argv,
    )
    from nestor.orchestrator.slurm import submit as submit_job

    run_dir, name = _check_run(spec, resume, run_dir)
    bin_dir = Path(sys.executable).parent
    try:
        opts = SubmitOptions(
            run_dir=run_dir, spec=spec.resolve() if spec else None, nodes=nodes,
            time=time_limit, partition=partition, account=account,
            cpus_per_node=cpus_per_node, gpus_per_node=gpus_per_node,
            sbatch_args=tuple(sbatch_args), job_name=f"nestor-{name}"[:64], requeue=requeue,
            warn_s=warn_s, boot_timeout_s=boot_timeout_s,
            python=sys.executable, nestor=str(bin_dir / "nestor"),
            template=template.resolve() if template else None,
            verbosity=verbosity(quiet, verbose),
        )
        script = render_script(opts)
    except SubmitError as exc:
        _fail([exc])
    out = console()
    if dry_run:
        click.echo(f"# {shlex.join(sbatch_argv(opts))} <<'EOF'")
        click.echo(script, nl=False)
        click.echo("# EOF (dry run: nothing submitted)")
        return
    try:
        with private_files():  # the run directory, its job script and Slurm's logs
            job_id = submit_job(opts)
    except SlurmError as exc:
        _fail([exc])
    out.print(f"submitted job {job_id}", soft_wrap=True)
    out.print(f"run directory: {run_dir}", soft_wrap=True)
    out.print(f"follow with: nestor status {job_id}", soft_wrap=True)


def job_status(job_id: str) -> None:
    """Print Slurm's view of the job, then the run directory's progress."""
    from nestor.orchestrator.commands.console import console
    from nestor.orchestrator.slurm import SlurmError, job_info

    try:
        info = job_info(job_id)
    except SlurmError as exc:
        _fail([exc])
    reason = f" ({info.reason})" if info.reason else ""
    console().print(f"job {job_id}: {info.state}{reason} [from {info.source}]", soft_wrap=True)
    if info.run_dir is None:
        console().print("the job names no nestor run directory (not submitted by nestor?)")
    elif not (info.run_dir / "journal.jsonl").exists():
        console().print(f"{info.run_dir}: no journal yet (the workflow has not started)",
                        soft_wrap=True)
    else:
        from nestor.orchestrator.commands.console import run_status

        run_status(info.run_dir, interrupted_hint=f"nestor submit --resume {info.run_dir}")
