"""bench/REPORT.md is rendered from the committed results alone, and each result says
where it came from (bench/report.py, bench/machine.py)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from bench import machine, report

ROOT = Path(__file__).resolve().parents[2]


def test_the_committed_report_is_what_the_committed_results_render() -> None:
    """The check CI runs: a hand edit of REPORT.md, or a result committed without
    rerendering, fails here."""
    done = subprocess.run([sys.executable, "-m", "bench.report", "--check"], cwd=ROOT,
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


MULTI = {"seeds": 2, "parallel": 4, "max_epochs": 27, "quality": 5.0, "rows": [
    {"search": "asha", "q1": 100.0, "q3": 130.0,
     "epochs": {"reached": 1, "seeds": 2, "median": 120.0, "low": 100.0, "high": 140.0,
                "median_is_lower_bound": True, "high_is_lower_bound": True},
     "per_seed": [{"epochs": 100.0, "reached": True}, {"epochs": 140.0, "reached": False}]}]}


def test_check_fails_when_the_report_differs_from_the_results(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(machine, "RESULTS", tmp_path / "results")
    machine.write_result("multifidelity", MULTI)
    out = tmp_path / "REPORT.md"
    report.render(tmp_path / "results", out)
    assert report.check(tmp_path / "results", out) == 0
    assert "| asha | ≥ 120 [100–≥ 140], 1/2 reached |" in out.read_text()
    out.write_text(out.read_text().replace("| asha | ≥ 120", "| asha | ≥ 99"))  # a hand edit
    assert report.check(tmp_path / "results", out) == 1
    report.render(tmp_path / "results", out)
    changed = json.loads((tmp_path / "results" / "multifidelity.json").read_text())
    changed["rows"][0]["epochs"]["median"] = 99.0  # a new result, not rendered
    (tmp_path / "results" / "multifidelity.json").write_text(json.dumps(changed))
    assert report.check(tmp_path / "results", out) == 1


def test_every_result_records_its_command_commit_machine_and_load(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(machine, "RESULTS", tmp_path)
    monkeypatch.setattr(sys, "argv", [str(ROOT / "bench" / "multifidelity_bench.py"),
                                      "--seeds", "2"])
    machine.write_result("multifidelity", MULTI)
    m = json.loads((tmp_path / "multifidelity.json").read_text())["machine"]
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True,
                          text=True, check=True).stdout.strip()
    assert m["command"] == "python bench/multifidelity_bench.py --seeds 2"
    assert m["commit"] == head and isinstance(m["dirty"], bool)
    assert m["cores"] >= 1 and m["cpu"] and m["memory_gib"] > 0 and m["gpu"]
    assert len(m["load_average_at_start"]) == len(m["load_average_at_end"]) == 3


def test_the_headline_names_command_commit_and_machine_and_says_what_was_not_run(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(machine, "RESULTS", tmp_path)
    text = report.render(tmp_path, tmp_path / "REPORT.md").read_text()
    assert "None: no results file is committed" in text
    assert "## Multi-fidelity searches on simulated training\n\nNot run." in text
    machine.write_result("multifidelity", MULTI)
    (tmp_path / "backends.json").write_text(json.dumps({  # written before provenance
        "machine": "2 cores", "repeats": 3, "epochs": 3, "batch_per_rank": 64, "mp_width": 8,
        "cases": {"dp2": {"horovod_samples_per_s": 1.0, "torch_samples_per_s": 1.0,
                          "torch_over_horovod": 1.0, "max_train_loss_diff": 0.0}},
        "command": "python bench/backend_bench.py"}))
    text = report.render(tmp_path, tmp_path / "REPORT.md").read_text()
    head = text.split("## Headline figures")[1].split("\n## ")[0]
    figures = [line for line in head.splitlines() if line.startswith("- ")]
    assert len(figures) == 1 and "asha ≥ 120 [100–≥ 140], 1/2 reached" in figures[0], head
    m = json.loads((tmp_path / "multifidelity.json").read_text())["machine"]
    assert re.search(rf"\*From\* `{re.escape(m['command'])}`, commit `{m['commit'][:10]}`",
                     figures[0]), figures[0]
    assert f"{m['cores']} cores ({m['cpu']})" in figures[0]
    assert "Not in the headline" in head and "torch.distributed over Horovod" in head


def test_multifidelity_counts_every_seed_and_marks_those_that_never_got_there(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """bench/multifidelity_bench.py through bench/stats.py: each seed's epochs and
    whether it reached the quality; a seed that did not counts as a lower bound."""
    from bench import multifidelity_bench

    monkeypatch.setattr(machine, "RESULTS", tmp_path)
    multifidelity_bench.main(["--seeds", "3"])
    rows = json.loads((tmp_path / "multifidelity.json").read_text())["rows"]
    for row in rows:
        seeds, summary = row["per_seed"], row["epochs"]
        assert summary["seeds"] == len(seeds) == 3
        assert summary["reached"] == sum(s["reached"] for s in seeds)
        assert summary["high"] == max(s["epochs"] for s in seeds)
        assert summary["high_is_lower_bound"] == (summary["reached"] < 3)
