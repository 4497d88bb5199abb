"""What a trial logs for its MLflow run besides its results: metrics at steps, tags, files.

A function trainer calls ``ctx.log_metrics({"loss": 0.3}, step=3)``,
``ctx.set_tags({"arch": "mlp"})`` and ``ctx.log_artifact("confusion.png")``; a
command trainer prints lines on its stdout::

    nestor.metric loss=0.31 acc=0.9 step=3
    nestor.tag arch=mlp with dropout

and writes files into the folder ``NESTOR_ARTIFACT_DIR`` names. A function's
``ctx.log_artifact`` copies a file into that same folder (``ctx.artifact_dir``),
inside the run directory (``artifacts/STAGE/TRIAL/``): the file outlives the
driver, a retried attempt keeps what an earlier one left, and whatever the
folder holds when the trial ends is its artifacts. Rank 0's logging counts.

All of it travels with the trial's result (``TrialResult.logged``, written to
its result file before the driver hears of it), into the journal's
``trial_finished`` event, and from there into the trial's MLflow run, once:
a driver killed at any point adopts the result or projects the event again,
and MLflow keeps one point per metric, step, time and value.

Bounded by design, whatever the trainer prints: each metric keeps at most
``MAX_POINTS`` points (thinned evenly as ``trainers.history`` thins a history,
the latest kept), at most ``MAX_METRICS`` metric names and ``MAX_TAGS`` tags
(later new names are ignored, with a note), a tag's value at most
``MAX_TAG_VALUE`` characters, and at most ``MAX_ARTIFACTS`` files are
recorded. A trial's ``logged`` is then under 1 MB of journal (20,000 points,
100 kB of tags), however much it logs; what a resumed driver reads back of
it is as bounded.
"""

from __future__ import annotations

import hashlib
import math
import os
import re
import shutil
import time
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import Any

from nestor.trainers.history import MAX_HISTORY, BoundedHistory

ARTIFACTS_ENV = "NESTOR_ARTIFACT_DIR"  # a command trainer's artifact folder
MAX_POINTS = MAX_HISTORY // 2  # points kept per metric name (enough for any curve)
MAX_METRICS = 40  # metric names per trial
MAX_TAGS = 50  # tags per trial
MAX_TAG_VALUE = 2000  # characters of a tag's value kept
MAX_ARTIFACTS = 100  # files recorded per trial
MAX_PROBLEMS = 5  # notes on what was ignored, kept (and how many there were)
RESERVED = ("nestor.", "mlflow.")  # tag prefixes that are nestor's and MLflow's own
METRIC_LINE, TAG_LINE = "nestor.metric", "nestor.tag"
# What MLflow takes as a metric or tag name (letters, digits, _ - . space /), not
# climbing out with '..' nor starting with '/'.
NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_\-. /]{0,249}")
# A metric or tag line, at the start of the line or after a launcher's prefix
# (horovodrun's "[1,0]<stdout>:", torchrun's "[rank0]: ").
_LINE = re.compile(r"^\s*(?:\[[^\]]{1,40}\](?:<stdout>|<stderr>)?:\s*)?"
                   r"(nestor\.metric|nestor\.tag)(?:\s+(.*?))?\s*$")
_NUMBER = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


def name_problem(name: object, what: str = "metric") -> str | None:
    """Why ``name`` cannot name a metric or tag in MLflow, or None.

    >>> name_problem("val/loss"), name_problem("a/../b") is not None
    (None, True)
    """
    if not isinstance(name, str) or NAME.fullmatch(name) is None or ".." in name.split("/"):
        return (f"{what} name {str(name)[:80]!r} is not allowed: letters, digits, '_', '-',"
                " '.', ' ' and '/' (no '..'), at most 250 characters")
    if what == "tag" and name.startswith(RESERVED):
        return f"tag {name!r} is not allowed: tags starting with nestor. or mlflow. are nestor's"
    return None


def artifact_name_problem(name: object) -> str | None:
    """Why ``name`` cannot be a file's place among a run's artifacts (a relative
    path of plain components), or None."""
    if not isinstance(name, str) or not name or "\0" in name or "\\" in name:
        return f"artifact {str(name)[:80]!r} is not a relative file name"
    parts = PurePosixPath(name).parts
    if name.startswith("/") or any(part in ("", ".", "..") for part in parts):
        return f"artifact {name[:80]!r} is not a relative path inside its folder"
    return None


class Logged:
    """One trial's logged metrics and tags, bounded; ``record`` adds its files."""

    def __init__(self) -> None:
        self.metrics: dict[str, BoundedHistory] = {}
        self.tags: dict[str, str] = {}
        self.problems: list[str] = []
        self.ignored = 0  # everything ignored, noted or not
        self._kinds: set[str] = set()  # the limits met: each noted once

    def note(self, problem: str, kind: str | None = None) -> None:
        """Something the trainer logged was ignored; the first few say what (a limit
        met, ``kind``, once)."""
        self.ignored += 1
        if kind is not None:
            if kind in self._kinds:
                return
            self._kinds.add(kind)
        if len(self.problems) < MAX_PROBLEMS:
            self.problems.append(problem[:300])

    def log_metrics(self, values: Mapping[str, Any], step: int | None = None, *,
                    strict: bool = True) -> None:
        """Record ``values`` at ``step`` (None: each metric's next step: 0, 1, ...).

        ``strict``: a bad name or value raises ValueError (a function's call);
        else it is ignored with a note (a command's line). A value that is not
        finite (a diverging loss) is ignored with a note either way."""
        if step is not None and (isinstance(step, bool) or not isinstance(step, int)):
            self._refuse(f"step must be an integer, but got {step!r}", strict)
            return
        now = round(time.time(), 3)
        for name, raw in values.items():
            problem = name_problem(name)
            try:
                value = float(raw)
            except (TypeError, ValueError):
                problem = problem or f"metric {name!r}: {raw!r} is not a number"
                value = math.nan
            if problem is not None:
                self._refuse(problem, strict)
                continue
            if not math.isfinite(value):
                self.note(f"metric {name!r} at step {step}: {value} is not finite")
                continue
            points = self.metrics.get(name)
            if points is None:
                if len(self.metrics) >= MAX_METRICS:
                    self.note(f"metric {name!r} and later ones: a trial logs at most"
                              f" {MAX_METRICS} metrics", "metrics")
                    continue
                points = self.metrics[name] = BoundedHistory(limit=MAX_POINTS)
            points.append({"step": points.seen if step is None else step, "value": value,
                           "time": now})

    def set_tags(self, tags: Mapping[str, Any], *, strict: bool = True) -> None:
        """Record ``tags`` (a later value of a key replaces the earlier one)."""
        for key, value in tags.items():
            problem = name_problem(key, "tag")
            if problem is not None:
                self._refuse(problem, strict)
                continue
            if key not in self.tags and len(self.tags) >= MAX_TAGS:
                self.note(f"tag {key!r} and later ones: a trial sets at most {MAX_TAGS} tags",
                          "tags")
                continue
            self.tags[key] = str(value)[:MAX_TAG_VALUE]

    def line(self, text: str) -> bool:
        """Take one line a command printed if it is a ``nestor.metric`` or
        ``nestor.tag`` line, at its start or after a launcher's prefix such as
        ``[1,0]<stdout>:`` (returns whether it was); a malformed one is noted."""
        found = _LINE.search(text)
        if found is None:
            return False
        word, rest = found.group(1), found.group(2) or ""
        stripped = f"{word} {rest}".strip()
        if word == TAG_LINE:
            key, equals, value = rest.strip().partition("=")
            if not equals:
                self.note(f"{stripped[:100]!r}: a tag line is 'nestor.tag KEY=VALUE'")
            else:
                self.set_tags({key.strip(): value.strip()}, strict=False)
            return True
        values: dict[str, Any] = {}
        step: int | None = None
        for pair in rest.split():
            name, equals, value = pair.partition("=")
            if not equals:
                self.note(f"{stripped[:100]!r}: a metric line is 'nestor.metric NAME=VALUE ..."
                          " [step=N]'")
                return True
            if name == "step":
                if not (value.isascii() and value.isdigit()):
                    self.note(f"{stripped[:100]!r}: step {value!r} is not a whole number")
                    return True
                step = int(value)
            elif _NUMBER.fullmatch(value) is None:
                self.note(f"{stripped[:100]!r}: {value!r} is not a plain number")
            else:
                values[name] = float(value)
        self.log_metrics(values, step, strict=False)
        return True

    def _refuse(self, problem: str, strict: bool) -> None:
        if strict:
            raise ValueError(problem)
        self.note(problem)

    def record(self, artifact_dir: str | None) -> dict[str, Any]:
        """What the trial logged, as its result carries it (plain JSON): metrics as
        ``{name: [[step, value, time], ...]}``, tags, the files in ``artifact_dir``
        (:func:`artifacts_in`; an empty folder stays until the stage ends, when the
        driver removes it: orchestrator.engine.tidy) and notes on what was ignored;
        {} when nothing."""
        files, left_out = artifacts_in(artifact_dir)
        out: dict[str, Any] = {}
        if self.metrics:
            out["metrics"] = {name: [[p["step"], p["value"], p["time"]] for p in points]
                              for name, points in self.metrics.items()}
        if self.tags:
            out["tags"] = dict(self.tags)
        if files:
            out["artifacts"] = files
        if left_out:
            self.note(f"{left_out} files in the artifact folder were left out: a trial"
                      f" records at most {MAX_ARTIFACTS}")
        if self.ignored:
            out["problems"] = [f"{self.ignored} ignored", *self.problems]
        return out


def prepare_artifacts(directory: str | None) -> None:
    """The trial's artifact folder exists before user code runs. A retried attempt
    finds what an earlier one left there (its files stay the trial's)."""
    if directory:
        Path(directory).mkdir(parents=True, exist_ok=True)


def copy_artifact(path: str | os.PathLike[str], directory: str | None,
                  name: str | None = None) -> str:
    """Copy the file ``path`` into the artifact folder ``directory`` as ``name``
    (default: its own name; ``sub/file.png`` makes a subfolder); returns the copy's
    path. ValueError when it is not a file or ``name`` is not a relative path."""
    source = Path(path)
    if not source.is_file():
        raise ValueError(f"log_artifact: {source} is not a file")
    if directory is None:
        raise ValueError("log_artifact: this trial has no artifact folder")
    target_name = source.name if name is None else str(name)
    problem = artifact_name_problem(target_name)
    if problem is not None:
        raise ValueError(f"log_artifact: {problem}")
    target = Path(directory) / target_name
    target.parent.mkdir(parents=True, exist_ok=True)
    if source.resolve() != target.resolve():
        tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        shutil.copyfile(source, tmp)
        os.replace(tmp, target)  # a reader (or a digest) sees the old file or the new
    return str(target)


def digest(path: str | os.PathLike[str]) -> str:
    """The file's SHA-256, in hex."""
    sha = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            sha.update(block)
    return sha.hexdigest()


def artifacts_in(directory: str | None) -> tuple[list[dict[str, Any]], int]:
    """The regular files under ``directory`` (links and hidden files skipped), sorted,
    as ``{"name": relative path, "sha256": ..., "bytes": ...}``: the first
    ``MAX_ARTIFACTS`` of them, and how many more there were."""
    if not directory or not Path(directory).is_dir():
        return [], 0
    root = Path(directory)
    names = []
    for place, folders, files in os.walk(root):  # links to folders are not followed
        folders[:] = sorted(f for f in folders if not f.startswith("."))
        for file in files:
            path = Path(place) / file
            if not file.startswith(".") and not path.is_symlink() and path.is_file():
                names.append(path.relative_to(root).as_posix())
    names.sort()
    found = []
    for name in names[:MAX_ARTIFACTS]:
        try:
            found.append({"name": name, "sha256": digest(root / name),
                          "bytes": (root / name).stat().st_size})
        except OSError:  # gone meanwhile
            continue
    return found, max(0, len(names) - MAX_ARTIFACTS)
