"""A journal's log and checkpoint paths never lead `nestor ui` out of the run directory.

Run directories sit in shared project spaces and are passed between people, so
a journal may have been written by someone else. A ``trial_finished`` event's
``logs`` (a command trainer's output files) and a stage's best checkpoint are
copied into the run's MLflow artifacts, which `nestor ui` serves: pointed at
another file of the user's (an absolute path, ``..``, a link out of the run
directory), they copied it there and served it. This test finishes a real run,
appends such events, starts a real `nestor ui` on it and looks for the secret in
the artifacts on disk and over HTTP.
"""

from __future__ import annotations

import json
import re
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from nestor.orchestrator.journal.journal import Journal, read_events
from nestor.orchestrator.journal.safe import within as inside

pytestmark = pytest.mark.slow

NESTOR = str(Path(sys.executable).parent / "nestor")
FIT = """
import sys
args = dict(a.lstrip("-").split("=", 1) for a in sys.argv[1:])
x, y = float(args["x"]), float(args["y"])
print(f"FoM: {(x - 0.3) ** 2 + (y + 0.1) ** 2}", flush=True)
"""
SPEC = """
name: paths
resources: {{slots: 2}}
stages:
  - name: tune
    kind: hpo
    trainer: {{command: ["{python}", "{fit}"]}}
    search: {{algorithm: random, budget: 2, seed: 7}}
    space:
      x: {{type: float, low: -1, high: 1}}
      y: {{type: float, low: -1, high: 1}}
    objective: {{metric: result, mode: min}}
"""


def test_inside_refuses_every_way_out(tmp_path: Path) -> None:
    run = tmp_path / "run"
    (run / "logs").mkdir(parents=True)
    (run / "logs" / "ok.log").write_text("fine")
    outside = tmp_path / "secret"
    outside.write_text("s")
    (run / "logs" / "out.log").symlink_to(outside)
    (run / "logs" / "dir").symlink_to(tmp_path)
    assert inside(run, run / "logs" / "ok.log") == (run / "logs" / "ok.log").resolve()
    assert inside(run, "logs/ok.log") == (run / "logs" / "ok.log").resolve()
    for way_out in (str(outside), "../secret", "logs/../../secret", "logs/out.log",
                    "logs/dir/secret", "/etc/passwd", "logs/\0x", ""):
        place = inside(run, way_out)
        assert place is None or place == run.resolve(), way_out


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("paths")
    fit = base / "fit.py"
    fit.write_text(FIT)
    spec = base / "spec.yaml"
    spec.write_text(textwrap.dedent(SPEC.format(python=sys.executable, fit=fit)))
    run_dir = base / "run"
    result = subprocess.run([NESTOR, "run", str(spec), "--run-dir", str(run_dir)],
                            capture_output=True, text=True, timeout=600, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    return run_dir


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def ui(finished_run: Path) -> Iterator[tuple[str, dict[str, str]]]:
    """A real `nestor ui` on the run (it projects what MLflow lacks first); yields its
    URL and the headers that carry its session's token, if it printed one."""
    process = subprocess.Popen([NESTOR, "ui", str(finished_run), "--port", str(free_port())],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    threading.Thread(target=lambda: lines.extend(iter(process.stdout.readline, "")),
                     daemon=True).start()
    deadline, url = time.monotonic() + 300, None
    while url is None and time.monotonic() < deadline and process.poll() is None:
        found = [re.search(r"MLflow UI for .*: (http://\S+)", line) for line in list(lines)]
        url = next((f.group(1) for f in found if f), None)
        time.sleep(0.2)
    try:
        assert url is not None, "nestor ui printed no URL:\n" + "".join(lines)
        parts = urllib.parse.urlsplit(url)
        token = urllib.parse.parse_qs(parts.query).get("nestor_token", [None])[0]
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        yield f"{parts.scheme}://{parts.netloc}", headers
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def get(url: str, headers: dict[str, str]) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers),
                                    timeout=120) as reply:
            return reply.status, reply.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


@pytest.fixture
def hostile(finished_run: Path, tmp_path: Path) -> bytes:
    """A private file outside the run directory, and journal events that point at it:
    absolutely, by ``..``, through a link inside the run directory, and as the
    stage's best checkpoint (a file, and a folder holding it)."""
    secret = f"SECRET-{uuid.uuid4().hex}".encode()
    keys = tmp_path / "keys"
    keys.mkdir()
    key = keys / "id_key"
    key.write_bytes(secret)
    key.chmod(0o600)
    link = finished_run / "logs" / "tune" / "link.log"
    link.symlink_to(key)
    relative = Path("..") / Path(*[".."] * len(finished_run.resolve().parts)) / key.relative_to("/")
    events = read_events(finished_run / "journal.jsonl")
    trial = next(e for e in events if e["event"] == "trial_finished")
    stage_finished = next(e for e in events if e["event"] == "stage_finished")
    journal = Journal(finished_run / "journal.jsonl")
    for n, logs in enumerate(({"stdout": str(key), "stderr": str(link)},
                              {"stdout": str(relative), "stderr": "logs/tune/link.log"})):
        fields = {k: v for k, v in trial.items() if k not in ("seq", "time", "event")}
        fields["trial"] = dict(fields["trial"], id=f"evil{n}")
        journal.append("trial_finished", **(fields | {"logs": logs}))
    for where in (str(key), str(keys)):
        summary = json.loads(json.dumps(stage_finished["summary"]))
        summary["best"]["checkpoint"] = where
        journal.append("stage_finished", stage="tune", summary=summary)
    journal.close()
    return secret


def test_a_journal_cannot_make_nestor_ui_copy_or_serve_a_file_outside(
        finished_run: Path, hostile: bytes, ui: tuple[str, dict[str, str]]) -> None:
    url, headers = ui
    artifacts = finished_run / "mlartifacts"
    copied = [p for p in artifacts.rglob("*") if p.is_file() and hostile in p.read_bytes()]
    assert copied == [], f"the secret was copied into the run's artifacts: {copied}"
    status, body = get(f"{url}/api/2.0/mlflow/experiments/search?max_results=10", headers)
    assert status == 200, body
    experiment = next(e for e in json.loads(body)["experiments"] if e["name"] == "paths")
    request = urllib.request.Request(
        f"{url}/api/2.0/mlflow/runs/search", method="POST",
        data=json.dumps({"experiment_ids": [experiment["experiment_id"]],
                         "max_results": 100}).encode(),
        headers={"Content-Type": "application/json", **headers})
    with urllib.request.urlopen(request, timeout=120) as reply:
        runs = json.load(reply)["runs"]
    names = {r["info"]["run_name"]: r["info"]["run_id"] for r in runs}
    assert {"tune/evil0", "tune/evil1", "tune"} <= set(names), names  # the events were shown
    served = []
    for name in ("tune/evil0", "tune/evil1", "tune"):
        for path in ("logs/attempt-1/id_key", "logs/attempt-1/link.log",
                     "best_checkpoint/id_key"):
            query = urllib.parse.urlencode({"path": path, "run_uuid": names[name]})
            status, body = get(f"{url}/get-artifact?{query}", headers)
            if hostile in body:
                served.append((name, path))
    assert served == [], f"nestor ui served the secret: {served}"
