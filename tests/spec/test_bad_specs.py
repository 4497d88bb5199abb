"""The bad-spec corpus: each file under bad/ marks the line that is wrong.

A line carrying ``# ERROR: text`` must be the line an error is reported on,
and that error must contain ``text``; ``# ERROR(file): text`` marks an error
reported without a line. The CLI must exit 2 for each, with no traceback.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from nestor.orchestrator.commands.cli import cli
from nestor.orchestrator.spec import SpecError, load_spec

BAD = sorted((Path(__file__).parent / "bad").glob("*.yaml"))
MARKER = re.compile(r"#\s*ERROR(\(file\))?:\s*(.+?)\s*$")


def expectation(path: Path) -> tuple[int | None, str]:
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        match = MARKER.search(line)
        if match:
            return (None if match.group(1) else number), match.group(2)
    raise AssertionError(f"{path.name} has no '# ERROR:' marker")


def test_corpus_is_large_enough() -> None:
    assert len(BAD) >= 20


@pytest.mark.parametrize("path", BAD, ids=[p.stem for p in BAD])
def test_bad_spec_names_line_and_problem(path: Path) -> None:
    line, text = expectation(path)
    with pytest.raises(SpecError) as caught:
        load_spec(path)
    problems = caught.value.problems
    matching = [p for p in problems if text in str(p)]
    assert matching, f"no problem mentions {text!r}; got:\n{caught.value}"
    for problem in matching:
        assert problem.file == str(path)
        if line is None:
            assert problem.mark is None or problem.mark.line == 1
        else:
            assert problem.mark is not None and problem.mark.line == line, str(problem)


@pytest.mark.parametrize("path", BAD, ids=[p.stem for p in BAD])
def test_cli_exits_2_without_traceback(path: Path) -> None:
    result = CliRunner().invoke(cli, ["validate", str(path)])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert str(path) in result.output


def test_python_tags_are_never_executed(tmp_path: Path) -> None:
    target = Path("/tmp/nestor-pwned")
    target.unlink(missing_ok=True)
    with pytest.raises(SpecError):
        load_spec(Path(__file__).parent / "bad" / "python-object-tag.yaml")
    assert not target.exists()


def test_oversized_file_is_refused_before_parsing(tmp_path: Path) -> None:
    path = tmp_path / "huge.yaml"
    path.write_text("name: demo\n" + "# padding\n" * 200_000)
    with pytest.raises(SpecError, match="larger than 1024 KiB"):
        load_spec(path)


def test_binary_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "binary.yaml"
    path.write_bytes(b"name: \xff\xfe\x00demo\n")
    with pytest.raises(SpecError, match="not UTF-8"):
        load_spec(path)


def test_deep_nesting_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "deep.yaml"
    path.write_text("name: " + "[" * 5000 + "]" * 5000 + "\n")
    with pytest.raises(SpecError, match="nesting is deeper"):
        load_spec(path)


def test_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["validate", str(tmp_path / "nope.yaml")])
    assert result.exit_code == 2
    assert "cannot read the file" in result.output


def test_all_problems_of_a_file_are_reported(tmp_path: Path) -> None:
    path = tmp_path / "two.yaml"
    path.write_text(
        "name: demo\nresources: {slots: 0}\nstages:\n"
        "  - {name: a, kind: train, trainer: {name: cnn}, trial: {retries: -1}}\n"
    )
    with pytest.raises(SpecError) as caught:
        load_spec(path)
    lines = sorted(p.mark.line for p in caught.value.problems if p.mark)
    assert lines == [2, 4]
