"""`nestor ui`: the MLflow UI on a workflow's store.

A run directory keeps its MLflow store (``mlflow.db``) and artifacts
(``mlartifacts/``) inside it, so pointing MLflow's server at them is all a
UI needs; this module finds them, checks what would otherwise fail late and
obscurely (no store, a port in use), starts ``mlflow server`` bound to the
loopback interface unless told otherwise, behind a gate that asks for a token
drawn per session and lets reads alone through (``orchestrator.projections.ui_gate``;
``--no-token`` and ``--allow-writes`` lift them), and prints the URL, with the
token, once the server answers.

    nestor ui runs/quickstart-20261101-120000          # http://127.0.0.1:5000
    nestor ui --tracking-uri sqlite:///elsewhere/mlflow.db --port 5001
"""

from __future__ import annotations

import errno
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nestor.orchestrator.projections.store_paths import ARTIFACTS_DIR, STORE_FILE
from nestor.orchestrator.projections.ui_gate import (
    COOKIE_ENV,
    ENTRY_POINT,
    TOKEN_ENV,
    TOKEN_PARAM,
    WRITES_ENV,
)

READY_TIMEOUT_S = 120.0


class UiError(Exception):
    """The UI cannot start; the message says why and what to do."""


@dataclass(frozen=True)
class Store:
    """Where the runs are (an MLflow backend URI) and where new artifacts go."""

    backend_uri: str
    artifacts: Path | None
    label: str
    own_db: Path | None = None  # the run directory's own mlflow.db, when that is the store


def resolve_store(run_dir: Path | None, tracking_uri: str | None) -> Store:
    """The store of ``run_dir`` (its mlflow.db, or the spec's tracking.uri), or
    ``tracking_uri`` as given; raises UiError when there is nothing to show."""
    artifacts = None
    if run_dir is not None:
        if not run_dir.is_dir():
            raise UiError(f"run directory {run_dir} does not exist")
        if (run_dir / ARTIFACTS_DIR).is_dir() or (run_dir / STORE_FILE).is_file():
            artifacts = (run_dir / ARTIFACTS_DIR).resolve()
    if tracking_uri is not None:
        _check_uri(tracking_uri)
        return Store(tracking_uri, artifacts, tracking_uri)
    if run_dir is None:
        raise UiError("give a run directory (nestor ui RUNDIR) or --tracking-uri URI")
    store = run_dir / STORE_FILE
    if store.is_file():
        return Store(f"sqlite:///{store.resolve()}", artifacts, str(run_dir), store)
    spec_uri = _spec_tracking_uri(run_dir)
    if spec_uri:
        _check_uri(spec_uri)
        return Store(spec_uri, artifacts, f"{run_dir} (tracking.uri {spec_uri})")
    raise UiError(
        f"{run_dir} has no MLflow store ({STORE_FILE} is missing): is it a run directory"
        " made by `nestor run`, and has it started? For a store elsewhere, give"
        " --tracking-uri URI"
    )


def writable(run_dir: Path) -> bool:
    """Whether this user can write in ``run_dir`` (False on a read-only mount too)."""
    return os.access(run_dir, os.W_OK)


def private_copy(store: Store) -> Store:
    """``store`` served from a copy in a private temporary folder: a run directory that
    cannot be written (a read-only mount, a colleague's run) still opens, where SQLite
    and MLflow's start-up, which write beside the store, failed with a traceback."""
    import shutil
    import tempfile

    assert store.own_db is not None
    folder = Path(tempfile.mkdtemp(prefix="nestor-ui-"))  # 0700, this user's own
    copy = folder / STORE_FILE
    shutil.copyfile(store.own_db, copy)
    return Store(f"sqlite:///{copy}", store.artifacts, f"{store.label} (a copy: it cannot"
                 " be written)", copy)


def _spec_tracking_uri(run_dir: Path) -> str | None:
    """A spec that logged to a store outside the run directory names it."""
    import yaml

    try:
        spec = yaml.safe_load((run_dir / "spec.yaml").read_text())
    except (OSError, yaml.YAMLError):
        return None
    tracking = spec.get("tracking") if isinstance(spec, dict) else None
    uri = tracking.get("uri") if isinstance(tracking, dict) else None
    return str(uri) if uri else None


def _check_uri(uri: str) -> None:
    """A local store must exist: MLflow would silently create an empty one."""
    for scheme in ("sqlite:///", "file://"):  # sqlite:///rel.db, sqlite:////abs.db
        if uri.startswith(scheme):
            path = Path(uri[len(scheme):].split("?")[0])
            if not path.exists():
                raise UiError(f"MLflow store {uri} does not exist ({path} is missing)")
            return
    if uri.startswith(("http://", "https://")):
        raise UiError(f"{uri} is already an MLflow server: open it in a browser")
    if "://" not in uri and not uri.startswith("sqlite:"):
        raise UiError(
            f"--tracking-uri must be an MLflow store URI such as sqlite:///path/mlflow.db,"
            f" file:///path/mlruns or postgresql://..., but got {uri!r}"
        )


def check_port_free(host: str, port: int) -> None:
    """Fail now, with a clear message, if the server could not bind ``host:port``."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the server does
        try:
            probe.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise UiError(
                    f"port {port} on {host} is taken (another server listens there);"
                    f" choose another with --port"
                ) from None
            if exc.errno == errno.EACCES:
                raise UiError(f"port {port} on {host} needs privileges; use one above 1023"
                              ) from None
            raise UiError(f"cannot listen on {host}:{port}: {exc.strerror}") from None


def url_of(host: str, port: int) -> str:
    """The address a browser on this machine opens (all interfaces: the loopback)."""
    if host in ("0.0.0.0", "::", ""):
        host = "127.0.0.1"
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def server_argv(store: Store, host: str, port: int) -> list[str]:
    """``mlflow server`` on the store: one worker (this is one person's view of one
    workflow), anything logged through it stored in the run's mlartifacts/, and
    MLflow's app behind nestor's gate (``orchestrator.projections.ui_gate``: a token,
    reads only), which its environment configures (``gate_env``)."""
    argv = [sys.executable, "-m", "mlflow", "server",
            "--backend-store-uri", store.backend_uri,
            "--host", host, "--port", str(port), "--workers", "1",
            "--app-name", ENTRY_POINT]
    if store.artifacts is not None:
        argv += ["--artifacts-destination", store.artifacts.as_uri()]
    if host not in ("127.0.0.1", "localhost", "::1"):
        argv += ["--allowed-hosts", "*"]  # the user chose to expose it; let it answer by name
    return argv


@dataclass(frozen=True)
class Access:
    """Who may use the UI and how: the session's token (None: anyone who can connect)
    and whether writes are let through."""

    token: str | None
    writes: bool = False

    @staticmethod
    def new(*, token: bool = True, writes: bool = False) -> Access:
        return Access(secrets.token_urlsafe(24) if token else None, writes)

    def link(self, url: str, fragment: str = "") -> str:
        """``url``'s page, with the token the first request trades for a cookie."""
        query = f"?{TOKEN_PARAM}={self.token}" if self.token else ""
        return f"{url}/{query}{fragment}"


def check_gate() -> None:
    """The gate is found by MLflow through this package's ``mlflow.app`` entry point:
    a venv installed before it existed cannot serve a gated UI."""
    from importlib.metadata import entry_points

    if not entry_points(group="mlflow.app", name=ENTRY_POINT):
        raise UiError(f"this environment lacks nestor's {ENTRY_POINT!r} MLflow app (an"
                      " install older than nestor's UI gate): run scripts/setup.sh again")


def gate_env(access: Access, port: int) -> dict[str, str]:
    """The server's environment for the gate (its own user's alone to read)."""
    env = {WRITES_ENV: "1" if access.writes else "0", COOKIE_ENV: f"nestor_ui_{port}"}
    if access.token:
        env[TOKEN_ENV] = access.token
    return env


def wait_ready(url: str, process: subprocess.Popen[Any], timeout_s: float) -> None:
    """Until the server answers /health; UiError if it exits or takes too long."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise UiError(f"mlflow server exited with status {process.returncode}"
                          " before it answered (its messages are above)")
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2) as reply:
                if reply.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.3)
    raise UiError(f"mlflow server did not answer at {url} within {timeout_s:.0f} s")


def experiment_links(url: str, access: Access | None = None) -> list[tuple[str, str]]:
    """Each experiment with runs, linked straight to its runs table: MLflow's UI
    opens on its GenAI views otherwise, where a workflow's runs do not show."""
    import json

    access = access or Access(None)
    query = urllib.parse.urlencode({"max_results": 100, "order_by": "creation_time DESC"})
    request = urllib.request.Request(f"{url}/api/2.0/mlflow/experiments/search?{query}")
    if access.token:
        request.add_header("Authorization", f"Bearer {access.token}")
    try:
        with urllib.request.urlopen(request, timeout=10) as reply:
            experiments = json.load(reply).get("experiments", [])
    except (urllib.error.URLError, OSError, ValueError):
        return []
    return [(e["name"], access.link(url, f"#/experiments/{e['experiment_id']}/runs"
                                    "?workflowType=machine_learning"))
            for e in experiments if e.get("name") != "Default"]


def serve(store: Store, host: str, port: int, echo: Callable[[str], None],
          access: Access | None = None) -> int:
    """Run the UI until Ctrl-C or SIGTERM; returns the exit status."""
    access = access or Access.new()
    check_port_free(host, port)
    check_gate()
    env = dict(os.environ)
    env.setdefault("MLFLOW_LOGGING_LEVEL", "WARNING")
    for name in (TOKEN_ENV, WRITES_ENV, COOKIE_ENV):
        env.pop(name, None)  # this session's, never an inherited one
    env |= gate_env(access, port)
    # Its own process group: stopping it stops its uvicorn workers and job runner too.
    process = subprocess.Popen(server_argv(store, host, port), env=env, start_new_session=True)
    # Ctrl-C and SIGTERM both end the wait below, whatever handler an earlier step
    # (the catch-up projection's stop handlers) or an import left for SIGINT.
    # A process started with SIGINT ignored (a background job of a script, or a parent
    # that ignored it: SIG_IGN survives exec, and Python then installs no handler of
    # its own) or blocked would never hear Ctrl-C: take both back.
    previous = {signum: signal.signal(signum, _raise_interrupt)
                for signum in (signal.SIGINT, signal.SIGTERM)}
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})
    url = url_of(host, port)
    try:
        wait_ready(url, process, READY_TIMEOUT_S)
        mode = "read and write" if access.writes else "read-only"
        echo(f"MLflow UI for {store.label}: {access.link(url)}  ({mode}; Ctrl-C stops it)")
        if access.token:
            echo("  the link carries this session's token: whoever has it can see the runs")
        for name, link in experiment_links(url, access):
            echo(f"  experiment {name}: {link}")
        return process.wait()
    except KeyboardInterrupt:
        return 0
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        _stop(process)


def _raise_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _stop(process: subprocess.Popen[Any]) -> None:
    """SIGTERM to the server's process group, SIGKILL if it lingers."""
    for signum, wait_s in ((signal.SIGTERM, 15.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(process.pid, signum)
        except ProcessLookupError:
            return  # the whole group is gone
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline and _group_alive(process.pid):
            process.poll()  # reap the leader so the group can empty
            time.sleep(0.1)
    process.poll()


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True
