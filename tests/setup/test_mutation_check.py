"""The mutation check (scripts/mutation_check.py, `make mutation-check`) still breaks
what it says: each mutant's text is in today's code exactly once, and each names tests
that exist. (Running every mutant takes minutes: `make mutation-check` does.)"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def load_check():
    spec = importlib.util.spec_from_file_location("mutation_check",
                                                  ROOT / "scripts" / "mutation_check.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["mutation_check"] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_every_mutant_still_applies_to_the_code_and_names_real_tests() -> None:
    check = load_check()
    assert check.not_applying(ROOT) == []
    guarded = {m.path for m in check.MUTANTS}
    assert {"orchestrator/journal/journal.py", "orchestrator/engine/trials.py",
            "orchestrator/projections/projector.py", "search/_budget.py"} <= guarded
    for m in check.MUTANTS:
        files = [arg.split("::")[0] for arg in m.tests if arg.startswith("tests/")]
        assert files and all((ROOT / f).is_file() for f in files), m.name


@pytest.mark.slow  # two pytest runs in a copy of the tree
def test_a_mutant_its_tests_let_through_fails_the_check(tmp_path: Path) -> None:
    # A breakage no test stands for (a comment changed) must survive, and fail the run;
    # the tree the tests run in is a copy: this checkout is left as it was.
    check = load_check()
    harmless = check.Mutant("comment", "nothing", "orchestrator/journal/journal.py",
                            "One writer (the driver) appends; anything may read.",
                            "One writer appends.",
                            ("tests/orchestrator/journal/test_journal.py", "-k", "round_trip"))
    before = (ROOT / harmless.path).read_text()
    check.MUTANTS = (harmless,)
    assert check.main([]) == 1
    assert (ROOT / harmless.path).read_text() == before
    listed = subprocess.run([sys.executable, str(ROOT / "scripts" / "mutation_check.py"),
                             "--list"], capture_output=True, text=True, check=True).stdout
    assert "resume-tell" in listed and "projector-first" in listed
