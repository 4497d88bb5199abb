"""The projector's plot helper (``projections.plot_helper``): a forked copy of the
projector's process draws every other plot of a finished stage while the projector
draws the rest; a plot that cannot be sent, or a helper gone, is drawn by the
projector; a failing plot is reported, not lost; and the helper ends with the
projector, even one killed outright.

Each case runs in a process of its own: the helper is only forked from a process with
no other thread (pytest's may have some)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from rank_helpers import alive

from nestor.orchestrator.projections.plot_helper import draw_all

ROOT = Path(__file__).parents[3]

CASE = textwrap.dedent("""\
    import json, os, sys
    from functools import partial
    from nestor.orchestrator.projections.plot_helper import PlotHelper, draw_all

    def where(tag):
        return [tag, os.getpid()]

    def broken(tag):
        raise ValueError(f"no data for {tag}")

    helper = PlotHelper.start()
    print("HELPER", json.dumps(None if helper is None else helper.pid), flush=True)
    makers = [("a", partial(where, "a")), ("b", partial(where, "b")),
              ("c", partial(where, "c")), ("d", lambda: where("d")),
              ("e", partial(where, "e")), ("f", partial(broken, "f"))]
    drawn = draw_all(makers, helper)
    print("DRAWN", json.dumps([[what, str(made) if isinstance(made, BaseException) else made]
                               for what, made in drawn]), flush=True)
    if sys.argv[1] == "hang":  # stay until killed
        import time
        time.sleep(600)
    if sys.argv[1] == "kill-helper":
        import signal
        os.kill(helper.pid, signal.SIGKILL)
        os.waitpid(helper.pid, 0)
        again = draw_all(makers[:2], helper)
        print("AGAIN", json.dumps([[w, m] for w, m in again]), flush=True)
    if helper is not None:
        helper.close()
    """)


def run_case(mode: str) -> dict[str, object]:
    done = subprocess.run([sys.executable, "-c", CASE, mode], capture_output=True, text=True,
                          timeout=120, check=False, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    said = {}
    for line in done.stdout.splitlines():
        word, _, rest = line.partition(" ")
        said[word] = json.loads(rest)
    return said


def test_every_other_plot_is_drawn_by_the_helper_and_every_plot_comes_back_in_order(
        ) -> None:
    said = run_case("plain")
    helper = said["HELPER"]
    assert isinstance(helper, int)
    drawn = said["DRAWN"]
    assert [what for what, _ in drawn] == ["a", "b", "c", "d", "e", "f"]
    made = {what: value for what, value in drawn}
    here = made["a"][1]
    assert here != helper
    assert made["b"] == ["b", helper]  # sent: the helper drew it
    assert made["c"] == ["c", here] and made["e"] == ["e", here]  # the projector's half
    assert made["d"] == ["d", here]  # a closure does not pickle: drawn by the projector
    assert made["f"] == "ValueError: no data for f"  # drawn by the helper; it failed


def test_a_helper_gone_leaves_its_plots_to_the_projector() -> None:
    said = run_case("kill-helper")
    made = {what: value for what, value in said["AGAIN"]}
    here = said["DRAWN"][0][1][1]
    assert made == {"a": ["a", here], "b": ["b", here]}


def test_without_a_helper_every_plot_is_drawn_here() -> None:
    drawn = draw_all([("a", lambda: Path("a.png")), ("b", lambda: None)], None)
    assert drawn == [("a", Path("a.png")), ("b", None)]


@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGTERM])
def test_the_helper_ends_with_the_projector(how: int) -> None:
    case = subprocess.Popen([sys.executable, "-c", CASE, "hang"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        assert case.stdout is not None
        helper = json.loads(case.stdout.readline().split(" ", 1)[1])
        assert case.stdout.readline().startswith("DRAWN")
        os.kill(case.pid, how)
        case.wait(timeout=30)
    finally:
        case.kill()
        case.wait()
    deadline = time.monotonic() + 10
    while alive(helper) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(helper), "the plot helper outlived its projector"

