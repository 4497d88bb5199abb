"""The sbatch script and command line for one job: pure functions of SubmitOptions.

Same options, same text: flags come in a fixed order, so a script can be
compared with a stored one. Every shell word taken from the options goes
through :func:`shlex.quote`; ``#SBATCH`` lines carry only values that
:mod:`orchestrator.slurm.options` checked against Slurm's own syntax.

>>> opts = SubmitOptions(run_dir=Path("/r"), spec=Path("/s.yaml"), nodes=2)
>>> "#SBATCH --nodes=2" in render_script(opts)
True
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from string import Template

from nestor import orchestrator
from nestor.orchestrator.slurm.options import SubmitError, SubmitOptions

TEMPLATE_NAME = "nestor.sbatch.tmpl"
# A checkout keeps the template in slurm/; a wheel installs the same file under
# PREFIX/share/nestor/slurm/ (pyproject's data-files), since slurm/ is not a package.
TEMPLATE_DIRS = (
    Path(orchestrator.__file__).resolve().parents[1] / "slurm",
    Path(sys.prefix) / "share" / "nestor" / "slurm",
)
OUTPUT_NAME = "slurm-%j.out"


def _directives(opts: SubmitOptions) -> list[str]:
    lines = []
    if opts.time:
        lines.append(f"--time={opts.time}")
    if opts.partition:
        lines.append(f"--partition={opts.partition}")
    if opts.account:
        lines.append(f"--account={opts.account}")
    if opts.cpus_per_node:
        lines.append(f"--cpus-per-task={opts.cpus_per_node}")
    else:  # whole nodes: Ray schedules trials on every CPU of each
        lines.append("--exclusive")
    if opts.gpus_per_node:
        lines.append(f"--gpus-per-node={opts.gpus_per_node}")
    if opts.requeue:
        lines.append("--requeue")
    return [f"#SBATCH {line}" for line in lines]


def default_template(dirs: tuple[Path, ...] = TEMPLATE_DIRS) -> Path:
    """The shipped template: the checkout's ``slurm/`` first, then the installed copy."""
    for folder in dirs:
        if (folder / TEMPLATE_NAME).is_file():
            return folder / TEMPLATE_NAME
    looked = ", ".join(str(folder) for folder in dirs)
    raise SubmitError(f"no {TEMPLATE_NAME} in {looked}; pass --template PATH")


def render_script(opts: SubmitOptions) -> str:
    """The batch script for ``opts``, from ``--template`` or the one in ``slurm/``.

    A site's own template may use any of the ``$name`` values below and must
    use no other, so a typo fails here rather than in the job."""
    q = shlex.quote
    values = {
        "job_name": opts.job_name,
        "nodes": str(opts.nodes),
        "warn_s": str(opts.warn_s),
        "directives": "\n".join(_directives(opts)),
        "python": q(opts.python),
        "nestor": q(opts.nestor),
        "spec": q(str(opts.spec) if opts.spec else ""),
        "run_dir": q(str(opts.run_dir)),
        "mode": "run" if opts.spec else "resume",
        "boot_timeout_s": str(opts.boot_timeout_s),
        "grace_s": str(opts.grace_s),
        "requeue": "1" if opts.requeue else "0",
        "verbosity": {-1: "--quiet", 1: "--verbose"}.get(opts.verbosity, ""),
    }
    template = opts.template or default_template()
    try:
        return Template(template.read_text()).substitute(values)
    except KeyError as exc:
        raise SubmitError(
            f"{template} uses ${exc.args[0]}, which nestor does not fill;"
            f" allowed: {', '.join('$' + name for name in sorted(values))}"
        ) from None
    except ValueError as exc:  # a lone $ or ${ without a name
        raise SubmitError(f"{template}: {exc} (write $$ for a literal $)") from None


def sbatch_argv(opts: SubmitOptions) -> list[str]:
    """sbatch's argv (the script comes on stdin). Free-form values go here, not
    into ``#SBATCH`` lines: an argv element is never parsed again. The job
    runs in the directory ``nestor submit`` ran in, as sbatch's jobs do, so
    relative paths in a spec mean the same in the job."""
    return [
        "sbatch", "--parsable",
        # %% is Slurm's escape for a literal % in an output file name
        f"--output={str(opts.run_dir).replace('%', '%%')}/{OUTPUT_NAME}",
        "--open-mode=append",  # a requeued job adds to its output, keeping the first part
        f"--comment=nestor run_dir={opts.run_dir}",
        *opts.sbatch_args,
    ]
