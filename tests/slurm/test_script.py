"""The generated sbatch script and the submit command's checks, without a Slurm.

The quoting is checked by bash itself: the script's assignments are run and
must give back the awkward paths byte for byte, with no command run.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from nestor.orchestrator.slurm import (
    SubmitError,
    SubmitOptions,
    render_script,
    sbatch_argv,
    time_seconds,
)

NESTOR = str(Path(sys.executable).parent / "nestor")
SPEC = """
name: tiny
resources: {slots: 1}
stages:
  - name: tune
    kind: hpo
    trainer: {command: ["python3", "fit.py"]}
    search: {algorithm: random, budget: 2, seed: 1}
    space: {x: {type: float, low: 0, high: 1}}
    objective: {metric: result, mode: min}
"""


def awkward(tmp_path: Path, canary: Path) -> Path:
    return tmp_path / f"run a'b \"c\"; $(touch {canary}) `touch {canary}` \\n\nx%j"


def assignments(script: str) -> str:
    """The script up to its first use of Slurm's environment: the quoted values."""
    return script.split("job=$SLURM_JOB_ID", 1)[0]


def test_values_reach_the_shell_literally_and_run_nothing(tmp_path: Path) -> None:
    canary = tmp_path / "canary"
    run_dir, spec = awkward(tmp_path, canary), tmp_path / "sp ec;$(id).yaml"
    opts = SubmitOptions(run_dir=run_dir, spec=spec, nodes=2, python="/py thon",
                         nestor="/nes'tor")
    script = render_script(opts)
    probe = assignments(script) + 'printf "%s\\0" "$run_dir" "$spec" "$python" "$nestor" "$mode"'
    out = subprocess.run(["bash", "-c", probe], capture_output=True, check=True).stdout
    assert out.split(b"\0")[:-1] == [str(run_dir).encode(), str(spec).encode(), b"/py thon",
                                     b"/nes'tor", b"run"]
    assert not canary.exists()
    assert subprocess.run(["bash", "-n"], input=script, text=True).returncode == 0


def test_script_is_a_pure_function_of_the_options(tmp_path: Path) -> None:
    opts = SubmitOptions(run_dir=tmp_path / "r", spec=tmp_path / "s.yaml", nodes=3,
                         time="1-02:00:00", partition="gpu", account="proj.1",
                         gpus_per_node=4, requeue=True, python="/p", nestor="/n")
    script = render_script(opts)
    assert script == render_script(opts)
    lines = [ln for ln in script.splitlines() if ln.startswith("#SBATCH")]
    assert lines == ["#SBATCH --job-name=nestor", "#SBATCH --nodes=3",
                     "#SBATCH --ntasks-per-node=1", "#SBATCH --signal=B:USR1@120",
                     "#SBATCH --time=1-02:00:00", "#SBATCH --partition=gpu",
                     "#SBATCH --account=proj.1", "#SBATCH --exclusive",
                     "#SBATCH --gpus-per-node=4", "#SBATCH --requeue"]
    resume = render_script(SubmitOptions(run_dir=tmp_path / "r", spec=None, python="/p",
                                         nestor="/n"))
    assert "\nmode=resume\n" in resume and "\nrequeue=0\n" in resume


def test_free_form_values_go_to_sbatch_argv_whole(tmp_path: Path) -> None:
    run_dir = tmp_path / "100%j dir"
    opts = SubmitOptions(run_dir=run_dir, spec=None, sbatch_args=("--qos=a b;c", "--mem=1G"))
    argv = sbatch_argv(opts)
    assert argv[-2:] == ["--qos=a b;c", "--mem=1G"]
    assert f"--output={tmp_path}/100%%j dir/slurm-%j.out" in argv  # %% keeps the literal %
    assert not any("qos" in ln for ln in render_script(opts).splitlines())


@pytest.mark.parametrize(("value", "seconds"), [
    ("30", 1800), ("5:30", 330), ("01:00:00", 3600), ("2-0", 172800), ("1-01:30", 91800),
    ("1-00:00:10", 86410),
])
def test_time_forms(value: str, seconds: int) -> None:
    assert time_seconds(value) == seconds


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"time": "1h"}, "--time must be MM, MM:SS, HH:MM:SS"),
    ({"time": "00:01:00"}, "--time must leave room for the 120 s stop warning"),
    ({"partition": "gpu;rm"}, "--partition must be a Slurm name"),
    ({"account": "a b"}, "--account must be a Slurm name"),
    ({"sbatch_args": ("qos=high",)}, "--sbatch-arg must be an sbatch option"),
    ({"nodes": 0}, "--nodes must be at least 1"),
])
def test_bad_options_say_what_is_allowed(tmp_path: Path, kwargs: dict, message: str) -> None:
    with pytest.raises(SubmitError, match=message.replace("(", r"\(")):
        SubmitOptions(run_dir=tmp_path, spec=None, **kwargs)


def _no_slurm_env(tmp_path: Path) -> dict[str, str]:
    bin_dir = tmp_path / "bin"  # only what nestor needs: no sbatch here
    bin_dir.mkdir()
    return dict(os.environ, PATH=f"{bin_dir}:/nonexistent")


def test_cli_errors_are_clear_and_submit_nothing(tmp_path: Path) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC)
    env = _no_slurm_env(tmp_path)

    def submit(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([NESTOR, "submit", *args], capture_output=True, text=True,
                              env=env, cwd=tmp_path, check=False)

    missing = submit(str(spec), "--run-dir", str(tmp_path / "r"))
    assert missing.returncode == 2 and "sbatch is not on PATH" in missing.stderr
    assert "Traceback" not in missing.stderr
    bad_time = submit(str(spec), "--time", "90min")
    assert bad_time.returncode == 2 and "--time must be MM, MM:SS, HH:MM:SS" in bad_time.stderr
    bad_spec = tmp_path / "bad.yaml"
    bad_spec.write_text(SPEC.replace("budget: 2", "budget: -2"))
    invalid = submit(str(bad_spec))
    assert invalid.returncode == 2 and "budget" in invalid.stderr
    assert "sbatch" not in invalid.stderr  # the spec error comes first
    neither = submit()
    assert neither.returncode == 2 and "exactly one of SPEC" in neither.stderr
    not_a_run = submit("--resume", str(tmp_path / "bin"))
    assert not_a_run.returncode == 2 and "nestor run directory" in not_a_run.stderr
    assert not (tmp_path / "r").exists() and not (tmp_path / "runs").exists()


def test_dry_run_prints_the_script_and_needs_no_sbatch(tmp_path: Path) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC)
    result = subprocess.run([NESTOR, "submit", str(spec), "--nodes", "2", "--time", "10:00",
                             "--run-dir", str(tmp_path / "r"), "--dry-run"],
                            capture_output=True, text=True, env=_no_slurm_env(tmp_path),
                            check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("# sbatch --parsable")
    assert "#SBATCH --nodes=2\n" in result.stdout and "#SBATCH --time=10:00\n" in result.stdout
    assert f"spec={spec}\n" in result.stdout and "nothing submitted" in result.stdout
    assert not (tmp_path / "r").exists()


def test_a_site_template_is_used_and_a_wrong_name_in_it_is_refused(tmp_path: Path) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC)
    site = tmp_path / "site.tmpl"
    site.write_text("#!/bin/bash\n#SBATCH --nodes=$nodes\nmodule load site-python # $$HOME\n"
                    "exec $nestor $mode $spec --run-dir $run_dir\n")
    env = _no_slurm_env(tmp_path)

    def dry_run(template: Path) -> subprocess.CompletedProcess:
        return subprocess.run([NESTOR, "submit", str(spec), "--nodes", "3", "--template",
                               str(template), "--run-dir", str(tmp_path / "r"), "--dry-run"],
                              capture_output=True, text=True, env=env, check=False)

    ok = dry_run(site)
    assert ok.returncode == 0, ok.stderr
    assert "#SBATCH --nodes=3\nmodule load site-python # $HOME\n" in ok.stdout
    assert f"exec {NESTOR} run {spec} --run-dir" in ok.stdout
    site.write_text("#SBATCH --nodes=$node_count\n")
    typo = dry_run(site)
    assert typo.returncode == 2 and "Traceback" not in typo.stderr
    assert "uses $node_count, which nestor does not fill" in typo.stderr
    assert "$nodes" in typo.stderr  # what is allowed


def test_the_template_is_found_outside_a_checkout_and_ships_in_the_wheel(
        tmp_path: Path) -> None:
    from nestor.orchestrator.slurm.script import TEMPLATE_DIRS, TEMPLATE_NAME, default_template

    installed = tmp_path / "share" / "nestor" / "slurm"
    installed.mkdir(parents=True)
    (installed / TEMPLATE_NAME).write_text("x")
    assert default_template((tmp_path / "no-checkout", installed)) == installed / TEMPLATE_NAME
    with pytest.raises(SubmitError, match="pass --template"):
        default_template((tmp_path / "no-checkout",))
    root = TEMPLATE_DIRS[0].parent
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                    "-q", "-w", str(tmp_path / "dist"), str(root)],
                   check=True, capture_output=True, cwd=tmp_path)
    import zipfile

    (wheel,) = (tmp_path / "dist").glob("nestor-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert any(n.endswith(f".data/data/share/nestor/slurm/{TEMPLATE_NAME}") for n in names)
