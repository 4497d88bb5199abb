"""Held out means held out (issue 40 item 4): bench/heldout_ledger.py records which
problems each revision of auto's rules was fitted on and which judged it, and
``python -m bench.report --check`` fails where a judging problem fits a later revision
or judges a second one without the ledger saying so, or where a result comes from
uncommitted code."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from bench import heldout_ledger, report
from bench.heldout_ledger import Judgement, Revision

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "bench" / "results"
DEV = frozenset({"b:dev-1", "b:dev-2"})
HELD = frozenset({"b:held-1", "b:held-2"})
FRESH = frozenset({"b:fresh-1"})


def test_the_real_ledger_agrees_with_the_history_and_the_committed_results() -> None:
    """The committed ledger is honest: every reuse in the history is marked, every
    held-out or fitting result it names is committed, ran the problems it says and (for
    a judgement) the revision it says; no committed result is left out of it, and no
    committed result comes from a dirty tree."""
    assert heldout_ledger.problems() == []
    assert report.ledger_problems(RESULTS) == []
    assert report.dirty_results(RESULTS) == []
    # The audit's case: rule W judged on the pair that had judged rule M, marked reused.
    rule_w = next(r for r in heldout_ledger.LEDGER if r.name == "rule W")
    pair = next(j for j in rule_w.judged_by
                if "many_at_once_heldout_mf_w64_rule_w.json" in j.results)
    assert pair.reused and "rule M" in pair.reused
    text = (ROOT / "bench" / "REPORT.md").read_text()
    section = text.split("### many_at_once_heldout_mf_w64_rule_w.json")[1].split("\n### ")[0]
    assert "**Reused held-out set, not fresh evidence**" in section
    assert "this run judged rule W (`23e3c9d`)" in section


def test_a_problem_that_judged_a_revision_cannot_fit_a_later_one_unsaid() -> None:
    judged = Revision("A", "a", "first", fitted_on=DEV,
                      judged_by=(Judgement(HELD, ("held.json",)),))
    refit = Revision("B", "b", "fitted on what judged A", fitted_on=DEV | HELD)
    found = heldout_ledger.problems((judged, refit))
    assert len(found) == 1 and "B (b) was fitted on problems that had judged A (a)" in found[0]
    said = Revision("B", "b", "fitted on what judged A", fitted_on=DEV | HELD,
                    fit_reuses="chosen on A's held-out run")
    assert heldout_ledger.problems((judged, said)) == []
    # Fitting again on dev problems is no reuse, and saying it is is refused.
    assert heldout_ledger.problems((judged, Revision("B", "b", "dev", fitted_on=DEV))) == []
    assert "fit_reuses" in heldout_ledger.problems(
        (judged, Revision("B", "b", "dev", fitted_on=DEV, fit_reuses="why"),))[0]


def test_two_revisions_judged_by_one_set_fail_unless_the_second_is_marked_reused() -> None:
    first = Revision("A", "a", "first", fitted_on=DEV,
                     judged_by=(Judgement(HELD, ("a.json",)),))
    again = Revision("B", "b", "second", fitted_on=DEV,
                     judged_by=(Judgement(HELD | FRESH, ("b.json",)),))
    found = heldout_ledger.problems((first, again))
    assert len(found) == 1 and "B (b) judged by b.json on problems already used (A (a))" in found[0]
    marked = Revision("B", "b", "second", fitted_on=DEV,
                      judged_by=(Judgement(HELD, ("b.json",), reused="they judged A"),))
    assert heldout_ledger.problems((first, marked)) == []
    fresh = Revision("B", "b", "second", fitted_on=DEV,
                     judged_by=(Judgement(FRESH, ("b.json",)),))
    assert heldout_ledger.problems((first, fresh)) == []
    # A set judging problems a revision was fitted on is no held-out set either.
    on_dev = Revision("B", "b", "second", fitted_on=DEV, judged_by=(Judgement(DEV, ("b.json",)),))
    assert "already used (fitting A (a))" in heldout_ledger.problems((first, on_dev))[0]
    # Marking a fresh set reused is refused too: the label must say what happened.
    wrong = Revision("B", "b", "second", fitted_on=DEV,
                     judged_by=(Judgement(FRESH, ("b.json",), reused="why"),))
    assert "marked reused" in heldout_ledger.problems((first, wrong))[0]


def test_the_report_labels_reused_judgements_and_fresh_ones() -> None:
    assert heldout_ledger.label("multifidelity_auto.json") == (
        "Held out (`bench/heldout_ledger.py`): this run judged rule P (`9ea6b9d`), the first"
        " use of these problems.")
    reused = heldout_ledger.label("many_at_once_heldout_mf_w64_rule_w.json")
    assert reused is not None and reused.startswith("**Reused held-out set")
    assert "rule W (`23e3c9d`) fitted on this run" in (
        heldout_ledger.label("many_at_once_dev_mf_w16_32.json") or "")
    assert heldout_ledger.label("journal.json") is None


@pytest.fixture
def committed_copy(tmp_path: Path) -> Path:
    """A copy of the committed results, checked as the committed ones are."""
    copy = tmp_path / "results"
    shutil.copytree(RESULTS, copy)
    return copy


def test_the_check_fails_on_a_held_out_run_the_ledger_does_not_record(
        committed_copy: Path) -> None:
    assert report.ledger_problems(committed_copy, committed=True) == []
    shutil.copy(committed_copy / "many_at_once_rule3a16.json",
                committed_copy / "many_at_once_new.json")  # a rerun, not recorded
    found = report.ledger_problems(committed_copy, committed=True)
    assert len(found) == 1 and found[0].startswith("many_at_once_new.json ran problems"), found
    (committed_copy / "many_at_once_new.json").unlink()
    (committed_copy / "multifidelity_auto.json").unlink()
    found = report.ledger_problems(committed_copy, committed=True)
    assert found == [f"rule P: multifidelity_auto.json is not in {committed_copy} (or git)"]


def test_the_check_fails_on_a_judgement_made_on_another_revisions_code(
        committed_copy: Path) -> None:
    """A held-out rerun at a later commit (make bench-quick at main) must be recorded
    as judging the revision it ran, not the one its file judged before."""
    path = committed_copy / "many_at_once_rule3a16.json"
    data = json.loads(path.read_text())
    data["machine"]["commit"] = heldout_ledger.LEDGER[-1].commit  # rule P's code
    path.write_text(json.dumps(data))
    found = report.ledger_problems(committed_copy, committed=True)
    assert len(found) == 1 and "recorded as judging rule 3a (`e925c1a`)" in found[0], found


def test_check_fails_on_a_result_from_a_dirty_tree(committed_copy: Path) -> None:
    out = committed_copy.parent / "REPORT.md"
    shutil.copy(ROOT / "bench" / "REPORT.md", out)
    path = committed_copy / "many_at_once_dev_mf_w256.json"
    data = json.loads(path.read_text())
    data["machine"]["dirty"] = True
    path.write_text(json.dumps(data))
    assert report.dirty_results(committed_copy) == [
        "many_at_once_dev_mf_w256.json: made at `7dc4db2199` with uncommitted changes in the"
        " tree; rerun it at a commit, or remove it"]
    report.render(committed_copy, out)  # rendered as it is: still refused
    assert report.check(committed_copy, out) == 1
