"""The README's "Tune your own script" runs as it stands.

Its two trainers are shown whole: each code block must be the file in
``examples/`` byte for byte (so what a reader copies is what is tested), and its
two commands are taken from the README's own ``bash`` blocks and run, as a user
would, from the repository root with the venv's ``python`` and ``nestor`` first on
PATH. Nothing in the README points outside the repository.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
SECTION = README[README.index("## Tune your own script"):README.index("## The `nestor` command")]


def blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", SECTION, re.S)


def test_the_examples_shown_are_the_files_in_examples() -> None:
    shown = blocks("python") + blocks("yaml")
    for name in ("train_digits.py", "digits.py", "digits.yaml"):
        assert (ROOT / "examples" / name).read_text() in shown, f"examples/{name} drifted"


def test_nothing_points_outside_the_repository() -> None:
    for path in ("README.md", "pyproject.toml"):
        assert "../shared" not in (ROOT / path).read_text(), path
    assert "docs/DESIGN.md" in README and (ROOT / "docs" / "DESIGN.md").is_file()


def command_of(block: str) -> tuple[dict[str, str], list[str]]:
    """A bash block's one command (continued lines joined): its leading VAR=value
    assignments and its argv."""
    words = shlex.split(block.replace("\\\n", " "))
    env = {}
    while "=" in words[0] and not words[0].startswith("-"):
        name, value = words.pop(0).split("=", 1)
        env[name] = value
    return env, words


@pytest.mark.slow
@pytest.mark.parametrize("which", ["command", "function"])
def test_the_readme_commands_run_and_maximise(tmp_path: Path, which: str) -> None:
    sweep, run = [b for b in blocks("bash") if "nestor " in b][:2]
    extra, argv = command_of(sweep if which == "command" else run)
    where = argv.index("--run-dir") + 1
    argv[where] = str(tmp_path / "run")  # the README's runs/... kept out of the checkout
    bin_dir = str(Path(sys.executable).parent)
    env = dict(os.environ, PATH=bin_dir + os.pathsep + os.environ["PATH"], **extra)
    result = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True,
                            check=False, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "(max)" in result.stdout  # the direction, beside the metric
    stage = json.loads((tmp_path / "run" / "results.json").read_text())["stages"][0]
    values = [t["value"] for t in stage["trials"] if t["status"] == "completed"]
    assert len(values) == 8 and stage["best"]["value"] == max(values)
    assert stage["best"]["value"] > 0.85  # an MLP on digits, tuned: well above chance (0.1)
    shown = subprocess.run([str(Path(bin_dir) / "nestor"), "results", str(tmp_path / "run")],
                           env=env, capture_output=True, text=True, check=False, timeout=120)
    assert shown.returncode == 0 and "best first" in shown.stdout
