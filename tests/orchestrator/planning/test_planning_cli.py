"""`nestor plan` prints the combined table; importing the planner pulls in neither
torch nor Ray, and `nestor --help` does not import it at all."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from nestor.orchestrator.commands.cli import cli

SPEC = """\
name: auto
resources: {slots: 2}
stages:
  - name: tune
    kind: hpo
    trainer: {name: cnn, settings: {dataset: mnist5k, epochs: 1}}
    parallel: auto
    batch: {global_max: 256}
    search: {algorithm: random, budget: 12}
    space:
      lr: {type: float, low: 1.0e-3, high: 0.2, log: true}
"""
ROWS = ("random search", "DP+MP", "HPO", "HPO+MP", "HPO+DP", "HPO+DP+MP")


@pytest.fixture
def spec(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("NESTOR_CACHE_DIR", str(tmp_path / "cache"))
    path = tmp_path / "auto.yaml"
    path.write_text(SPEC)
    return path


def test_plan_prints_the_six_rows_for_the_allocation(spec: Path) -> None:
    result = CliRunner().invoke(cli, ["plan", str(spec), "--slots", "16",
                                      "--random-runs", "120"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    header = next(i for i, line in enumerate(lines) if "configuration" in line)
    table = lines[header + 1:header + 7]
    assert [line.split("  ")[0].strip() for line in table] == list(ROWS)
    assert "120" in table[0] and " 1.00x" in table[0]
    # Each row keeps to its restriction: columns runs, shape, at once after the label.
    shapes = {}
    for label, line in zip(ROWS, table, strict=True):
        runs, shape, at_once = line.strip()[len(label):].split()[:3]
        dp, mp = map(int, shape.split("x"))
        shapes[label] = (int(runs), dp, mp, int(at_once))
    assert shapes["random search"] == (120, 1, 1, 1)
    assert shapes["DP+MP"][0] == 120 and shapes["DP+MP"][3] == 1
    assert shapes["DP+MP"][1] * shapes["DP+MP"][2] > 1
    assert shapes["HPO"] == (12, 1, 1, 12)
    assert shapes["HPO+MP"][1] == 1 and shapes["HPO+MP"][2] > 1
    assert shapes["HPO+DP"][1] > 1 and shapes["HPO+DP"][2] == 1
    assert "unmeasured prior" in result.output
    assert "plan: dp" in result.output


def test_plan_of_a_bad_stage_name_exits_2(spec: Path) -> None:
    result = CliRunner().invoke(cli, ["plan", str(spec), "--stage", "nope"])
    assert result.exit_code == 2
    assert "--stage must name a stage (tune), but got 'nope'" in result.output


def test_planning_imports_neither_torch_nor_ray() -> None:
    code = ("import sys, nestor.orchestrator.planning, nestor.orchestrator.planning.report\n"
            "heavy = [m for m in ('torch', 'ray', 'horovod', 'mlflow') if m in sys.modules]\n"
            "assert not heavy, heavy\n"
            "import nestor.orchestrator.commands.cli\n")
    subprocess.run([sys.executable, "-c", code], check=True)
    code = ("import sys\nfrom nestor.orchestrator.commands import cli\n"
            "assert 'nestor.orchestrator.planning' not in sys.modules\n")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_a_spec_that_fixes_its_shape_still_gets_every_row_its_own_marked(
        spec: Path) -> None:
    spec.write_text(SPEC.replace("parallel: auto", "parallel: {data: 2, model: 1}")
                    .replace("    batch: {global_max: 256}\n", ""))
    result = CliRunner().invoke(cli, ["plan", str(spec), "--slots", "16"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    header = next(i for i, line in enumerate(lines) if "configuration" in line)
    table = [line for line in lines[header + 1:] if line.strip()]
    assert "no shape fits" not in result.output
    assert [line.split("  ")[0].strip().removesuffix(" (spec)") for line in table
            if "spec's" not in line] == list(ROWS)
    marked = [line for line in table if "spec" in line]
    assert len(marked) == 1 and " 2x1 " in marked[0]
    assert marked[0].strip().startswith("HPO+DP")  # dp 2, mp 1: the data-parallel row


CONFIGS = Path(__file__).parents[3] / "configs"


def _table(output: str) -> list[str]:
    lines = output.splitlines()
    header = next(i for i, line in enumerate(lines) if "configuration" in line)
    return [line for line in lines[header + 1:] if line.startswith(" ")]


@pytest.mark.parametrize("config", ["quickstart.yaml", "mnist-combined.yaml"])
@pytest.mark.parametrize("slots", ["8", "16"])
def test_the_readme_configs_fixed_shape_gets_every_row_its_own_marked(
        config: str, slots: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The README's configs fix parallel: {data: 2, model: 1}; their table still prices
    every row with both factors free (it said "no shape fits" in three of six)."""
    monkeypatch.setenv("NESTOR_CACHE_DIR", str(tmp_path / "cache"))
    result = CliRunner().invoke(cli, ["plan", str(CONFIGS / config), "--slots", slots])
    assert result.exit_code == 0, result.output
    table = _table(result.output)
    assert "no shape fits" not in result.output
    labels = [line.strip().split("  ")[0].removesuffix(" (spec)") for line in table]
    assert [label for label in labels if "spec's" not in label] == list(ROWS)
    marked = [line for line in table if "spec" in line]
    assert len(marked) == 1 and " 2x1 " in marked[0]


def test_simulate_runs_every_row_at_32768_slots_beside_its_prediction(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--simulate runs each row on a simulated cluster of the allocation and prints its
    time beside the predicted one, and how much faster auto's pick ran than each row."""
    monkeypatch.setenv("NESTOR_CACHE_DIR", str(tmp_path / "cache"))
    result = CliRunner().invoke(cli, ["plan", str(CONFIGS / "quickstart.yaml"), "--slots",
                                      "32768", "--simulate"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    header = next(line for line in lines if "configuration" in line).split()
    assert header[-9:] == ["predicted", "s", "speed-up", "simulated", "s", "sim.", "x",
                           "auto", "x"]
    table = _table(result.output)
    assert len(table) == 7  # six rows and the spec's own 2x1
    for line in table:
        predicted, _, simulated, sim_x, auto_x = line.split()[-5:]
        if simulated == "-":  # a group wider than a node: said why, under the table
            assert "not simulated" in result.output
            continue
        assert float(simulated) >= float(predicted)
        assert sim_x.endswith("x") and auto_x.endswith("x")
    assert table[-1].split()[-1] == "1.00x"  # auto's own row


def test_simulated_rows_take_the_prediction_plus_one_gang_start(tmp_path: Path) -> None:
    """On a simulated cluster each row's runs last the cost model's prediction; the
    scheduler adds one gang start-up (warm gangs take the later waves and runs)."""
    import io

    from rich.console import Console

    from nestor.orchestrator.commands.plan_simulation import row_simulator
    from nestor.orchestrator.planning import GANG_START_S
    from nestor.orchestrator.planning.report import render
    from nestor.orchestrator.spec import load_spec

    for slots in (8, 16):
        data = render(Console(file=io.StringIO(), width=120),
                      load_spec(CONFIGS / "quickstart.yaml"), stage=None, slots=slots,
                      measure=False, do_profile=False, random_runs=None,
                      places=(tmp_path / "none",), simulator=row_simulator)
        rows = data["table"]
        assert len(rows) >= 6 and all(r["simulated_s"] for r in rows)
        for row in rows:
            assert row["simulated_s"] == pytest.approx(row["predicted_s"] + GANG_START_S), row
        auto = next(r for r in rows if r["label"] == "HPO+DP+MP")
        assert all(r["auto_faster"] == pytest.approx(r["simulated_s"] / auto["simulated_s"])
                   for r in rows)
