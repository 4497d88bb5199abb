"""Stage kinds live behind one interface (orchestrator/engine/kinds, and their reports
in orchestrator/projections/kinds): the rest of the orchestrator asks a stage's kind,
never which kind it is."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import typing
from pathlib import Path

import pytest

from nestor.orchestrator.engine.kinds import KINDS, StageKind, stage_kind
from nestor.orchestrator.journal.state import RunState
from nestor.orchestrator.projections.kinds import KindReport, kind_report, report_of, stage_report
from nestor.orchestrator.projections.products import Product
from nestor.orchestrator.projections.tables import to_markdown
from nestor.orchestrator.spec.model import STAGE_KINDS, Stage

ROOT = Path(__file__).parents[3]
# A comparison of something with a stage kind's name: `kind == "hpo"`,
# `.get("kind") == "ensemble"`, `kind in ("hpo", ...)`, `isinstance(stage, TransferStage)`.
NAMES = "|".join(KINDS)
SWITCH = re.compile(rf"""kind\W*\s*(==|!=|\bin\s*\(|\bin\s*\[)\s*["']({NAMES})["']"""
                    rf"""|\(\s*["']({NAMES})["'],\s*["']({NAMES})["']"""
                    r"|isinstance\([^)]*(Hpo|Ensemble|Transfer|Train)Stage")


def test_every_kind_in_the_registry_is_a_kind_of_stage_the_spec_accepts() -> None:
    union = typing.get_args(typing.get_args(Stage)[0])
    spec_kinds = {typing.get_args(model.model_fields["kind"].annotation)[0] for model in union}
    assert spec_kinds == set(KINDS) == set(STAGE_KINDS)
    for name in KINDS:
        kind = stage_kind(name)
        assert isinstance(kind, StageKind) and kind.name == name


VALIDATE = """
import json
import sys
from pathlib import Path
from nestor.orchestrator.planning.report import pick_stage
from nestor.orchestrator.spec import load_spec
for path in sorted(Path("configs").glob("*.yaml")) + sorted(Path("tests/spec/bad").glob("*.yaml")):
    try:
        pick_stage(load_spec(path, imports=False), None)
    except Exception:
        pass  # a bad spec: refused, as it should be, by the spec's own checks
print(json.dumps(sorted(m for m in sys.modules if m.startswith("nestor.orchestrator."))))
"""


def test_the_spec_checks_each_kind_of_stage_without_the_engine() -> None:
    """What the spec knows of a kind (its fields, whether it searches, its checks) is
    its model: validating every example and bad spec, kinds' checks included, and
    picking the stage a plan reports imports nothing above the spec's layer."""
    result = subprocess.run([sys.executable, "-c", VALIDATE], cwd=ROOT, capture_output=True,
                            text=True, check=False, timeout=300)
    assert result.returncode == 0, result.stderr
    loaded = json.loads(result.stdout)
    assert "nestor.orchestrator.spec.checks" in loaded
    assert "nestor.orchestrator.planning.report" in loaded
    above = [m for m in loaded if m.split(".")[1] in ("engine", "projections", "commands")]
    assert not above, above


def test_every_kind_in_the_registry_has_a_report_of_its_name() -> None:
    """A kind's reporting is found by its name in orchestrator/projections/kinds."""
    for name in KINDS:
        report = kind_report(name)
        assert isinstance(report, KindReport) and report.name == name


def test_an_unknown_kind_names_the_known_ones() -> None:
    with pytest.raises(KeyError, match="known: hpo, ensemble, transfer, train"):
        stage_kind("bagging")
    with pytest.raises(KeyError, match="known: hpo, ensemble, transfer, train"):
        kind_report("bagging")


def test_no_module_outside_the_kinds_switches_on_a_stage_kind() -> None:
    """Adding a kind touches its module, the registry and its spec model, not the
    results, tables, artifacts, predict, workflow or checks."""
    found = []
    for path in sorted((ROOT / "orchestrator").rglob("*.py")):
        if "kinds" in path.relative_to(ROOT).parts:
            continue
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            if SWITCH.search(line):
                found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not found, "\n".join(found)


@pytest.mark.parametrize("name", list(KINDS))
def test_each_kind_reports_a_stage_that_made_nothing(name: str) -> None:
    """A stage whose trials all failed still gets a product, lines and a report."""
    summary = {"name": "s", "kind": name, "trials": [], "best": None, "stop_reason": "failed",
               "n_trials": 0, "n_runs": 0}
    kind = report_of(summary)
    product = kind.product(summary)
    assert isinstance(product, Product) and product.test is None
    assert kind.lines(summary) and all(isinstance(line, str) for line in kind.lines(summary))
    assert "stage s" in to_markdown(stage_report(summary))
    assert kind.checkpoint(summary) is None
    assert kind.plots(summary, None, [], RunState(), Path("/nonexistent")) == [] or name == "hpo"
