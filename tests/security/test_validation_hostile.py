"""Hostile values a spec or a trial's output may hold are refused where they come in.

A NUL in a choice or a parameter's name, and an empty, ``=`` or newline name, pass
`nestor validate` today and fail (or mislead) every trial at run time; bounds of
±1.7e308 make every sampled value 1.7e308; a command's ``FoM: 1_000`` reads as
1000. Each is refused at validation (file, line, field, what is allowed) or, for a
command's output, fails the trial with its reason.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from nestor.trainers import TrainerRef, TrialRequest, run_trial

NESTOR = str(Path(sys.executable).parent / "nestor")

SPEC = """\
name: hostile
stages:
  - name: tune
    kind: hpo
    trainer: {{command: ["{python}", "fit.py"]}}
    search: {{algorithm: random, budget: 2}}
    space:
{space}
    objective: {{metric: fom, mode: min}}
"""


def validate(tmp_path: Path, space: str) -> tuple[subprocess.CompletedProcess[str], int]:
    """``nestor validate`` of a spec with ``space`` (its lines); returns the result and
    the spec's line of the space's first entry."""
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC.format(python=sys.executable, space=space))
    first = SPEC.splitlines().index("{space}") + 1
    done = subprocess.run([NESTOR, "validate", str(spec)], capture_output=True, text=True,
                          check=False, timeout=120)
    return done, first


def refused(done: subprocess.CompletedProcess[str], *words: str) -> str:
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    for word in words:
        assert word in done.stderr, done.stderr
    return done.stderr


@pytest.mark.parametrize("name, why", [
    ('"a\\0b"', "control character"),
    ('""', "non-empty"),
    ('"a=b"', "'='"),
    ('"a\\nb"', "newline"),
])
def test_a_parameter_name_that_cannot_pass_as_an_argument_is_refused(tmp_path: Path, name: str,
                                                                     why: str) -> None:
    done, line = validate(tmp_path, f"      {name}: {{type: float, low: 0, high: 1}}")
    refused(done, "space", why, f"spec.yaml:{line - 1}")  # the space: key's line


def test_a_nul_in_a_choice_is_refused(tmp_path: Path) -> None:
    done, line = validate(tmp_path, '      act: {type: categorical, values: [relu, "ta\\0nh"]}')
    refused(done, "NUL", "space.act", f"spec.yaml:{line}")


@pytest.mark.parametrize("low, high", [
    ("-1.7e308", "1.7e308"),  # finite, but 3.4e308 apart: every sample was 1.7e308
    ("-.inf", "1"),
    ("0", ".nan"),
    ("1", "1e400"),
])
def test_bounds_that_are_not_finite_or_overflow_are_refused(tmp_path: Path, low: str,
                                                            high: str) -> None:
    done, line = validate(tmp_path, f"      x: {{type: float, low: {low}, high: {high}}}")
    refused(done, "space.x", f"spec.yaml:{line}")


def test_integer_bounds_beyond_what_a_float_holds_are_refused(tmp_path: Path) -> None:
    done, line = validate(tmp_path, "      n: {type: int, low: 0, high: 100000000000000000000}")
    refused(done, "space.n", "2**53", f"spec.yaml:{line}")


def test_sensible_names_values_and_bounds_still_validate(tmp_path: Path) -> None:
    done, _ = validate(tmp_path, "      --lr: {type: float, low: -1.0e300, high: 1.0e300}\n"
                                 "      act: [relu, '[/a]', 'ta nh']")
    assert done.returncode == 0, done.stderr


def test_a_sweep_param_with_an_empty_name_is_refused(tmp_path: Path) -> None:
    done = subprocess.run([NESTOR, "sweep", "--command", "true", "--param", "=float:0:1",
                           "--mode", "min", "--run-dir", str(tmp_path / "run")],
                          capture_output=True, text=True, check=False, timeout=120)
    refused(done, "--param must look like NAME=")
    assert not (tmp_path / "run").exists()  # refused before anything was made


@pytest.mark.parametrize("printed", ["1_000", "١٠٠٠", "0x10", " infinity"])
def test_a_result_written_in_python_only_syntax_fails_the_trial(tmp_path: Path,
                                                                printed: str) -> None:
    """``float()`` reads "1_000", other scripts' digits and more; a program's result is
    digits, a point and an exponent, and anything else fails the trial, saying so."""
    fit = tmp_path / "fit.py"
    fit.write_text(f"print('FoM: ' + {json.dumps(printed)}.strip())\n")
    request = TrialRequest("t", TrainerRef.command([sys.executable, str(fit)]),
                           log_dir=str(tmp_path / "logs"))
    result = run_trial(request)
    assert result.status == "failed", result
    assert "not" in result.reason and printed.strip() in result.reason, result.reason


def test_plain_results_still_read(tmp_path: Path) -> None:
    fit = tmp_path / "fit.py"
    fit.write_text("print('FoM: -1.5e-3')\n")
    result = run_trial(TrialRequest("t", TrainerRef.command([sys.executable, str(fit)])))
    assert result.status == "ok" and result.metrics["result"] == -1.5e-3
