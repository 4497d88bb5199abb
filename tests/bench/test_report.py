"""bench/REPORT.md is rendered from the committed results alone, and each result says
where it came from (bench/report.py, bench/machine.py)."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from bench import machine, report

ROOT = Path(__file__).resolve().parents[2]


def test_the_committed_report_is_what_the_committed_results_render() -> None:
    """The check CI runs: a hand edit of REPORT.md, or a result committed without
    rerendering, fails here."""
    done = subprocess.run([sys.executable, "-m", "bench.report", "--check"], cwd=ROOT,
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


def test_the_committed_headline_comes_from_one_run_at_one_commit() -> None:
    """REPORT.md's headline compares figures of one `make bench-quick` (or `make bench`)
    run: a result rerun by hand, at another commit or on uncommitted code, fails here
    until the whole run is redone (`python -m bench.report --same-run` names it)."""
    assert report.same_run(ROOT / "bench" / "results") == []


def test_every_committed_result_names_its_command_commit_and_machine() -> None:
    """No results file in git without its provenance: each was written through
    bench/machine.py's write_result by a step of bench/steps.py (or is not kept)."""
    missing = []
    for path in sorted((ROOT / "bench" / "results").glob("*.json")):
        data = json.loads(path.read_text())
        recorded = [m for m in (data.get("machine"), data.get("machine_detail"))
                    if report.has_provenance(m)]
        if not recorded:
            missing.append(path.name)
    assert missing == [], f"results without command, commit or machine: {missing}"


MULTI = {"seeds": 2, "parallel": 4, "max_epochs": 27, "quality": 5.0, "rows": [
    {"search": "asha", "q1": 100.0, "q3": 130.0,
     "epochs": {"reached": 1, "seeds": 2, "median": 120.0, "low": 100.0, "high": 140.0,
                "median_is_lower_bound": True, "high_is_lower_bound": True},
     "per_seed": [{"epochs": 100.0, "reached": True}, {"epochs": 140.0, "reached": False}]}]}


def _clean_commit(monkeypatch: pytest.MonkeyPatch) -> None:
    """Results written by these tests record HEAD as clean, as on a committed tree
    (``--check`` refuses results from uncommitted code; the tests may run on one)."""
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True,
                          text=True, check=True).stdout.strip()
    monkeypatch.setattr(machine, "commit", lambda: {"commit": head, "dirty": False})


def test_check_fails_when_the_report_differs_from_the_results(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _clean_commit(monkeypatch)
    monkeypatch.setattr(machine, "RESULTS", tmp_path / "results")
    machine.write_result("multifidelity", MULTI)
    out = tmp_path / "REPORT.md"
    report.render(tmp_path / "results", out)
    assert report.check(tmp_path / "results", out) == 0
    assert "| asha | ≥ 120 [100–≥ 140], 1/2 reached |" in out.read_text()
    out.write_text(out.read_text().replace("| asha | ≥ 120", "| asha | ≥ 99"))  # a hand edit
    assert report.check(tmp_path / "results", out) == 1
    report.render(tmp_path / "results", out)
    changed = json.loads((tmp_path / "results" / "multifidelity.json").read_text())
    changed["rows"][0]["epochs"]["median"] = 99.0  # a new result, not rendered
    (tmp_path / "results" / "multifidelity.json").write_text(json.dumps(changed))
    assert report.check(tmp_path / "results", out) == 1


def test_every_result_records_its_command_commit_machine_and_load(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(machine, "RESULTS", tmp_path)
    monkeypatch.setattr(sys, "argv", [str(ROOT / "bench" / "multifidelity_bench.py"),
                                      "--seeds", "2"])
    machine.write_result("multifidelity", MULTI)
    m = json.loads((tmp_path / "multifidelity.json").read_text())["machine"]
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True,
                          text=True, check=True).stdout.strip()
    assert m["command"] == "python bench/multifidelity_bench.py --seeds 2"
    assert m["commit"] == head and isinstance(m["dirty"], bool)
    assert m["cores"] >= 1 and m["cpu"] and m["memory_gib"] > 0 and m["gpu"]
    assert len(m["load_average_at_start"]) == len(m["load_average_at_end"]) == 3


def test_the_headline_names_command_commit_and_machine_and_says_what_was_not_run(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(machine, "RESULTS", tmp_path)
    text = report.render(tmp_path, tmp_path / "REPORT.md").read_text()
    assert "None: no results file is committed" in text
    assert "## Multi-fidelity searches on simulated training\n\nNot run." in text
    machine.write_result("multifidelity", MULTI)
    (tmp_path / "backends.json").write_text(json.dumps({  # written before provenance
        "machine": "2 cores", "repeats": 3, "epochs": 3, "batch_per_rank": 64, "mp_width": 8,
        "cases": {"dp2": {"horovod_samples_per_s": 1.0, "torch_samples_per_s": 1.0,
                          "torch_over_horovod": 1.0, "max_train_loss_diff": 0.0}},
        "command": "python bench/backend_bench.py"}))
    text = report.render(tmp_path, tmp_path / "REPORT.md").read_text()
    head = text.split("## Headline figures")[1].split("\n## ")[0]
    figures = [line for line in head.splitlines() if line.startswith("- ")]
    assert len(figures) == 1 and "asha ≥ 120 [100–≥ 140], 1/2 reached" in figures[0], head
    m = json.loads((tmp_path / "multifidelity.json").read_text())["machine"]
    assert re.search(rf"\*From\* `{re.escape(m['command'])}`, commit `{m['commit'][:10]}`",
                     figures[0]), figures[0]
    assert f"{m['cores']} cores ({m['cpu']})" in figures[0]
    assert "Not in the headline" in head and "torch.distributed over Horovod" in head


def test_multifidelity_counts_every_seed_and_marks_those_that_never_got_there(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """bench/multifidelity_bench.py through bench/stats.py: each seed's epochs and
    whether it reached the quality; a seed that did not counts as a lower bound."""
    from bench import multifidelity_bench

    monkeypatch.setattr(machine, "RESULTS", tmp_path)
    multifidelity_bench.main(["--seeds", "3"])
    rows = json.loads((tmp_path / "multifidelity.json").read_text())["rows"]
    for row in rows:
        seeds, summary = row["per_seed"], row["epochs"]
        assert summary["seeds"] == len(seeds) == 3
        assert summary["reached"] == sum(s["reached"] for s in seeds)
        assert summary["high"] == max(s["epochs"] for s in seeds)
        assert summary["high_is_lower_bound"] == (summary["reached"] < 3)


OLD_MACHINE = {"host": "vm", "cores": 2, "cpu": "x", "memory_gib": 1.0, "gpu": "none",
               "started": "s", "load_average_at_start": [1.0, 1.0, 1.0]}  # no provenance


def _many_row(search: str, rank: float, quartiles: list[float], ask: float) -> dict:
    return {"search": search, "labels": [search], "mean_rank": rank,
            "rank_quartiles": quartiles, "median_best": {"sphere": "0.5 [0.1–0.9]"},
            "median_idle": 0.0, "median_virtual_time": 7.5, "median_ask_ms_per_trial": ask}


MANY = {"machine": OLD_MACHINE, "seeds": 3, "rounds": 6, "problems": ["sphere"],
        "nevergrad": True, "failed": {"ngopt": "TypeError: bad"}, "widths": [
            {"width": 64, "evaluations": 384, "left_out": ["ngopt"], "rows": [
                _many_row("optuna-tpe", 1.42, [1.0, 2.0], 33.5),
                _many_row("auto", 1.83, [1.25, 2.0], 0.467),
                _many_row("random", 2.75, [3.0, 3.0], 0.09)]},
            {"width": 256, "evaluations": 1536, "left_out": ["ngopt", "optuna-tpe"], "rows": [
                _many_row("auto", 1.0, [1.0, 1.0], 0.73),
                _many_row("random", 2.0, [2.0, 2.0], 0.138)]}]}


def _mf_row(search: str, ranks: tuple[float, float, float]) -> dict:
    return {"search": search, "mean_rank": dict(zip(("25%", "50%", "100%"), ranks, strict=True)),
            "median_regret_at_100%": {"p": "0.1 [0–0.2]"}, "median_epochs_spent": 2995.5,
            "ask_ms_per_trial": 20.0}


MF_HELDOUT = {"machine": OLD_MACHINE, "seeds": 3, "slots": 4, "budget_epochs": 3000,
              "problems": ["p"], "auto_picked": ["asha tpe, rungs 1-100"], "rows": [
                  _mf_row("tpe", (4.0, 1.5, 1.0)), _mf_row("auto", (1.0, 2.5, 2.5)),
                  _mf_row("asha tpe", (3.0, 2.5, 2.5)), _mf_row("hyperband", (2.0, 3.5, 4.0))]}
MF_HELDOUT["rows"][1]["median_regret_at_100%"] = {"p": "0.5 [0.3–0.7]"}  # auto's spread


def test_many_at_once_and_multifidelity_heldout_render_and_say_where_auto_lost(
        tmp_path: Path) -> None:
    """Issue 29's two benches: their REPORT.md sections come from the results alone,
    say where auto was beaten, tied or alone with random, why a search has no row,
    and that results without provenance stay out of the headline."""
    (tmp_path / "many_at_once.json").write_text(json.dumps(MANY))
    (tmp_path / "multifidelity_heldout.json").write_text(json.dumps(MF_HELDOUT))
    out = tmp_path / "REPORT.md"
    text = report.render(tmp_path, out).read_text()
    many = text.split(report.MANY_TITLE)[1].split("\n## ")[0]
    assert "Command and commit: not recorded." in many
    assert ("| auto | auto | 1.83 [1.25–2] | 0.5 [0.1–0.9] | 0% | 7.5 | 0.467 |"
            in many), many
    assert ("at 64, behind optuna-tpe on the mean rank (1.83 against 1.42), quartiles"
            " overlapping, so tied best; at 256, best on the mean rank (random search the"
            " only other search run)") in many
    assert "optuna-tpe not run: its ask time" in many
    wide = json.loads(json.dumps(MANY)) | {"max_width": {"optuna-tpe": 64, "cbo": 0},
                                          "not_installed": ["cbo"]}
    wide["widths"][1]["left_out"] += ["cbo"]
    (tmp_path / "many_at_once.json").write_text(json.dumps(wide))
    again = report.render(tmp_path, out).read_text()
    assert "optuna-tpe not run past 64 at once (`MAX_WIDTH` in the bench" in again
    assert "cbo not run (its package does not import here)" in again
    (tmp_path / "many_at_once.json").write_text(json.dumps(MANY))
    (tmp_path / "many_at_once_more.json").write_text(json.dumps(MANY))
    text = report.render(tmp_path, out).read_text()
    assert "### many_at_once_more.json: a further run\n" in text  # rendered too
    (tmp_path / "many_at_once_dev.json").write_text(json.dumps(MANY | {"problem_set": "dev"}))
    text = report.render(tmp_path, out).read_text()
    assert ("### many_at_once_dev.json: a further run on the dev problems (a sweep for a"
            " rule of auto; not held out)") in text
    assert "Dev problems (`--problems dev`; auto's rules were fitted on them)" in text
    sweep = json.loads(json.dumps(MANY)) | {"problem_set": "dev"}
    for w in sweep["widths"]:  # a sweep of candidates with no auto row
        w["rows"] = [x for x in w["rows"] if x["search"] != "auto"]
    (tmp_path / "many_at_once_dev.json").write_text(json.dumps(sweep))
    dev = report.render(tmp_path, out).read_text().split("### many_at_once_dev.json")[1]
    assert "auto has no row" not in dev.split("### ")[0]
    (tmp_path / "many_at_once_heldout_mf.json").write_text(json.dumps(
        MANY | {"problem_set": "heldout-mf"}))  # the held-out multi-fidelity pair alone
    mf_run = report.render(tmp_path, out).read_text().split(
        "### many_at_once_heldout_mf.json")[1].split("### ")[0]
    assert mf_run.startswith(": a further run\n") and "Dev problems" not in mf_run
    earlier = MANY | {"machine": MANY["machine"] | {"started": "2026-01-01 00:00:00",
                                                     "commit": "abcdef1234"}}
    (tmp_path / "many_at_once_old.json").write_text(json.dumps(earlier))
    text = report.render(tmp_path, out).read_text()
    assert ("### many_at_once_old.json: an earlier run (2026-01-01 00:00:00, commit abcdef12;"
            " the section's own run is newer") in text
    (tmp_path / "many_at_once_renamed.json").write_text(json.dumps(
        MANY | {"written_as": "many_at_once.json", "note": "parts ran elsewhere"}))
    text = report.render(tmp_path, out).read_text()
    assert ("### many_at_once_renamed.json: a further run (its command wrote"
            " many_at_once.json; renamed so that file stays the headline run") in text
    assert "Note: parts ran elsewhere\n" in text
    order = [line.split(":")[0] for line in text.splitlines()
             if line.startswith("### many_at_once_")]
    assert order.index("### many_at_once_old.json") < order.index("### many_at_once_dev.json")
    assert "Problems fixed in `bench/many_at_once_bench.py` before any search" in mf_run
    assert "ngopt could not run (it raised `TypeError: bad`)" in many
    mf = text.split(report.MF_HELDOUT_TITLE)[1].split("\n## ")[0]
    assert "| tpe | 4 | 1.5 | 1 | 0.1 [0–0.2] | 2,996 | 20 |" in mf, mf
    assert ("at 25%, auto 1, best; at 50%, auto 2.5, 2nd of 4, behind tpe (1.5); level with"
            " asha tpe; at 100%, auto 2.5, 2nd of 4") in mf, mf
    head = text.split("## Headline figures")[1].split("\n## ")[0]
    assert "Not in the headline" in head and "`auto` at many trials at once" in head
    assert "multi-fidelity held-out" in head
    # Item 3: every other search's worst seed (0.2) is below auto's best (0.3).
    assert ("Beyond the spread at 100 % (another search's worst seed below auto's best"
            " seed on a problem): p: tpe, asha tpe, hyperband.") in mf, mf
    assert report.check(tmp_path, out) == 0
    changed = json.loads(json.dumps(MF_HELDOUT))
    changed["rows"][1]["mean_rank"]["50%"] = 1.0  # a new figure, not rendered
    (tmp_path / "multifidelity_heldout.json").write_text(json.dumps(changed))
    assert report.check(tmp_path, out) == 1


GANGS = {"gangs": 8, "one_at_a_time_s": 20.0, "concurrently_s": 25.0, "speedup": 0.8,
         "longest_loop_hold_s": 0.03}


def _step(tmp: Path, name: str, result: dict) -> str:
    """A step of bench/steps.py that writes ``result`` as NAME.json under ``tmp`` (as a
    benchmark would, through write_result) at a fixed clean commit."""
    code = ("import pathlib; from bench import machine;"
            f" machine.RESULTS = pathlib.Path({str(tmp)!r});"
            " machine.commit = lambda: {'commit': 'c0ffee' * 6, 'dirty': False};"
            f" machine.write_result({name!r}, {result!r})")
    return f"-c {shlex.quote(code)}"


def test_one_run_of_the_steps_gives_the_headline_one_run_id_and_times_each_step(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """make bench-quick's claim: every headline figure from one run, the run's steps
    timed; --same-run fails once a figure comes from another run."""
    from bench import steps

    monkeypatch.setattr(machine, "RESULTS", tmp_path)
    monkeypatch.setitem(steps.STEPS, "quick", [("multi", _step(tmp_path, "multifidelity", MULTI)),
                                               ("gangs", _step(tmp_path, "gang-start", GANGS))])
    assert steps.main(["quick", "--run", "run-a"]) == 0
    for name in ("multifidelity", "gang-start"):
        m = json.loads((tmp_path / f"{name}.json").read_text())["machine"]
        assert (m["run"], m["size"]) == ("run-a", "quick")
    timed = json.loads((tmp_path / "bench-quick.json").read_text())
    assert list(timed["steps"]) == ["multi", "gangs"] and timed["missing"] == []
    assert all(s["rc"] == 0 and s["wall_s"] > 0 for s in timed["steps"].values())
    assert report.same_run(tmp_path) == []
    out = tmp_path / "REPORT.md"
    report.render(tmp_path, out)
    text = out.read_text()
    assert "All from one run, `run-a` (quick sizes, `make bench-quick`)" in text
    assert "## The run: `make bench-quick`, step by step" in text and "| gangs |" in text
    assert report.main(["--check", "--same-run", "--results", str(tmp_path),
                        "--out", str(out)]) == 0

    assert steps.main(["quick", "--only", "gangs", "--run", "run-b"]) == 0
    problems = report.same_run(tmp_path)
    assert len(problems) == 1 and "run run-a" in problems[0] and "run run-b" in problems[0]
    report.render(tmp_path, out)
    assert report.main(["--check", "--same-run", "--results", str(tmp_path),
                        "--out", str(out)]) == 1
    timed = json.loads((tmp_path / "bench-quick.json").read_text())  # a new run: a new record
    assert list(timed["steps"]) == ["gangs"] and timed["missing"] == ["multi"]


def test_same_run_refuses_results_run_by_hand_or_on_uncommitted_code(tmp_path: Path) -> None:
    clean = {"command": "python x.py", "commit": "a" * 40, "dirty": False, "cores": 2,
             "cpu": "x", "gpu": "none", "host": "vm", "run": "r", "size": "quick"}
    assert report.run_problems([{"machine": clean}, {"machine": clean}]) == []
    by_hand = {k: v for k, v in clean.items() if k != "run"}
    assert "no run id" in report.run_problems([{"machine": by_hand}])[0]
    assert "uncommitted" in report.run_problems([{"machine": clean | {"dirty": True}}])[0]
    other = report.run_problems([{"machine": clean}, {"machine": clean | {"commit": "b" * 40}}])
    assert other and "mixes" in other[0]
    assert report.same_run(tmp_path) == ["no headline figure: no results"]


def test_a_one_seed_headline_says_it_has_no_spread(tmp_path: Path) -> None:
    """make bench-quick runs e2e-planning and search-fidelity at one seed: their
    headline lines must say that the median and range are one run's."""
    e2e = json.loads((ROOT / "bench" / "results" / "e2e-planning.json").read_text())
    e2e["seeds"], e2e["rows"] = 1, {arm: rows[:1] for arm, rows in e2e["rows"].items()}
    (tmp_path / "e2e-planning.json").write_text(json.dumps(e2e))
    text = report.render(tmp_path, tmp_path / "REPORT.md").read_text()
    line = next(x for x in text.splitlines() if x.startswith("- `parallel: auto` end to end"))
    assert "(1 seed: one run, no spread," in line and "1 seeds" not in line, line


def test_the_32768_slot_section_shows_each_runs_drain_and_the_whole_commands_wall() -> None:
    """A sweep's busy share includes its final drain: the table shows the drain beside
    it, and the section says how long the whole command took (the issue's goal), not
    only each driver's run."""
    def run(mode: str, busy: float, drain: float, wall: float) -> dict:
        return {"mode": mode, "schedule": "async", "completed": 10, "virtual_h": 2.0,
                "utilization": busy, "idle_share_after_last_launch": drain,
                "startup_share": 0.001, "lost": 0, "node_failures": 1,
                "scheduler_cpu_ms_per_event": 0.2, "events_per_s": 1000.0,
                "peak_memory_mib": 100.0, "driver_wall_s": wall}

    sim = {"slots": 32768, "nodes": 4096, "slots_per_node": 8, "fsync": True,
           "node_mtbf_h": 2000.0, "repair_h": 4.0, "rank_failure": 0.005, "allocation_h": 48.0,
           "machine": {"started": "2026-11-25 22:00:00", "finished": "2026-11-25 22:10:30",
                       "host": "vm", "cores": 2, "cpu": "x", "memory_gib": 1, "gpu": "none",
                       "load_average_at_start": [1.0, 1.0, 1.0]},
           "workloads": {"mixed": {"runs": [run("sweep", 0.77, 0.22, 300.0),
                                            run("allocation", 0.998, 0.0, 200.0)]}}}
    text = "\n".join(report.scale_section(sim, "simulate-4096-fsync.json"))
    header = next(line for line in text.splitlines() if line.startswith("| workload"))
    assert "| busy | final drain |" in header
    assert "| mixed | sweep | async | 10 | 2.0 | 77.0% | 22.0% |" in text
    assert "The whole command took 630 s of wall time, 500 s of it in the drivers' runs." in text


def test_the_engine_check_renders_apart_from_the_many_at_once_runs(tmp_path: Path) -> None:
    """bench/many_at_once_engine.py's result is not a further many-at-once run (its
    schema differs): it renders its own table, counting runs whose engine best and
    virtual time equal the bench loop's."""
    run = {"problem": "p", "seed": 0, "width": 16, "loop": {"best": 1.0, "time": 7.0},
           "engine": {"best": 1.0, "virtual_time": 7.0, "idle_before_last_launch": 0.0,
                      "driver_s": 0.5, "label": "genetic async 16", "trials": 96}}
    other = json.loads(json.dumps(run))
    other["seed"], other["engine"]["best"] = 1, 2.0  # the engine found another best
    (tmp_path / "many_at_once.json").write_text(json.dumps(MANY))
    (tmp_path / "many_at_once_engine.json").write_text(json.dumps(
        {"machine": OLD_MACHINE, "widths": [16], "runs": [run, other]}))
    text = report.render(tmp_path, tmp_path / "REPORT.md").read_text()
    assert "| 16 | 2 | 1 of 2 | 2 of 2 | 0.0% | 0.5 [0.5–0.5] | genetic async 16 |" in text
    assert "### many_at_once_engine.json" not in text


# -- a headline as new as the code it measures -----------------------------------------------


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
                          cwd=repo, capture_output=True, text=True, check=True).stdout.strip()


def _commit(repo: Path, path: str, text: str) -> str:
    (repo / path).parent.mkdir(parents=True, exist_ok=True)
    (repo / path).write_text(text)
    _git(repo, "add", path)
    _git(repo, "commit", "-q", "-m", f"change {path}")
    return _git(repo, "rev-parse", "HEAD")


def test_check_fails_on_a_figure_older_than_the_code_it_measures_until_labelled(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A headline figure made at a commit before the last change to what its step
    measures (bench/steps.py's MEASURES: search/ for the multi-fidelity bench) fails
    --check until REPORT.md labels it stale; the label stays true as commits land."""
    from bench import steps

    assert set(steps.MEASURES) == {name for name, _ in (*steps.QUICK, *steps.FULL)}
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    measured = _commit(repo, "search/algo.py", "v1\n")
    monkeypatch.setattr(report, "REPO", repo)
    report._stale_since.cache_clear()
    results = tmp_path / "results"
    monkeypatch.setattr(machine, "RESULTS", results)
    monkeypatch.setattr(sys, "argv", [str(ROOT / "bench" / "multifidelity_bench.py"),
                                      "--seeds", "2"])
    machine.write_result("multifidelity", MULTI)
    data = json.loads((results / "multifidelity.json").read_text())
    data["machine"]["commit"], data["machine"]["dirty"] = measured, False
    (results / "multifidelity.json").write_text(json.dumps(data))
    out = tmp_path / "REPORT.md"
    report.render(results, out)
    assert "Stale" not in out.read_text() and report.check(results, out) == 0

    _commit(repo, "README.md", "not measured\n")  # a change to nothing it measures
    report._stale_since.cache_clear()
    assert report.check(results, out) == 0
    changed = _commit(repo, "search/algo.py", "v2\n")
    report._stale_since.cache_clear()
    problems = report.stale_problems(results, out.read_text())
    assert len(problems) == 1 and problems[0].startswith("multi-fidelity searches"), problems
    assert report.check(results, out) == 1  # made before the change, not labelled
    report.render(results, out)
    label = (f"  - **Stale**: measured at `{measured[:10]}`; since then the code it measures"
             f" changed: `search/` (the first change in `{changed[:10]}`); rerun"
             " `make bench-quick`.")
    assert label in out.read_text().split("\n")
    assert report.check(results, out) == 0
    _commit(repo, "search/algo.py", "v3\n")  # later changes: the label is still what renders
    report._stale_since.cache_clear()
    assert report.check(results, out) == 0
    report._stale_since.cache_clear()


def test_nestor_is_compared_with_tunes_default_at_the_same_number_of_trials() -> None:
    """Tune's default ran 10 trials, nestor 250: the ratio is taken at 250 on both
    sides (Tune's from the phases it measured), not Tune's 10 against nestor's 250."""
    runs = {
        "nestor (warm gangs, journal, MLflow)": {"250": {
            "startup_s": 12.4, "steady_ms_per_trial": 30.875, "wind_down_s": 1.9,
            "total_s": 22.0, "total_ms_per_trial": 88.0}},
        "ray tune, reuse_actors=True": {"250": {
            "startup_s": 15.5, "steady_ms_per_trial": 25.2, "wind_down_s": 3.3,
            "total_s": 25.1, "total_ms_per_trial": 100.3}},
        "ray tune, default (new actor per trial)": {"10": {
            "startup_s": 18.1, "steady_ms_per_trial": 1632.5, "wind_down_s": 2.4,
            "total_s": 35.2, "total_ms_per_trial": 3517.3}},
    }
    (line,) = [x for x in report._against_tune(runs) if x.startswith("- ")]
    # 18.1 + 1.6325 x 249 + 2.4 = 427 s at 250 trials, over nestor's 22.0 s: 1/19 (not the
    # 1/40 of Tune's 10-trial total per trial over nestor's 250-trial one).
    assert "per trial 1/19 of Tune's default end to end at 250 trials" in line, line
    assert "Tune's default ran 10 trials; at 250" in line and "427 s" in line
    runs["ray tune, default (new actor per trial)"]["250"] = {
        "startup_s": 18.0, "steady_ms_per_trial": 1600.0, "wind_down_s": 2.0,
        "total_s": 440.0, "total_ms_per_trial": 1760.0}
    (line,) = [x for x in report._against_tune(runs) if x.startswith("- ")]
    assert "1/20 of Tune's default end to end at 250 trials;" in line, line  # its own run


def test_the_interleaved_overhead_table_gives_medians_ranges_ratios_and_the_goals() -> None:
    """bench/orchestration_bench.py run interleaved (issue 40 item 2): each cell a
    median with its range, nestor against Tune at equal counts, and Tune's default
    where it could not run the count by its steady state per trial at its cap
    (its start-up left out, in its favour), each held against issue 40's goal."""
    from bench import orchestration_bench as ob

    def timed(total: float, startup: float = 5.0, n: int = 2000) -> dict[str, float]:
        return {"startup_s": startup, "steady_ms_per_trial": 1000 * (total - startup - 1) / n,
                "wind_down_s": 1.0, "total_s": total, "total_ms_per_trial": 1000 * total / n,
                "load_average": 1.0}

    measured = {  # three repetitions each, made up
        ("nestor", 2000): [timed(18.0), timed(17.0), timed(19.0)],
        ("nestor-fn", 2000): [timed(14.0), timed(15.0), timed(13.5)],
        ("tune-reuse", 2000): [timed(36.0), timed(38.0), timed(35.0)],
        ("tune", 50): [timed(70.0, 18.0, 50)] * 3,
    }
    runs = {ob.SYSTEMS[s]: {str(n): ob.spread(rows)} for (s, n), rows in measured.items()}
    ov = {"counts": [2000], "tune_new_actor_cap": 50, "concurrent": 2, "reps": 3,
          "runs": runs, "ratios": ob.ratios(runs, [2000]), "nestor_command": "nestor sweep",
          "nestor_function": "nestor run SPEC", "method": "interleaved"}
    text = "\n".join(report.overhead_section({"overhead": ov, "machine": "here"}))
    assert "| 18.0 [17.0–19.0] |" in text and "| 3 |" in text  # median [range], reps
    # 14.0 / 36.0 and 18.0 / 36.0, medians at 2,000 on both sides
    assert "function trials / Tune `reuse_actors` 0.39x (goal at most 0.4x: met)" in text
    assert "command trials / Tune `reuse_actors` 0.50x (goal at most 0.5x: met)" in text
    # Tune's default: (70 - 18 - 1) / 50 s = 1,020 ms per trial in its steady state;
    # nestor's command trials 9 ms each end to end: 1/113, short of 1/150.
    assert ("command trials per trial 1/113 of Tune's default, end to end (against Tune's"
            " default's steady state per trial at 50) (goal at most 1/150: not met)") in text
    headline = report.interleaved_headline(ov)
    assert "median of 3" in headline and "0.39x (function)" in headline, headline


def test_a_search_result_rerun_on_another_blas_kernel_is_compared_outcome_by_outcome(
        tmp_path: Path) -> None:
    """bench/results/kernels/KERNEL/ holds reruns with another OpenBLAS kernel (issue 40
    item 3): the report counts the outcomes that differ (timings and machine aside)
    and shows the headline each renders, or says it reads the same on both."""
    import copy
    import shutil

    results = tmp_path / "results"
    (results / "kernels" / "skylakex").mkdir(parents=True)
    shutil.copy(ROOT / "bench" / "results" / "auto-sine.json", results / "auto-sine.json")
    main = json.loads((results / "auto-sine.json").read_text())
    main["machine"]["blas"] = [{"library": "openblas", "kernel": "Haswell", "threads": 2}]
    (results / "auto-sine.json").write_text(json.dumps(main))
    rerun = copy.deepcopy(main)
    rerun["machine"]["blas"][0]["kernel"] = "SkylakeX"
    rerun["machine"]["wall_s"] = 1.0  # not an outcome
    leaves = report.outcome_leaves(main)
    (results / "kernels" / "skylakex" / "auto-sine.json").write_text(json.dumps(rerun))
    text = "\n".join(report.kernels_section(results))
    assert (f"| `auto-sine.json` | openblas Haswell | openblas SkylakeX | 0 of {len(leaves):,}"
            " | yes |") in text
    auto = rerun["problems"]["sin7"]["searches"]["auto"]
    auto["regret"] = [10 * r for r in auto["regret"]]  # seeds' regrets, not in the headline
    (results / "kernels" / "skylakex" / "auto-sine.json").write_text(json.dumps(rerun))
    text = "\n".join(report.kernels_section(results))
    assert f"{len(auto['regret'])} of {len(leaves):,}" in text
    assert "`auto-sine.json`: the headline reads the same on both:" in text
    auto["median"] *= 10  # the headline's figure
    (results / "kernels" / "skylakex" / "auto-sine.json").write_text(json.dumps(rerun))
    text = "\n".join(report.kernels_section(results))
    assert f"{len(auto['regret']) + 1} of {len(leaves):,}" in text
    assert "`auto-sine.json`: the headlines differ:" in text
    assert text.count("sine-fit sin7 regret") == 2
    assert "Not run" in "\n".join(report.kernels_section(tmp_path / "none"))
