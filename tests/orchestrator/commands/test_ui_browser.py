"""`nestor ui` seen the way a person sees it: a real headless Chromium (Debian's
`chromium` and `chromium-driver`, driven by Selenium) on the MLflow UI of a
workflow that really ran.

The test finishes a two-stage workflow, starts `nestor ui` on a free port,
opens the printed URL, switches MLflow to its model-training views, opens the
experiment, shows a metric column, expands each stage run and checks that its
trial runs are listed under it with their metric values. MLflow's UI is a
React app: every step waits for an element, never for a fixed time.

Screenshots are saved in tests/artifacts/ (ignored by git); their paths are
printed.
"""

from __future__ import annotations

import re
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[3]
NESTOR = str(Path(sys.executable).parent / "nestor")
ARTIFACTS = ROOT / "tests" / "artifacts"
CHROMIUM = shutil.which("chromium")
CHROMEDRIVER = shutil.which("chromedriver")
WAIT_S = 90  # a loaded 2-core machine renders MLflow's React app slowly

FIT = """
import sys
args = dict(a.lstrip("-").split("=", 1) for a in sys.argv[1:])
x, y = float(args["x"]), float(args["y"])
print(f"FoM: {(x - 0.3) ** 2 + (y + 0.1) ** 2}")
"""

SPEC = """
name: uitest
resources: {{slots: 2}}
stages:
  - name: coarse
    kind: hpo
    trainer: {{command: ["{python}", "{fit}"]}}
    search: {{algorithm: random, budget: 3, seed: 1}}
    space: &space
      x: {{type: float, low: -1, high: 1}}
      y: {{type: float, low: -1, high: 1}}
    objective: {{metric: result, mode: min}}
  - name: evolve
    kind: hpo
    trainer: {{command: ["{python}", "{fit}"]}}
    search: {{algorithm: genetic, population: 2, generations: 2, seed: 2}}
    space: *space
    objective: {{metric: result, mode: min}}
"""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("uirun")
    fit = base / "fit.py"
    fit.write_text(FIT)
    spec = base / "spec.yaml"
    spec.write_text(textwrap.dedent(SPEC.format(python=sys.executable, fit=fit)))
    run_dir = base / "run"
    result = subprocess.run([NESTOR, "run", str(spec), "--run-dir", str(run_dir)],
                            capture_output=True, text=True, timeout=600, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    return run_dir


@pytest.fixture(scope="module")
def ui_server(finished_run: Path) -> Iterator[tuple[str, list[str], str]]:
    """`nestor ui RUN --port P`; yields its address, all its lines so far and the link it
    printed (which carries the session's token: a browser opens it first)."""
    port = free_port()
    process = subprocess.Popen([NESTOR, "ui", str(finished_run), "--port", str(port)],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(process.stdout.readline, "")),
                              daemon=True)
    reader.start()
    deadline = time.monotonic() + 180
    url = None
    while url is None and time.monotonic() < deadline and process.poll() is None:
        for line in list(lines):
            found = re.search(r"MLflow UI for .*: (http://\S+)", line)
            if found:
                url = found.group(1)
        time.sleep(0.2)
    try:
        assert url is not None, "nestor ui printed no URL:\n" + "".join(lines)
        while time.monotonic() < deadline and not any("experiment " in x for x in lines):
            time.sleep(0.2)  # the experiment links follow the URL line
        yield url.split("/?")[0], lines, url
    finally:
        server = subprocess.run(["pgrep", "-P", str(process.pid)], capture_output=True,
                                text=True, check=False).stdout.split()
        process.send_signal(signal.SIGINT)  # Ctrl-C: nestor ui stops its server
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            where = _stuck(process.pid, server)  # before the kill: what it waits on
            process.kill()
            process.wait()
            pytest.fail("nestor ui did not stop within 60 s of SIGINT\n" + where
                        + "\nits last lines:\n" + "".join(lines[-30:]))
        assert server, "nestor ui had no server process"
        for pid in server:  # the server's whole process group went with it
            leftover = subprocess.run(["pgrep", "-g", pid], capture_output=True, text=True,
                                      check=False).stdout.split()
            assert not leftover, f"mlflow server processes left running: {leftover}"


def _stuck(pid: int, server: list[str]) -> str:
    """Where a process that does not stop is: its threads' stacks (py-spy, from the
    lock file's pins) and the processes of its and its server's groups."""
    spy = Path(sys.executable).parent / "py-spy"
    try:
        stacks = subprocess.run([str(spy), "dump", "--pid", str(pid)], capture_output=True,
                                text=True, timeout=60, check=False)
        dump = stacks.stdout + stacks.stderr
    except (OSError, subprocess.TimeoutExpired) as exc:
        dump = f"py-spy dump failed: {exc}"
    table = subprocess.run(["ps", "-eo", "pid,ppid,pgid,stat,etime,args"], capture_output=True,
                           text=True, check=False).stdout.splitlines()
    groups = {str(pid), *server}
    mine = [row for row in table[1:] if set(row.split()[:3]) & groups]
    try:  # whether it ignores, blocks or catches SIGINT (bit 2 of each mask)
        masks = [line for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                 if line.startswith(("SigBlk", "SigIgn", "SigCgt"))]
    except OSError as exc:
        masks = [f"no /proc/{pid}/status: {exc}"]
    return "\n".join([dump, *masks, *table[:1], *mine])


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not (CHROMIUM and CHROMEDRIVER):
        pytest.fail("the browser test needs Debian's chromium and chromium-driver"
                    " (.ci/run installs them: apt-get install chromium chromium-driver)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                     "--disable-gpu", "--window-size=1700,1000"):
        options.add_argument(argument)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(WAIT_S)
    try:
        yield driver
    finally:
        driver.quit()


def screenshot(driver: Any, name: str) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / name
    driver.save_screenshot(str(path))
    print(f"screenshot: {path}")
    return path


def test_nestor_ui_prints_the_url_and_a_link_per_experiment(ui_server) -> None:
    url, lines, link = ui_server
    assert url.startswith("http://127.0.0.1:") and link.startswith(f"{url}/?nestor_token=")
    links = [line for line in lines if "experiment uitest:" in line]
    assert links and f"{link}#/experiments/" in links[0]
    assert "workflowType=machine_learning" in links[0]


def test_the_stage_runs_and_their_trials_are_listed_with_a_metric(ui_server, browser,
                                                                  finished_run) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    _, _, link = ui_server
    wait = WebDriverWait(browser, WAIT_S)

    def clickable(xpath: str) -> Any:
        return wait.until(ec.element_to_be_clickable((By.XPATH, xpath)))

    try:
        browser.get(link)  # the printed link: its token becomes the browser's cookie
        # A person picks MLflow's classic-ML views, then the experiment on the home page.
        clickable("//*[normalize-space(text())='Model training']").click()
        clickable("//a[normalize-space(.)='uitest' and contains(@href, '#/experiments/')]"
                  ).click()
        stage_link = "//a[normalize-space(.)='{}' and contains(@href, '/runs/')]"
        for stage in ("coarse", "evolve"):
            wait.until(ec.presence_of_element_located((By.XPATH, stage_link.format(stage))))
        for close in browser.find_elements(By.XPATH, "//button[@aria-label='Close']"):
            if close.is_displayed():  # the assistant panel takes half the page
                close.click()

        # Show the trials' metric as a column (MLflow lists none by default).
        clickable("//button[normalize-space(.)='Columns']").click()
        search = clickable("//input[@placeholder='Search columns']")
        search.send_keys("result")
        clickable("//*[contains(@class, 'tree-treenode')][.//*[normalize-space(text())="
                  "'result']]//*[contains(@class, 'tree-checkbox')]").click()
        search.send_keys("\ue00c")  # Escape closes the popover
        wait.until(ec.presence_of_element_located(
            (By.XPATH, "//*[@role='columnheader'][normalize-space(.)='result']")))

        # Expand each stage run: its trial runs appear nested under it.
        for stage in ("coarse", "evolve"):
            expander = (stage_link.format(stage)
                        + "/ancestor::*[@role='gridcell'][1]//button")
            clickable(expander).click()
        expected = {f"coarse/{i}" for i in range(3)} | {f"evolve/{i}" for i in range(4)}
        for name in sorted(expected):
            wait.until(ec.presence_of_element_located(
                (By.XPATH, f"//a[normalize-space(.)='{name}']")))
        rows = _rows(browser)
        assert set(rows) == expected | {"coarse", "evolve"}
        from mlflow.tracking import MlflowClient

        client = MlflowClient(tracking_uri=f"sqlite:///{finished_run / 'mlflow.db'}")
        experiment = client.get_experiment_by_name("uitest")
        logged = {r.info.run_name: r.data.metrics.get("result")
                  for r in client.search_runs([experiment.experiment_id])}
        for name in expected:
            value = rows[name].get("result", "-")
            assert value != "-", f"{name} shows no result in the table: {rows[name]}"
            assert float(value.rstrip(".")) == pytest.approx(logged[name], rel=1e-3, abs=1e-6)
        # Nested: each stage run has the expander and its trials follow it as a block.
        order = sorted(rows, key=lambda name: rows[name]["index"])
        parents = [name for name in order if rows[name]["expander"]]
        assert parents == [name for name in order if "/" not in name]
        for position, name in enumerate(order):
            if "/" in name:
                owner = max((p for p in parents if order.index(p) < position),
                            key=order.index)
                assert name.startswith(owner + "/"), f"{name} is listed under {owner}"
    finally:
        shot = screenshot(browser, "ui-runs.png")
    assert shot.stat().st_size > 20_000


def _rows(driver: Any) -> dict[str, dict[str, Any]]:
    """The runs table as {run name: {column header: text, "index": row position,
    "expander": whether the row can be expanded}}. ag-grid draws the pinned and
    scrolling parts of a row separately; they share a row-id."""
    table = driver.execute_script("""
        const headers = {};
        for (const h of document.querySelectorAll('[role=columnheader][col-id]')) {
            if (h.innerText.trim()) headers[h.getAttribute('col-id')] = h.innerText.trim();
        }
        const rows = {};
        for (const r of document.querySelectorAll('[role=row][row-id]')) {
            const row = rows[r.getAttribute('row-id')] ||= {
                index: Number(r.getAttribute('row-index')), expander: false};
            for (const c of r.querySelectorAll('[role=gridcell][col-id]')) {
                const name = headers[c.getAttribute('col-id')];
                if (!name) continue;
                row[name] = c.innerText.trim();
                if (name === 'Run Name') row.expander = c.querySelector('button') !== null;
            }
        }
        return Object.values(rows);
    """)
    # The run-name cell also holds the run's colour code ("#04867d\ncoarse").
    return {row["Run Name"].splitlines()[-1]: row for row in table if row.get("Run Name")}


def test_a_stage_run_shows_its_plots_and_summary_table(ui_server, browser,
                                                        finished_run) -> None:
    from mlflow.tracking import MlflowClient
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    url, _, link = ui_server
    wait = WebDriverWait(browser, WAIT_S)
    client = MlflowClient(tracking_uri=f"sqlite:///{finished_run / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("uitest")
    (stage,) = client.search_runs([experiment.experiment_id], "tags.`nestor.stage` = 'coarse'"
                                  " and tags.`nestor.kind` = 'hpo'")
    try:
        browser.get(link)  # the printed link: its token becomes the browser's cookie
        browser.get(f"{url}/#/experiments/{experiment.experiment_id}/runs/"
                    f"{stage.info.run_id}/artifacts")
        for name in ("summary.html", "summary.md"):
            wait.until(ec.presence_of_element_located(
                (By.XPATH, f"//*[normalize-space(text())='{name}']")))
        wait.until(ec.element_to_be_clickable(
            (By.XPATH, "//*[normalize-space(text())='plots']"))).click()
        for name in ("coarse.png", "coarse-generations.png"):
            wait.until(ec.presence_of_element_located(
                (By.XPATH, f"//*[normalize-space(text())='{name}']")))
        wait.until(ec.element_to_be_clickable(
            (By.XPATH, "//*[normalize-space(text())='coarse-slots.png']"))).click()
        # The preview: the PNG itself, fetched from the run directory and drawn.
        image = wait.until(lambda driver: next(
            (img for img in driver.find_elements(By.XPATH, "//img[starts-with(@src, 'blob:')]")
             if img.is_displayed() and img.get_property("naturalWidth") > 500), None))
        assert image.get_property("naturalHeight") > 150
    finally:
        shot = screenshot(browser, "ui-artifacts.png")
    assert shot.stat().st_size > 20_000
