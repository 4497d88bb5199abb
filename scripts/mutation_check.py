#!/usr/bin/env python3
"""Break the code that carries nestor's main guarantees on purpose, a line or two at a
time, and check that the tests written for each guarantee catch every breakage.

    .venv/bin/python scripts/mutation_check.py            # every breakage (make mutation-check)
    .venv/bin/python scripts/mutation_check.py --list     # what each breaks, and its tests
    .venv/bin/python scripts/mutation_check.py --only resume-tell,projector-first

Each breakage (a *mutant*) is an exact string replacement in one file. It is applied to
a copy of the working tree in a temporary folder (this checkout is never touched, so a
kill at any moment leaves nothing broken), and only that guarantee's tests run there,
with the copy first on the import path (the tests' subprocesses too). A mutant whose
text no longer appears exactly once fails the check (the code moved: update the list
here). The tests first run once on the unbroken copy and must pass. Exit status 1 if
any mutant survived (its tests all passed) or anything could not run.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Seconds one test may take here: a breakage that makes a test hang (an fsync that never
# comes) fails it at this limit instead of pytest's default.
TEST_TIMEOUT_S = 60


@dataclass(frozen=True)
class Mutant:
    name: str
    guarantee: str  # what the breakage takes away
    path: str  # the file, from the checkout's root
    old: str  # exact text, found exactly once
    new: str
    tests: tuple[str, ...]  # pytest arguments: the tests that stand for the guarantee


KILL = "tests/orchestrator/engine/test_kill_after_a_result.py"
PROJECTOR = "tests/orchestrator/projections/test_projector.py"
JOURNAL = "tests/orchestrator/journal/test_journal.py"

MUTANTS: tuple[Mutant, ...] = (
    Mutant("journal-fsync", "the journal makes events durable (fsync) before it says so",
           "orchestrator/journal/journal.py",
           "            try:\n                os.fsync(self._fd)\n"
           "            except OSError as exc:",
           "            try:\n                pass\n            except OSError as exc:",
           (f"{JOURNAL}::test_many_events_share_one_fsync_and_none_is_acked_before_its_fsync",)),
    Mutant("journal-gate", "a launched trial runs only once the events before it are durable",
           "orchestrator/journal/journal.py",
           "return functools.partial(self.wait, self._seq)",
           "return functools.partial(self.wait, 0)",
           (f"{JOURNAL}::test_a_gate_opens_only_once_the_events_before_it_are_durable",)),
    Mutant("resume-tell", "resume tells the searcher a result journalled just before the kill",
           "orchestrator/engine/trials.py",
           "            if record.status != TrialStatus.RUNNING and record.id in pending:\n"
           "                self._tell(pending.pop(record.id), record)\n",
           "            if record.status != TrialStatus.RUNNING and record.id in pending:\n"
           "                pass\n",
           (f"{KILL}::test_a_result_journalled_just_before_the_kill_is_told_once_on_resume",)),
    Mutant("adoption", "a result that landed while the driver was down is adopted, not rerun",
           "orchestrator/engine/trials.py",
           "            if self._adopt(trial, ended, begun):\n",
           "            if False and self._adopt(trial, ended, begun):\n",
           (f"{KILL}::test_a_result_that_landed_while_the_driver_was_down_is_adopted_on_resume",)),
    Mutant("projector-first", "MLflow shows the first event of every batch",
           "orchestrator/projections/projector.py",
           "                if seq < self.done or event is None:\n"
           "                    self._remember(event)",
           "                if seq <= self.done or event is None:\n"
           "                    self._remember(event)",
           (PROJECTOR, "-m", "not slow", "-k", "every_event")),
    Mutant("projector-between", "MLflow shows the event after a batch (none skipped between)",
           "orchestrator/projections/projector.py",
           "                del self._pending[:len(batch)]\n",
           "                del self._pending[:len(batch) + 1]\n",
           (PROJECTOR, "-m", "not slow", "-k", "every_event")),
    Mutant("budget-told-cost", "a cost-budgeted search counts each trial's told cost in full",
           "search/_budget.py",
           "            spent = float(cost)\n",
           "            spent = float(cost) / 2\n",
           ("tests/search/test_cost_budget.py",)),
    Mutant("budget-startup", "a slot-seconds budget pays for starting gangs too",
           "orchestrator/engine/trials.py",
           "return record.slot_seconds + record.startup_slot_seconds",
           "return record.slot_seconds",
           ("tests/orchestrator/engine/test_budget_paid.py",)),
)


def copy_tree(target: Path) -> None:
    """The working tree as git sees it (tracked files and new ones not ignored)."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            cwd=ROOT, capture_output=True, check=True).stdout
    for name in sorted({n for n in listed.decode().split("\0") if n}):
        source = ROOT / name
        if source.is_symlink():  # nestor/orchestrator -> ../orchestrator: the copy's own
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            (target / name).symlink_to(os.readlink(source))
        elif source.is_file():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name)


def not_applying(root: Path, mutants: tuple[Mutant, ...] = MUTANTS) -> list[str]:
    """The mutants whose text is not in ``root``'s file exactly once (the code moved)."""
    problems = []
    for m in mutants:
        found = (root / m.path).read_text().count(m.old)
        if found != 1:
            problems.append(f"{m.name}: its text is in {m.path} {found} times, not once"
                            " (the code moved: update scripts/mutation_check.py)")
    return problems


def pytest(copy: Path, args: tuple[str, ...]) -> tuple[int, float, str]:
    """Run ``args``' tests in ``copy``; (exit status, seconds, the output's tail)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(copy), *filter(None, [os.environ.get("PYTHONPATH")])]))
    began = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider",
                           "--timeout", str(TEST_TIMEOUT_S), *args], cwd=copy, env=env,
                          capture_output=True, text=True, check=False)
    return done.returncode, time.monotonic() - began, (done.stdout + done.stderr)[-1500:]


def imports_from(copy: Path) -> str:
    env = dict(os.environ, PYTHONPATH=str(copy))
    return subprocess.run([sys.executable, "-c", "import nestor.orchestrator, nestor.search;"
                           " print(nestor.orchestrator.__file__); print(nestor.search.__file__)"],
                          cwd=copy, env=env, capture_output=True, text=True, check=True).stdout


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--only", default=None, help="comma-separated mutant names (default: all)")
    p.add_argument("--list", action="store_true", help="list the mutants and their tests")
    args = p.parse_args(argv)
    names = [m.name for m in MUTANTS]
    chosen = MUTANTS
    if args.only:
        wanted = args.only.split(",")
        unknown = sorted(set(wanted) - set(names))
        if unknown:
            p.error(f"--only must name mutants of {', '.join(names)}, but got {unknown}")
        chosen = tuple(m for m in MUTANTS if m.name in wanted)
    if args.list:
        for m in chosen:
            print(f"{m.name}: breaks '{m.guarantee}' in {m.path}; tests: {' '.join(m.tests)}")
        return 0
    failures: list[str] = []
    with tempfile.TemporaryDirectory(prefix="nestor-mutants-") as scratch:
        copy = Path(scratch)
        copy_tree(copy)
        where = imports_from(copy)
        if any(not line.startswith(str(copy)) for line in where.split()):
            print(f"the copy's code is not what its tests import:\n{where}")
            return 1
        failures = not_applying(copy, chosen)  # the mutants must apply, before anything runs
        if failures:
            print("\n".join(failures))
            return 1
        tests = tuple(dict.fromkeys(m.tests for m in chosen))
        for group in tests:  # unbroken, every guarantee's tests pass
            rc, seconds, tail = pytest(copy, group)
            print(f"unbroken: {' '.join(group)}: {'pass' if rc == 0 else 'FAIL'}"
                  f" ({seconds:.0f} s)", flush=True)
            if rc != 0:
                print(tail)
                return 1
        for m in chosen:
            path = copy / m.path
            text = path.read_text()
            path.write_text(text.replace(m.old, m.new))
            try:
                rc, seconds, tail = pytest(copy, m.tests)
            finally:
                path.write_text(text)
            caught = rc != 0
            print(f"{m.name}: {'caught' if caught else 'SURVIVED'} ({seconds:.0f} s) -"
                  f" {m.guarantee}", flush=True)
            if not caught:
                failures.append(f"{m.name}: {m.path} broken ('{m.guarantee}') and"
                                f" {' '.join(m.tests)} all passed")
    if failures:
        print("\n".join(["mutants that survived:", *failures]))
        return 1
    print(f"all {len(chosen)} mutants caught")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
