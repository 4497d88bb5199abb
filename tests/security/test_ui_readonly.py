"""`nestor ui` over real HTTP: a token per session, and reads only.

On a login node every user shares 127.0.0.1, so MLflow's server alone let any
of them read the runs, write files into the run directory as its owner
(``PUT .../mlflow-artifacts/artifacts/...``) and delete runs. These tests start
a real `nestor ui` on a real store and speak to it as a browser and as another
user would.
"""

from __future__ import annotations

import json
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from email.message import Message
from pathlib import Path

import pytest

from nestor.orchestrator.projections.ui_gate import reads_only

pytestmark = pytest.mark.slow

NESTOR = str(Path(sys.executable).parent / "nestor")


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: object, **kwargs: object) -> None:
        return None


OPENER = urllib.request.build_opener(NoRedirect)


def call(url: str, method: str = "GET", body: object = None,
         headers: dict[str, str] | None = None) -> tuple[int, Message, bytes]:
    data = None if body is None else (body if isinstance(body, bytes)
                                      else json.dumps(body).encode())
    request = urllib.request.Request(url, data=data, method=method, headers={
        **({"Content-Type": "application/json"} if body is not None else {}),
        **(headers or {})})
    try:
        with OPENER.open(request, timeout=120) as reply:
            return reply.status, reply.headers, reply.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers, exc.read()


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, str]:
    """A run directory's store: an experiment, a run with an artifact."""
    from nestor.orchestrator.projections.tracking import Tracker

    run_dir = tmp_path_factory.mktemp("ui") / "run"
    tracker = Tracker(run_dir, "readonly")
    run_id = tracker.start_run("tune", params={"lr": 0.1})
    tracker.log_metrics(run_id, {"loss": 0.5})
    (run_dir / "summary.md").write_text("# tune\n")
    tracker.log_artifact(run_id, run_dir / "summary.md")
    tracker.finish(run_id, "FINISHED")
    experiment = tracker.experiment_id
    tracker.close()
    return run_dir, run_id, experiment


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="module")
def start_ui() -> Iterator[Callable[..., tuple[str, str, list[str]]]]:
    """Starts `nestor ui RUN ARGS...`; returns its address, the link it printed, its lines."""
    started: list[subprocess.Popen[str]] = []

    def start(run_dir: Path, *args: str) -> tuple[str, str, list[str]]:
        port = free_port()
        process = subprocess.Popen([NESTOR, "ui", str(run_dir), "--port", str(port), *args],
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        started.append(process)
        lines: list[str] = []
        threading.Thread(target=lambda: lines.extend(iter(process.stdout.readline, "")),
                         daemon=True).start()
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and process.poll() is None:
            found = [re.search(r"MLflow UI for .*: (http://\S+)", line) for line in list(lines)]
            link = next((f.group(1) for f in found if f), None)
            if link:
                return f"http://127.0.0.1:{port}", link, lines
            time.sleep(0.2)
        pytest.fail("nestor ui printed no URL:\n" + "".join(lines))

    yield start
    for process in started:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def test_the_link_alone_lets_a_browser_in_and_other_users_get_nothing(
        store: tuple[Path, str, str], start_ui: Callable[..., tuple[str, str, list[str]]]
) -> None:
    run_dir, run_id, experiment = store
    url, link, lines = start_ui(run_dir)
    token = urllib.parse.parse_qs(urllib.parse.urlsplit(link).query)["nestor_token"][0]
    assert len(token) >= 24 and "read-only" in "".join(lines)
    # Another user of the machine, without the link: nothing but the health check.
    search = {"experiment_ids": [experiment], "max_results": 10}
    for method, path, body in (
            ("GET", "/", None),
            ("GET", "/static-files/index.html", None),
            ("GET", "/ajax-api/2.0/mlflow/experiments/search?max_results=10", None),
            ("POST", "/ajax-api/2.0/mlflow/runs/search", search),
            ("GET", f"/get-artifact?path=summary.md&run_uuid={run_id}", None),
            ("POST", "/api/2.0/mlflow/runs/delete", {"run_id": run_id})):
        for headers in ({}, {"Authorization": "Bearer wrong"},
                        {"Cookie": f"nestor_ui_{url.rsplit(':', 1)[1]}=wrong"}):
            status, _, body_read = call(url + path, method, body, headers)
            assert status == 401, (method, path, headers, status, body_read[:200])
            assert b"summary" not in body_read and run_id.encode() not in body_read
    assert call(url + "/health")[0] == 200
    # The browser opening the printed link: a cookie, and the page without the token.
    status, headers, _ = call(link)
    assert status == 303, status
    assert "nestor_token" not in headers["Location"]
    cookie = headers["Set-Cookie"].split(";")[0]
    assert "HttpOnly" in headers["Set-Cookie"] and "SameSite=Strict" in headers["Set-Cookie"]
    with_cookie = {"Cookie": cookie}
    status, _, page = call(url + headers["Location"], headers=with_cookie)
    assert status == 200 and b"<html" in page.lower()
    status, _, found = call(url + "/ajax-api/2.0/mlflow/runs/search", "POST", search,
                            with_cookie)
    assert status == 200 and [r["info"]["run_id"] for r in json.loads(found)["runs"]] == [run_id]
    query = 'query { mlflowGetRun(input: {runId: "RUN"}) { run { info { status } } } }'
    status, _, found = call(url + "/graphql", "POST", {"query": query.replace("RUN", run_id)},
                            with_cookie)
    assert status == 200 and b"FINISHED" in found, found[:300]
    status, _, artifact = call(f"{url}/get-artifact?path=summary.md&run_uuid={run_id}",
                               headers=with_cookie)
    assert (status, artifact) == (200, b"# tune\n")
    # An API client: the token as a bearer token (MLflow's MLFLOW_TRACKING_TOKEN).
    status, _, _ = call(url + "/api/2.0/mlflow/experiments/search?max_results=10",
                        headers={"Authorization": f"Bearer {token}"})
    assert status == 200
    # The experiment links it printed carry the token too.
    assert any(f"nestor_token={token}#/experiments/{experiment}/runs" in line for line in lines)


def test_writes_and_deletes_are_refused_even_with_the_token(
        store: tuple[Path, str, str], start_ui: Callable[..., tuple[str, str, list[str]]]
) -> None:
    run_dir, run_id, experiment = store
    url, link, _ = start_ui(run_dir)
    token = urllib.parse.parse_qs(urllib.parse.urlsplit(link).query)["nestor_token"][0]
    auth = {"Authorization": f"Bearer {token}"}
    planted = f"{experiment}/{run_id}/artifacts/planted.sh"
    for method, path, body in (
            ("PUT", f"/api/2.0/mlflow-artifacts/artifacts/{planted}", b"#!/bin/sh\nid\n"),
            ("PUT", f"/ajax-api/2.0/mlflow-artifacts/artifacts/{planted}", b"#!/bin/sh\nid\n"),
            ("DELETE", f"/api/2.0/mlflow-artifacts/artifacts/{experiment}/{run_id}"
                       "/artifacts/summary.md", None),
            ("POST", "/api/2.0/mlflow/runs/delete", {"run_id": run_id}),
            ("POST", "/ajax-api/2.0/mlflow/runs/delete", {"run_id": run_id}),
            ("POST", "/ajax-api/2.0/mlflow/runs/update", {"run_id": run_id, "status": "FAILED"}),
            ("POST", "/ajax-api/2.0/mlflow/runs/set-tag", {"run_id": run_id, "key": "k",
                                                           "value": "v"}),
            ("POST", "/api/2.0/mlflow/runs/create", {"experiment_id": experiment}),
            ("POST", "/api/2.0/mlflow/experiments/delete", {"experiment_id": experiment}),
            ("POST", "/ajax-api/2.0/mlflow/upload-artifact", b"x"),
            ("PATCH", "/ajax-api/2.0/mlflow/logged-models/m-1", {})):
        status, _, answer = call(url + path, method, body, auth)
        assert status == 403, (method, path, status, answer[:300])
        assert b"--allow-writes" in answer
    assert not list(run_dir.rglob("planted.sh"))
    status, _, got = call(f"{url}/api/2.0/mlflow/runs/get?run_id={run_id}", headers=auth)
    run = json.loads(got)["run"]
    assert (run["info"]["lifecycle_stage"], run["info"]["status"]) == ("active", "FINISHED")
    assert "tags" not in run["data"] or all(t["key"] != "k" for t in run["data"]["tags"])
    assert (run_dir / "mlartifacts" / run_id / "artifacts" / "summary.md").is_file()


def test_allow_writes_and_no_token_lift_each_rule(
        store: tuple[Path, str, str], start_ui: Callable[..., tuple[str, str, list[str]]]
) -> None:
    run_dir, run_id, _ = store
    url, link, lines = start_ui(run_dir, "--allow-writes", "--no-token")
    assert "nestor_token" not in link and "read and write" in "".join(lines)
    status, _, answer = call(url + "/api/2.0/mlflow/runs/set-tag", "POST",
                             {"run_id": run_id, "key": "note", "value": "kept"})
    assert status == 200, answer[:300]
    status, _, got = call(f"{url}/api/2.0/mlflow/runs/get?run_id={run_id}")
    assert {"key": "note", "value": "kept"} in json.loads(got)["run"]["data"]["tags"]


def test_the_read_rule() -> None:
    assert reads_only("GET", "/ajax-api/2.0/mlflow-artifacts/artifacts/x")
    assert reads_only("POST", "/ajax-api/2.0/mlflow/runs/search")
    assert reads_only("POST", "/api/2.0/mlflow/experiments/search")
    assert reads_only("POST", "/graphql")
    for method, path in (("POST", "/ajax-api/2.0/mlflow/runs/delete"),
                         ("POST", "/ajax-api/2.0/mlflow/runs/search/../delete"),
                         ("POST", "/ajax-api/2.0/mlflow/runs/searchx"),
                         ("PUT", "/api/2.0/mlflow-artifacts/artifacts/a"),
                         ("POST", "/v1/traces"), ("DELETE", "/ajax-api/3.0/mlflow/datasets/d")):
        assert not reads_only(method, path), (method, path)
