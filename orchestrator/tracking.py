"""MLflow tracking, written by the driver only, that never holds the sweep up.

One experiment per workflow, a parent run per stage and a nested run per
trial, all through ``MlflowClient`` (no global "active run" state, so runs
of concurrent trials never mix). By default the store is a SQLite file in
the run directory: nothing to start, and the run directory stays
self-contained. Run ids go into the journal, so a resumed workflow logs into
the same runs instead of duplicating them.

A remote tracking server may go away in the middle of a sweep. The first
write that fails puts the tracker in *buffered* mode: that write and every
later one is appended (fsynced) to ``tracking-outbox.jsonl`` in the run
directory and the call returns at once, while a background thread replays
the outbox in order, with backoff, until the server answers again; then
writes go straight to MLflow again. A run started while buffered gets a
local key (``pending-<hex>``) in place of its MLflow id; the key is tagged
on the run when it is created (``nestor.key``) and mapped to the real id in
``tracking-keys.json``, so the journal can hold either.

Replaying is idempotent, which is what lets a killed driver simply replay
its outbox again: a run is created only if no run in the experiment carries
its key, MLflow drops a metric already logged with the same step and
timestamp (kept from the original call), tags and terminal states are
upserts, and an artifact is written to the same path. So nothing is logged
twice, and a driver that dies while buffered loses nothing: the next
``Tracker`` on the run directory (``nestor resume``) sends what is left.

Each direct call's wait is bounded (``MLFLOW_HTTP_REQUEST_MAX_RETRIES`` and
``MLFLOW_HTTP_REQUEST_TIMEOUT`` default to 0 and 5 s here instead of
MLflow's 7 retries and 120 s), so an outage costs the driver one short
wait, not minutes per call.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import math
import os
import threading
import time
import uuid
import weakref
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from orchestrator.journal import Journal, read_events, write_atomic

log = logging.getLogger(__name__)

MAX_PARAM_CHARS = 6000  # MLflow's limit on a param value
STORE_FILE = "mlflow.db"  # a run directory's own MLflow store, unless the spec names one
ARTIFACTS_DIR = "mlartifacts"  # beside it, where that store keeps artifacts
OUTBOX_FILE = "tracking-outbox.jsonl"
CURSOR_FILE = "tracking-outbox.sent"
KEYS_FILE = "tracking-keys.json"
JOURNAL_FILE = "journal.jsonl"  # orchestrator.workflow's; read here to close runs left open
KEY_TAG = "nestor.key"
PENDING = "pending-"
RETRY_MIN_S, RETRY_MAX_S = 0.5, 5.0
CLOSE_WAIT_S = float(os.environ.get("NESTOR_TRACKING_CLOSE_WAIT_S", "20"))


def default_tracking_uri(run_dir: Path) -> str:
    return f"sqlite:///{(run_dir / STORE_FILE).resolve()}"


def relocate_artifacts(run_dir: Path) -> list[str]:
    """Point the run directory's own store at its own ``mlartifacts/`` again.

    MLflow records artifact locations as absolute URIs and has no call to change
    an experiment's. A run directory moved or copied (scratch to project
    storage, the cluster to a laptop) would otherwise have ``nestor resume``
    write plots and checkpoints under the old path, and ``nestor ui`` show
    "No Artifacts Recorded". Only the store nestor made (``mlflow.db`` beside
    ``mlartifacts/``) is touched. Returns the old locations rewritten.
    """
    db = run_dir / STORE_FILE
    if not db.is_file():
        return []
    import sqlite3
    import urllib.parse

    here = (run_dir / ARTIFACTS_DIR).resolve().as_uri()
    moved = []
    with contextlib.closing(sqlite3.connect(db, timeout=30)) as connection, connection:
        for (location,) in connection.execute(
                "SELECT artifact_location FROM experiments").fetchall():
            if not location or location == here or not location.startswith("file://"):
                continue
            old = Path(urllib.parse.unquote(urllib.parse.urlparse(location).path))
            if old.name != ARTIFACTS_DIR:
                continue
            connection.execute("UPDATE experiments SET artifact_location = ?"
                               " WHERE artifact_location = ?", (here, location))
            connection.execute("UPDATE runs SET artifact_uri = ? || substr(artifact_uri, ?)"
                               " WHERE substr(artifact_uri, 1, ?) = ?",
                               (here, len(location) + 1, len(location) + 1, location + "/"))
            moved.append(str(old))
    for old in moved:
        log.info("run directory moved: MLflow artifacts recorded under %s now go to %s",
                 old, here)
    return moved


def _param_value(value: Any) -> str:
    text = str(value)
    return text if len(text) <= MAX_PARAM_CHARS else text[: MAX_PARAM_CHARS - 3] + "..."


def _permanent(exc: BaseException) -> bool:
    """A request MLflow refused (4xx: bad value, no such run): retrying cannot help."""
    from mlflow.exceptions import MlflowException

    if not isinstance(exc, MlflowException):
        return False
    try:
        status = exc.get_http_status_code()
    except Exception:
        return False
    return 400 <= status < 500 and status != 429


def derived_key(*parts: str) -> str:
    """A run key that is the same each time it is derived from the same parts."""
    return PENDING + uuid.uuid5(uuid.NAMESPACE_URL, "/".join(parts)).hex


class Tracker:
    """Creates and fills MLflow runs for a workflow's stages and trials."""

    def __init__(self, run_dir: Path, experiment: str, uri: str | None = None) -> None:
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "5")
        from mlflow.tracking import MlflowClient

        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.uri = uri or default_tracking_uri(self.run_dir)
        self.own_store = self.uri == default_tracking_uri(self.run_dir)
        if self.own_store:
            relocate_artifacts(self.run_dir)
        self.experiment = experiment
        self.client = MlflowClient(tracking_uri=self.uri)
        self._experiment_id: str | None = None
        self._lock = threading.RLock()  # guards the mode switch and the outbox
        self._wake = threading.Event()
        self._closing = False
        self._thread: threading.Thread | None = None
        self.keys: dict[str, str] = {}
        keys_path = self.run_dir / KEYS_FILE
        if keys_path.exists():
            self.keys = json.loads(keys_path.read_text())
        self._outbox = Journal(self.run_dir / OUTBOX_FILE)
        self.sent = self._read_cursor()
        self.buffered = self._outbox.seq > self.sent  # a previous driver left writes behind
        self.dropped = 0  # writes MLflow refused for good (logged)
        if self.buffered:
            log.warning("%d MLflow writes left by an earlier driver; sending them",
                        self._outbox.seq - self.sent)
            self._start_drainer()
        else:
            with contextlib.suppress(Exception):  # a server that is down is found later
                self._resolve_experiment()
                self.reconcile()
        _open_trackers.add(self)

    # -- the public surface (unchanged for callers) ---------------------------------

    @property
    def experiment_id(self) -> str:
        """The experiment's MLflow id; asks the server (and waits) if not known yet."""
        return self._resolve_experiment()

    def start_run(
        self,
        name: str,
        *,
        parent: str | None = None,
        tags: Mapping[str, Any] | None = None,
        params: Mapping[str, Any] | None = None,
        key: str | None = None,
        adopt: bool = False,
    ) -> str:
        """Create a run (nested under ``parent`` if given); returns its id or local key.

        A driver journals a run's id only after creating it, so a driver killed
        in between leaves a run the journal never names. Giving a ``key`` that
        the next driver derives again (see ``derived_key``) with ``adopt=True``
        makes that driver take the earlier run over instead of adding a twin.
        """
        all_tags = {k: _param_value(v) for k, v in (tags or {}).items()}
        key = key or PENDING + uuid.uuid4().hex
        op = {"name": name, "key": key, "parent": parent, "tags": all_tags,
              "params": {str(k): _param_value(v) for k, v in (params or {}).items()},
              "adopt": adopt}
        run_id = self._submit("start_run", op)
        return run_id if isinstance(run_id, str) else key

    def log_metrics(self, run_id: str, metrics: Mapping[str, Any], step: int = 0) -> None:
        """Log the finite numeric metrics; NaN and infinities are kept as tags instead."""
        now = int(time.time() * 1000)  # fixed now, so a replay logs the very same points
        numbers = []
        odd = {}
        for key, value in metrics.items():
            if isinstance(value, bool) or not isinstance(value, int | float):
                continue
            if math.isfinite(value):
                numbers.append([str(key), float(value), now, int(step)])
            else:
                odd[f"nestor.metric.{key}"] = str(value)
        if numbers:
            self._submit("metrics", {"run": run_id, "metrics": numbers})
        self.set_tags(run_id, odd)

    def set_tags(self, run_id: str, tags: Mapping[str, Any]) -> None:
        if tags:
            self._submit("tags", {"run": run_id,
                                  "tags": {str(k): _param_value(v) for k, v in tags.items()}})

    def log_artifact(self, run_id: str, path: Path, folder: str | None = None) -> None:
        self._submit("artifact", {"run": run_id, "path": str(Path(path).resolve()),
                                  "folder": folder})

    def finish(self, run_id: str, status: str) -> None:
        """End a run: FINISHED, FAILED or KILLED (MLflow's terminal states)."""
        self._submit("finish", {"run": run_id, "status": status,
                                "end_time": int(time.time() * 1000)})

    def run_id(self, key_or_id: str) -> str | None:
        """The MLflow id behind a local key (or the id itself); None while unsent."""
        if key_or_id.startswith(PENDING):
            return self.keys.get(key_or_id)
        return key_or_id

    @property
    def pending(self) -> int:
        """Writes in the outbox not yet accepted by MLflow."""
        return self._outbox.seq - self.sent

    def flush(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` for the outbox to drain; True if it did."""
        deadline = time.monotonic() + timeout_s
        while self.buffered and time.monotonic() < deadline:
            self._wake.set()
            time.sleep(0.05)
        return not self.buffered

    def close(self, timeout_s: float = CLOSE_WAIT_S) -> int:
        """Try to send what is buffered, then stop; returns the writes left behind.

        Left-behind writes stay in the outbox and are sent by the next Tracker
        on this run directory (``nestor resume RUNDIR``).
        """
        if self._closing:
            return self.pending
        self.flush(timeout_s)
        self._closing = True
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=RETRY_MAX_S + 15)
        left = self.pending
        self._outbox.close()
        _open_trackers.discard(self)
        if left:
            log.warning("%d MLflow writes could not be sent to %s; they are kept in %s and"
                        " sent when this run is resumed (nestor resume %s)", left, self.uri,
                        self.run_dir / OUTBOX_FILE, self.run_dir)
        return left

    def reconcile(self) -> int:
        """Finish the MLflow runs of trials the journal says are finished.

        The driver journals a trial's end before it tells MLflow (the journal
        is the truth), so a driver killed in between leaves that trial's run
        RUNNING without its final metrics; a resume never runs the trial again.
        This closes such runs from the journal's events: metrics not logged
        yet, the nestor.status tags and the terminal state. Returns how many
        runs it closed. Runs only when the server answers (else: next time).
        """
        events = read_events(self.run_dir / JOURNAL_FILE)
        ends: dict[str, dict[str, Any]] = {}
        run_of: dict[tuple[str, str], str] = {}
        for event in events:
            kind = event.get("event")
            if kind == "trial_started":
                run_of[(event["stage"], event["trial"]["id"])] = event["run_id"]
            elif kind == "trial_finished":
                run = run_of.get((event["stage"], event["trial"]["id"]))
                if run is not None:
                    ends[run] = event
        if not ends:
            return 0
        open_runs = self.client.search_runs(
            [self._resolve_experiment()], filter_string="attributes.status = 'RUNNING'",
            max_results=5000)
        real = {run: self.run_id(run) for run in ends}
        by_id = {r.info.run_id: r for r in open_runs}
        closed = 0
        for run, event in ends.items():
            found = by_id.get(real[run] or "")
            if found is None:
                continue
            status = event.get("status", "failed")
            metrics = {k: v for k, v in (event.get("metrics") or {}).items()
                       if k not in found.data.metrics}
            self.log_metrics(run, metrics, step=0)
            tags = {"nestor.status": status, "nestor.attempts": event.get("attempt", 1)}
            if event.get("reason"):
                tags["nestor.failure"] = event["reason"]
            self.set_tags(run, tags)
            self.finish(run, {"completed": "FINISHED", "pruned": "KILLED"}.get(status, "FAILED"))
            closed += 1
        if closed:
            log.warning("closed %d MLflow runs of trials finished before the driver stopped",
                        closed)
        return closed

    # -- direct or buffered -------------------------------------------------------------

    def _submit(self, op: str, args: dict[str, Any]) -> Any:
        with self._lock:
            if not self.buffered:
                try:
                    return self._apply(op, args, replay=False)
                except Exception as exc:
                    if _permanent(exc):
                        self._refused(op, exc)
                        return None
                    log.warning("MLflow at %s did not answer (%s); buffering its writes in %s",
                                self.uri, _first_line(exc), self.run_dir / OUTBOX_FILE)
                    self._outbox.append(op, args=args)
                    self.buffered = True
                    self._start_drainer()
                    return None
            self._outbox.append(op, args=args)
            self._wake.set()
            return None

    def _refused(self, op: str, exc: BaseException) -> None:
        self.dropped += 1
        log.warning("MLflow refused a %s write for good, skipped: %s", op, _first_line(exc))

    def _resolve_experiment(self) -> str:
        if self._experiment_id is None:
            existing = self.client.get_experiment_by_name(self.experiment)
            if existing is not None:
                self._experiment_id = existing.experiment_id
            else:
                artifacts = None
                if self.own_store:  # artifacts beside the store
                    artifacts = (self.run_dir / ARTIFACTS_DIR).resolve().as_uri()
                self._experiment_id = self.client.create_experiment(
                    self.experiment, artifact_location=artifacts)
        return self._experiment_id

    def _real(self, run: str | None) -> str | None:
        if run is None or not run.startswith(PENDING):
            return run
        if run not in self.keys:
            found = self.client.search_runs(
                [self._resolve_experiment()], filter_string=f"tags.`{KEY_TAG}` = '{run}'",
                max_results=1)
            if not found:
                from mlflow.exceptions import MlflowException

                raise MlflowException(f"no MLflow run was created for {run}",
                                      error_code="RESOURCE_DOES_NOT_EXIST")
            self._remember(run, found[0].info.run_id)
        return self.keys[run]

    def _remember(self, key: str, run_id: str) -> None:
        self.keys[key] = run_id
        write_atomic(self.run_dir / KEYS_FILE, json.dumps(self.keys))

    def _apply(self, op: str, args: dict[str, Any], replay: bool = True) -> Any:
        """Do one write against MLflow; safe to repeat (see the module's docstring).

        Only a replay looks for a run created before (a first try cannot have).
        """
        from mlflow.entities import Metric, Param, RunTag

        if op == "start_run":
            key = args["key"]
            if key in self.keys:
                return self.keys[key]
            tags = {**args["tags"], KEY_TAG: key}
            parent = self._real(args["parent"])
            if parent is not None:
                tags["mlflow.parentRunId"] = parent
            experiment = self._resolve_experiment()
            found = (replay or args.get("adopt")) and self.client.search_runs(
                [experiment], filter_string=f"tags.`{KEY_TAG}` = '{key}'", max_results=1)
            run_id = found[0].info.run_id if found else self.client.create_run(
                experiment, run_name=args["name"], tags=tags).info.run_id
            if args["params"]:
                self.client.log_batch(
                    run_id, params=[Param(k, v) for k, v in args["params"].items()])
            self._remember(key, run_id)
            return run_id
        run = self._real(args["run"])
        assert run is not None
        if op == "metrics":
            self.client.log_batch(run, metrics=[Metric(*m) for m in args["metrics"]])
        elif op == "tags":
            self.client.log_batch(run, tags=[RunTag(k, v) for k, v in args["tags"].items()])
        elif op == "artifact":
            if Path(args["path"]).is_file():
                self.client.log_artifact(run, args["path"], args["folder"])
        elif op == "finish":
            self.client.set_terminated(run, args["status"], end_time=args["end_time"])
        else:
            raise ValueError(f"unknown tracking write {op!r}")
        return None

    # -- the drainer --------------------------------------------------------------------

    def _read_cursor(self) -> int:
        try:
            return int((self.run_dir / CURSOR_FILE).read_text().strip() or 0)
        except (FileNotFoundError, ValueError):
            return 0

    def _start_drainer(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._drain, name="nestor-tracking-outbox",
                                            daemon=True)
            self._thread.start()

    def _drain(self) -> None:
        wait = RETRY_MIN_S
        while True:
            events = read_events(self._outbox.path)
            progressed = False
            failed = False
            for event in events[self.sent:]:
                try:
                    self._apply(event["event"], event["args"])
                except Exception as exc:
                    if not _permanent(exc):
                        log.debug("MLflow still unreachable: %s", _first_line(exc))
                        failed = True
                        break
                    self._refused(event["event"], exc)
                self.sent += 1
                progressed = True
                write_atomic(self.run_dir / CURSOR_FILE, str(self.sent))
            if not failed:
                with self._lock:
                    if self._outbox.seq == self.sent:  # nothing came in meanwhile: go direct
                        self._reset_outbox()
                        self.buffered = False
                        log.warning("MLflow at %s answers again; buffered writes sent", self.uri)
                        return
                continue
            if self._closing:
                return
            wait = RETRY_MIN_S if progressed else min(wait * 2, RETRY_MAX_S)
            self._wake.wait(wait)
            self._wake.clear()

    def _reset_outbox(self) -> None:
        # Cursor first: a kill between the two steps replays the outbox, which is harmless.
        write_atomic(self.run_dir / CURSOR_FILE, "0")
        self._outbox.close()
        os.truncate(self._outbox.path, 0)
        self._outbox = Journal(self._outbox.path)
        self.sent = 0


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:300] if text else type(exc).__name__


_open_trackers: weakref.WeakSet[Tracker] = weakref.WeakSet()


@atexit.register
def _close_open_trackers() -> None:
    """A driver that exits without closing its tracker still sends what it can."""
    for tracker in list(_open_trackers):
        with contextlib.suppress(Exception):
            tracker.close()
