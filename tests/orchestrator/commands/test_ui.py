"""`nestor ui`: finding the store, refusing what would fail late, the server's
command line. The server itself runs in test_ui_browser.py."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from nestor.orchestrator.commands.cli import cli
from nestor.orchestrator.commands.ui import Store, UiError, resolve_store, server_argv, url_of

NESTOR = str(Path(sys.executable).parent / "nestor")


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    """A run directory as `nestor run` leaves it, as far as the UI looks."""
    (tmp_path / "mlflow.db").write_bytes(b"")
    (tmp_path / "mlartifacts").mkdir()
    return tmp_path


def ui(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["ui", *args])
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        result.exception)
    return result.exit_code, result.output


@pytest.mark.parametrize(("args", "message"), [
    ((), "give a run directory (nestor ui RUNDIR) or --tracking-uri URI"),
    (("/no/such/run",), "run directory /no/such/run does not exist"),
    (("--tracking-uri", "sqlite:////no/such/mlflow.db"),
     "MLflow store sqlite:////no/such/mlflow.db does not exist"),
    (("--tracking-uri", "http://127.0.0.1:5000"), "is already an MLflow server"),
    (("--tracking-uri", "mlflow.db"), "must be an MLflow store URI"),
    (("--port", "0"), "0 is not in the range 1<=x<=65535"),
])
def test_bad_input_is_refused_with_a_clear_message(args: tuple[str, ...], message: str) -> None:
    code, output = ui(*args)
    assert code == 2
    assert message in output.replace("\n", " ")
    assert "Traceback" not in output


def test_a_directory_without_a_store_is_named(tmp_path: Path) -> None:
    code, output = ui(str(tmp_path))
    assert code == 2
    assert f"{tmp_path} has no MLflow store (mlflow.db is missing)" in output.replace("\n", " ")


def test_a_taken_port_is_refused_before_any_server_starts(run_dir: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        started = time.monotonic()
        result = subprocess.run([NESTOR, "ui", str(run_dir), "--port", str(port)],
                                capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 2
    assert (f"error: port {port} on 127.0.0.1 is taken (another server listens there);"
            " choose another with --port") in result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    assert time.monotonic() - started < 30  # no MLflow server was started and waited on


def test_the_run_directory_store_and_its_artifacts(run_dir: Path) -> None:
    store = resolve_store(run_dir, None)
    assert store.backend_uri == f"sqlite:///{(run_dir / 'mlflow.db').resolve()}"
    assert store.artifacts == (run_dir / "mlartifacts").resolve()
    # --tracking-uri wins over the directory's store; artifacts still go to the run.
    other = run_dir / "other.db"
    other.write_bytes(b"")
    chosen = resolve_store(run_dir, f"sqlite:///{other}")
    assert chosen.backend_uri == f"sqlite:///{other}"
    assert chosen.artifacts == store.artifacts


def test_a_spec_that_logged_elsewhere_names_its_store(tmp_path: Path) -> None:
    store = tmp_path / "shared.db"
    store.write_bytes(b"")
    run = tmp_path / "run"
    run.mkdir()
    (run / "spec.yaml").write_text(f"name: w\ntracking: {{uri: 'sqlite:///{store}'}}\n")
    assert resolve_store(run, None).backend_uri == f"sqlite:///{store}"
    store.unlink()
    with pytest.raises(UiError, match="does not exist"):
        resolve_store(run, None)


def test_the_server_listens_on_the_loopback_unless_told(run_dir: Path) -> None:
    store = resolve_store(run_dir, None)
    argv = server_argv(store, "127.0.0.1", 5123)
    assert argv[1:4] == ["-m", "mlflow", "server"]
    options = dict(zip(argv[4::2], argv[5::2], strict=False))
    assert options["--backend-store-uri"] == store.backend_uri
    assert options["--host"] == "127.0.0.1" and options["--port"] == "5123"
    assert options["--artifacts-destination"] == (run_dir / "mlartifacts").resolve().as_uri()
    assert "--allowed-hosts" not in argv
    exposed = server_argv(Store("sqlite:///x.db", None, "x"), "0.0.0.0", 80)
    assert "--artifacts-destination" not in exposed
    assert exposed[exposed.index("--allowed-hosts") + 1] == "*"


def test_urls_a_browser_here_can_open() -> None:
    assert url_of("127.0.0.1", 5000) == "http://127.0.0.1:5000"
    assert url_of("0.0.0.0", 5000) == "http://127.0.0.1:5000"
    assert url_of("::1", 8080) == "http://[::1]:8080"


def test_a_moved_run_directory_still_shows_its_artifacts(tmp_path: Path, monkeypatch) -> None:
    # Recorded as mlflow-artifacts: URIs, relative to the run directory's mlartifacts/
    # (the server's --artifacts-destination): nothing in the store names the old place.
    import urllib.request

    from mlflow.tracking import MlflowClient

    from nestor.orchestrator.commands.ui import _stop, wait_ready
    from nestor.orchestrator.projections.tracking import Tracker

    before = tmp_path / "on the cluster"
    tracker = Tracker(before, "moved")
    run_id = tracker.start_run("stage")
    table = before / "summary.md"
    table.write_text("# stage\n")
    tracker.log_artifact(run_id, table)
    tracker.close()
    after = tmp_path / "on my laptop"
    before.rename(after)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = subprocess.Popen(server_argv(resolve_store(after, None), "127.0.0.1", port),
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               start_new_session=True)
    try:
        url = url_of("127.0.0.1", port)
        wait_ready(url, process, 120)
        monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "120")  # a first answer, loaded
        client = MlflowClient(tracking_uri=url)  # what the UI reads
        assert [a.path for a in client.list_artifacts(run_id)] == ["summary.md"]
        got = urllib.request.urlopen(f"{url}/get-artifact?path=summary.md&run_uuid={run_id}",
                                     timeout=120).read()
        assert got == b"# stage\n"
    finally:
        _stop(process)


@pytest.mark.parametrize("inherited", ["ignored", "blocked"])
def test_ctrl_c_stops_a_ui_that_started_with_sigint_ignored_or_blocked(
        run_dir: Path, inherited: str) -> None:
    """A parent that ignores SIGINT passes that on across exec (a script's background
    job; the full test suite's process, where the browser test's teardown waited 60 s
    for a `nestor ui` that never heard its SIGINT), and Python then installs no
    handler of its own; a blocked SIGINT is inherited likewise. `nestor ui` takes
    both back: Ctrl-C still stops it and its server."""
    import contextlib
    import os
    import signal

    def inherit() -> None:
        if inherited == "ignored":
            signal.signal(signal.SIGINT, signal.SIG_IGN)
        else:
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = subprocess.Popen([NESTOR, "ui", str(run_dir), "--port", str(port)],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               preexec_fn=inherit, start_new_session=True)
    try:
        deadline = time.monotonic() + 180
        out = ""
        while "Ctrl-C stops it" not in out and time.monotonic() < deadline:
            out += process.stdout.readline()  # the URL line: its server answers
            assert process.poll() is None or "Ctrl-C" in out, out
        assert "Ctrl-C stops it" in out, out
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=60) == 0
    finally:
        if process.poll() is None:
            server = subprocess.run(["pgrep", "-P", str(process.pid)], capture_output=True,
                                    text=True, check=False).stdout.split()
            for group in [process.pid, *map(int, server)]:  # its server: a group of its own
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(group, signal.SIGKILL)
            process.wait()
            pytest.fail("nestor ui did not stop within 60 s of SIGINT")
