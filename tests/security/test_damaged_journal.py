"""A damaged run directory gives one clear error, never a traceback or a silent re-run.

Today a garbage line, flipped bytes or a truncated attempt file end `status` and
`resume` in JournalError/JSONDecodeError tracebacks (or, for flipped bytes, in
nothing at all), a journal cut short or emptied resumes and runs again trials
whose results are still in attempts/, and `nestor results` cannot show a run that
did not finish. Each journal line now carries a checksum; every reader stops on a
damaged line naming the file and line and what to do; a resume first checks that
the journal knows every result on disk.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from nestor.orchestrator.journal.events import TrialFinished, WorkflowStarted
from nestor.orchestrator.journal.journal import (
    Journal,
    JournalError,
    iter_events,
    read_events,
    verify,
)
from nestor.orchestrator.journal.state import RunState

NESTOR = str(Path(sys.executable).parent / "nestor")
FIT = """\
import os, sys
with open(os.environ["FIT_LOG"], "a") as log:
    log.write(" ".join(sys.argv[1:]) + "\\n")
x = float(sys.argv[1].split("=", 1)[1])
print(f"FoM: {(x - 0.25) ** 2}")
"""


# -- the line format: no Ray ------------------------------------------------------------


def journal_of(path: Path, trials: int = 3) -> Path:
    with Journal(path, fsync=False) as journal:
        journal.record(WorkflowStarted(workflow="w", slots=1, pid=1, run_key="k"))
        for n in range(trials):
            journal.record(TrialFinished(stage="s", trial={"id": f"t{n}", "config": {}},
                                         attempt=1, status="completed", value=0.123456 + n,
                                         metrics={}, reason=None, slot_seconds=1.0))
    return path


def flip(path: Path, number: int, old: bytes, new: bytes) -> None:
    """Change the first ``old`` of line ``number`` (from 1) to ``new``."""
    lines = path.read_bytes().splitlines(keepends=True)
    assert old in lines[number - 1]
    lines[number - 1] = lines[number - 1].replace(old, new, 1)
    path.write_bytes(b"".join(lines))


def test_a_flipped_byte_in_any_line_is_found_by_every_reader(tmp_path: Path) -> None:
    path = journal_of(tmp_path / "journal.jsonl")
    flip(path, 3, b"1.123456", b"1.123457")  # still JSON, still an event: only a checksum knows
    for read in (lambda: read_events(path), lambda: list(iter_events(path)), lambda: verify(path),
                 lambda: list(iter_events(path, kinds=frozenset({"trial_finished"}))),
                 lambda: RunState.of(tmp_path), lambda: RunState.of(tmp_path, trials=False)):
        with pytest.raises(JournalError, match=r"journal.jsonl: line 3 does not match its"
                                               r" checksum.*head -n 2"):
            read()


@pytest.mark.parametrize("trials", [False, True])
def test_a_byte_changed_before_a_snapshots_offset_is_found(tmp_path: Path, trials: bool) -> None:
    """`nestor status` folds from its snapshot: only the lines after its offset are
    read again, and its old check saw only the last 4 KiB before it."""
    path = journal_of(tmp_path / "journal.jsonl", trials=200)
    assert RunState.of(tmp_path, trials=trials).stages["s"].count("completed") == 200
    assert path.stat().st_size > 10 * 4096  # the snapshot covers it all
    flip(path, 3, b"1.123456", b"1.123457")
    with pytest.raises(JournalError, match="line 3 does not match its checksum"):
        RunState.of(tmp_path, trials=trials)


def test_a_journal_from_before_checksums_still_reads(tmp_path: Path) -> None:
    path = journal_of(tmp_path / "journal.jsonl")
    old = [json.loads(line) for line in path.read_text().splitlines()]
    for record in old:
        del record["crc"]
    path.write_text("".join(json.dumps(r) + "\n" for r in old))
    assert [e["event"] for e in read_events(path)] == ["workflow_started"] + ["trial_finished"] * 3
    assert RunState.of(tmp_path).stages["s"].count("completed") == 3
    with Journal(path, fsync=False) as journal:  # resumed by this version: checksums from now on
        journal.record(WorkflowStarted(workflow="w", slots=1, pid=2, run_key="k"))
    assert len(read_events(path)) == 5


def test_a_checksum_that_does_not_read_is_damage_too(tmp_path: Path) -> None:
    path = journal_of(tmp_path / "journal.jsonl")
    lines = path.read_bytes().splitlines(keepends=True)
    lines[1] = lines[1][:-4] + b'g"}\n'  # its last hex digit is no digit
    path.write_bytes(b"".join(lines))
    with pytest.raises(JournalError, match="line 2 does not match its checksum"):
        read_events(path)


# -- the commands on a real run ---------------------------------------------------------


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A real command sweep of 4 trials, one at a time: its run directory and the log
    of every trial its command ran."""
    where = tmp_path_factory.mktemp("sweep")
    (where / "fit.py").write_text(FIT)
    log = where / "fit.log"
    done = subprocess.run(
        [NESTOR, "sweep", "--command", f"{sys.executable} {where / 'fit.py'}",
         "--param", "x=float:-1:1", "--mode", "min", "--algorithm", "random", "--budget", "4",
         "--parallel", "1",
         "--run-dir", str(where / "run")],
        capture_output=True, text=True, env=dict(os.environ, FIT_LOG=str(log)),
        check=False, timeout=600)
    assert done.returncode == 0, done.stderr
    assert len(log.read_text().splitlines()) == 4
    return where / "run", log


def interrupted(finished_run: tuple[Path, Path], tmp_path: Path, keep: float | None = None
                ) -> tuple[Path, Path]:
    """A copy of the run as a driver killed before its last trial's end was journalled
    leaves it (that trial's result on disk, unheard), or cut to its first ``keep``
    share of lines; with its own copy of the trials' log."""
    run = tmp_path / "run"
    shutil.copytree(finished_run[0], run)
    shutil.copy(finished_run[1], tmp_path / "fit.log")
    (run / "results.json").unlink()
    for snapshot in run.glob("journal.fold*.json"):
        snapshot.unlink()
    lines = (run / "journal.jsonl").read_bytes().splitlines(keepends=True)
    if keep is None:
        last_end = max(i for i, line in enumerate(lines) if b'"event":"trial_finished"' in line)
        lines = lines[:last_end]
    else:
        lines = lines[:int(len(lines) * keep)]
    (run / "journal.jsonl").write_bytes(b"".join(lines))
    return run, tmp_path / "fit.log"


def nestor(*args: object, log: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, FIT_LOG=str(log or os.devnull))
    return subprocess.run([NESTOR, *map(str, args)], capture_output=True, text=True, env=env,
                          check=False, timeout=600)


def one_clear_error(done: subprocess.CompletedProcess[str], *words: str) -> str:
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, done.stderr
    for word in words:
        assert word in errors[0], errors[0]
    return errors[0]


@pytest.mark.slow
def test_results_shows_an_interrupted_run_from_its_journal(finished_run, tmp_path) -> None:
    run, _ = interrupted(finished_run, tmp_path)
    done = nestor("results", run)
    assert done.returncode == 0, done.stderr
    assert "results so far, read from its journal" in done.stdout
    assert f"nestor resume {run}" in " ".join(done.stdout.split())
    rows = [line.split() for line in done.stdout.splitlines() if line.split()[:1] == ["sweep"]]
    assert ["sweep", "4", "4", "0"] in [r[:4] for r in rows], done.stdout  # 3 ended, 1 running
    table = json.loads(nestor("results", run, "--format", "json").stdout)
    (stage,) = table["stages"]
    assert table["unfinished"] and stage["n_trials"] == 4
    assert sorted(t["status"] for t in stage["trials"]) == ["completed"] * 3 + ["running"]


@pytest.mark.slow
@pytest.mark.parametrize("keep", [0.0, 0.6])
def test_a_journal_shorter_than_the_results_on_disk_stops_the_resume(finished_run, tmp_path,
                                                                     keep: float) -> None:
    run, log = interrupted(finished_run, tmp_path, keep=keep)
    before = sorted(p.stat().st_mtime_ns for p in (run / "attempts").rglob("*.json"))
    journal = (run / "journal.jsonl").read_bytes()
    done = nestor("resume", run, log=log)
    one_clear_error(done, "shorter than the results on disk", "attempts", "Restore the journal")
    assert len(log.read_text().splitlines()) == 4  # no trial ran again
    assert sorted(p.stat().st_mtime_ns for p in (run / "attempts").rglob("*.json")) == before
    assert (run / "journal.jsonl").read_bytes() == journal


@pytest.mark.slow
def test_a_truncated_attempt_file_is_named_not_a_traceback(finished_run, tmp_path) -> None:
    run, log = interrupted(finished_run, tmp_path)
    ended = {e["trial"]["id"] for e in read_events(run / "journal.jsonl")
             if e["event"] == "trial_finished"}
    (unheard,) = [p for p in (run / "attempts").rglob("*.json") if p.parent.name not in ended]
    unheard.write_bytes(unheard.read_bytes()[:40])
    one_clear_error(nestor("resume", run, log=log), str(unheard), "delete it")
    assert len(log.read_text().splitlines()) == 4


@pytest.mark.slow
def test_a_garbage_line_stops_status_resume_and_results(finished_run, tmp_path) -> None:
    run, log = interrupted(finished_run, tmp_path)
    lines = (run / "journal.jsonl").read_bytes().splitlines(keepends=True)
    lines.insert(4, b"garbage \x00\xff not an event\n")
    (run / "journal.jsonl").write_bytes(b"".join(lines))
    for command in ("status", "resume", "results"):
        one_clear_error(nestor(command, run, log=log), "journal.jsonl: line 5",
                        "Restore it from a copy")
    assert len(log.read_text().splitlines()) == 4


@pytest.mark.slow
def test_flipped_bytes_are_found_by_status(finished_run, tmp_path) -> None:
    run, _ = interrupted(finished_run, tmp_path)
    lines = (run / "journal.jsonl").read_bytes().splitlines(keepends=True)
    at = next(i for i, line in enumerate(lines) if b'"event":"trial_finished"' in line)
    value = json.loads(lines[at])["value"]
    lines[at] = lines[at].replace(json.dumps(value).encode(), json.dumps(value + 1).encode(), 1)
    assert nestor("status", run).returncode == 0  # its snapshot now covers every line
    (run / "journal.jsonl").write_bytes(b"".join(lines))
    one_clear_error(nestor("status", run), f"journal.jsonl: line {at + 1} does not match")
