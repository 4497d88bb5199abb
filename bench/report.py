"""Render bench/REPORT.md and its PNG plots from bench/results/*.json.

Reads what the benchmarks of one ``make bench`` (or ``make bench-quick``)
wrote: ``tables.json`` (the seed's three tables), ``simulate.json`` (the real
scheduler on 2,048 simulated slots), the newest ``orchestration-*.json`` with
the per-trial overhead and, where a GPU machine ran them, ``gpu-tables.json``,
shown in its own section; ``e2e-planning*.json`` (``parallel: auto`` against
hand-picked shapes through ``nestor run``, a section each), ``planning.json`` (the cost
model's predicted against measured time per epoch) and ``simulate-planning.json`` (the
seed's combined table simulated at 128 nodes), ``many_at_once.json`` (auto at 16 to
1,024 trials at once) and ``multifidelity_heldout.json`` (multi-fidelity searches on
held-out problems at 25, 50 and 100 % of one epoch budget). A missing file becomes a
line saying that part was not run.

    .venv/bin/python -m bench.report [--results bench/results] [--out bench/REPORT.md]
"""

from __future__ import annotations

import argparse
import datetime
import functools
import json
import math
import re
import statistics
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import heldout_ledger
from bench.machine import RESULTS, ROOT
from bench.steps import measured_paths

FIGURES = "figures"

SEED_SINGLE = ("The seed: baseline 1,090 s on 1 node; model parallel 1.5x on 4 nodes;"
               " data parallel 3.5x on 4 nodes")
SEED_HPO = ("The seed: random search over 5,000 configurations, 0.1 % reached 98.6 %; the GA"
            " needed 90 runs / 50 generations on 1 node, 1,187 runs / 11 generations on 64")
SEED_COMBINED = ("The seed's combined table was an estimate, \"calculated by multiplying"
                 " individual improvements\" (random search 1x ... HPO+DP+MP 56x); here each"
                 " row is measured, and the product is shown beside it")


RESULTS_FILE = "_results_file"  # the file a loaded result came from (the ledger's key)


def _read(path: Path) -> dict[str, Any]:
    """A results file, marked with its name so that a section can say what
    ``bench/heldout_ledger.py`` records of it."""
    data = json.loads(path.read_text())
    data[RESULTS_FILE] = path.name
    return data


def _load(results: Path, name: str) -> dict[str, Any] | None:
    path = results / f"{name}.json"
    return _read(path) if path.is_file() else None


def _ledger_lines(result: dict[str, Any]) -> list[str]:
    """What the held-out ledger says of a result's run (which revision of auto it
    judged, and whether on a fresh or a reused set; or what was fitted on it)."""
    text = heldout_ledger.label(result.get(RESULTS_FILE, ""))
    return [text, ""] if text else []


def _finished_at(data: dict[str, Any]) -> str:
    m = data.get("machine_detail") or data.get("machine")
    return m.get("finished", m.get("started", "")) if isinstance(m, dict) else ""


def _overhead_runs(results: Path) -> list[dict[str, Any]]:
    """The orchestration_bench results with an overhead part, the headline's first: the
    latest from a run of bench/steps.py (one run id beside the other headline figures),
    else the latest of all (by the time each records, not the file's: a fresh clone gives
    every file one mtime); the others follow, latest first, as further runs."""
    found = [json.loads(path.read_text()) for path in sorted(results.glob("orchestration*.json"))]
    found = sorted((data for data in found if "overhead" in data), key=_finished_at,
                   reverse=True)
    stepped = [data for data in found if _run_of(data)]
    first = stepped[0] if stepped else (found[0] if found else None)
    return [first, *[data for data in found if data is not first]] if first else []


def _projection_runs(results: Path) -> list[dict[str, Any]]:
    """The orchestration_bench results of its projection parts alone (no overhead part),
    with their provenance (older ones have none: left out), latest first."""
    found = [json.loads(path.read_text()) for path in sorted(results.glob("orchestration*.json"))]
    found = [data for data in found if "overhead" not in data
             and any(part in data for part in ("projection", "projection_server", "lag"))
             and isinstance(data.get("machine"), dict) and data["machine"].get("commit")]
    return sorted(found, key=_finished_at, reverse=True)


def _run_of(data: dict[str, Any]) -> str | None:
    m = data.get("machine")
    return m.get("run") if isinstance(m, dict) else None


def seeds_text(n: int) -> str:
    """``5 seeds``; one seed says that its median and range are that one run's."""
    return "1 seed: one run, no spread" if n == 1 else f"{n} seeds"


def _f(value: Any, fmt: str = "{:.1f}", none: str = "—") -> str:
    return none if value is None else fmt.format(value)


def _summary(summary: dict[str, Any]) -> Any:
    """A SeedSummary from its JSON (older results lack the lower-bound flags)."""
    from bench.stats import SeedSummary

    return SeedSummary(**{k: summary.get(k, False) for k in (
        "median_is_lower_bound", "low_is_lower_bound", "high_is_lower_bound")},
        **{k: summary[k] for k in ("reached", "seeds", "median", "low", "high")})


def _cell(summary: dict[str, Any], fmt: str = "{:.0f}") -> str:
    return _summary(summary).cell(fmt)


def _ranked(hpo: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """Searches ordered by median runs to the threshold over all their seeds."""
    from bench.stats import rank_key

    return sorted(hpo.items(), key=lambda item: rank_key(_summary(item[1]["runs"])))


def _hpo_headline(algorithm: str, row: dict[str, Any]) -> str:
    """``genetic ≥ 12 runs / ≥ 20 s (1/2 seeds reached)``: the median over every seed,
    one that never reached the threshold counted at its whole budget (≥)."""
    runs, time_s = _summary(row["runs"]), _summary(row["time_s"])
    if runs.median is None:
        return f"{algorithm}: no seeds"
    text = (f"{algorithm} {'≥ ' if runs.median_is_lower_bound else ''}{runs.median:.0f} runs"
            f" / {'≥ ' if time_s.median_is_lower_bound else ''}{time_s.median:.0f} s")
    if runs.reached < runs.seeds:
        text += f" ({runs.reached}/{runs.seeds} seeds reached)"
    return text


BOUND_MARK = {None: "", "lower": "≥ ", "upper": "≤ ", "unknown": "~ "}


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return [*lines, ""]


def _commit(m: dict[str, Any]) -> str:
    dirty = {True: " (uncommitted changes in the tree)", None: " (tree state unknown)"}
    return f"commit `{m['commit'][:10]}`{dirty.get(m.get('dirty'), '')}"


def has_provenance(m: Any) -> bool:
    """Whether a result's ``machine`` names its command, commit and machine (older
    results, written before bench/machine.py recorded them, do not)."""
    return isinstance(m, dict) and all(k in m for k in ("command", "commit", "cores", "cpu"))


def source(m: Any) -> str:
    """Where a headline figure came from: the command, the commit, the machine, the load."""
    if not has_provenance(m):
        return "source not recorded"
    loads = [*m.get("load_average_at_start", [])[:1], *m.get("load_average_at_end", [])[:1]]
    load = "–".join(f"{x:.1f}" for x in loads)
    run = f", run `{m['run']}`" if m.get("run") else ""
    return (f"`{m['command']}`, {_commit(m)}{run}, {m['cores']} cores ({m['cpu']}), GPU"
            f" {m['gpu']}, 1-min load {load}")


# -- a headline as new as the code it measures ---------------------------------------------

REPO = ROOT  # the git checkout whose history says what changed since a result's commit


def _git(*args: str) -> str | None:
    """``git ARGS`` in REPO: its output, or None where it fails (no such commit, no git)."""
    done = subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True,
                          check=False)
    return done.stdout.strip() if done.returncode == 0 else None


@functools.cache
def _stale_since(repo: Path, commit: str, paths: tuple[str, ...]) -> str | None:
    """Why results made at ``commit`` no longer measure the code at HEAD (None: they
    do): ``paths`` changed in commits ``commit`` does not contain. Said by what stays
    true as later commits land (the paths changed, the first such commit), so the
    label, once rendered, does not go out of date with every commit after it."""
    last = _git("log", "-1", "--format=%H", "HEAD", "--", *paths)
    if not last:
        return None  # no history of those paths here (not a git checkout)
    if _git("cat-file", "-e", f"{commit}^{{commit}}") is None:
        return f"measured at `{commit[:10]}`, a commit not in this repository's history"
    if _git("merge-base", "--is-ancestor", last, commit) is not None:
        return None  # the last change to what it measures is in the measured commit
    since = (_git("log", "--reverse", "--format=%H", f"{commit}..HEAD", "--", *paths)
             or "").split()
    changed = [p for p in paths if _git("log", "-1", "--format=%H", f"{commit}..HEAD", "--", p)]
    first = f" (the first change in `{since[0][:10]}`)" if since else ""
    return (f"measured at `{commit[:10]}`; since then the code it measures changed: "
            + ", ".join(f"`{p}`" for p in changed) + first)


def stale_label(m: Any) -> str | None:
    """The line that labels a headline figure stale (None: it is as new as the code
    it measures, or its command is no step's, or it records no commit)."""
    if not has_provenance(m):
        return None
    paths = measured_paths(m["command"])
    if not paths:
        return None
    why = _stale_since(REPO, m["commit"], paths)
    return None if why is None else f"  - **Stale**: {why}; rerun `make bench-quick`."


def stale_problems(results: Path, report_text: str) -> list[str]:
    """Headline figures made before the last change to the code they measure that
    ``report_text`` (REPORT.md) does not label stale: what ``--check`` fails on."""
    problems = []
    for result, lines in _headline_of(load(results)):
        label = stale_label(_provenance(result))
        if label is not None and label not in report_text:
            figure = lines[0].removeprefix("- ")[:60].rstrip() + "..."
            problems.append(f"{figure} ({_provenance(result)['command']}):"
                            f" {label.split('**: ')[1]}")
    return problems


# -- held out means held out; no figure from uncommitted code -----------------------------


def dirty_results(results: Path) -> list[str]:
    """The committed results made on a tree with uncommitted changes (``dirty: true`` in
    their machine block): no figure of REPORT.md may come from one, and every results
    file is rendered somewhere in it (or read by none: kept for no figure)."""
    found = []
    for path in sorted(results.glob("*.json")):
        m = _provenance(json.loads(path.read_text()))
        if isinstance(m, dict) and m.get("dirty") is True:
            found.append(f"{path.name}: made at `{str(m.get('commit'))[:10]}` with uncommitted"
                         " changes in the tree; rerun it at a commit, or remove it")
    return found


def _bench_of(m: Any) -> str | None:
    """The bench script a result's command ran (``many_at_once_bench``), or None."""
    command = m.get("command", "") if isinstance(m, dict) else ""
    found = re.search(r"bench[/.](\w+?)(?:\.py)?(?:\s|$)", command)
    return found.group(1) if found else None


def _problem_ids(data: dict[str, Any]) -> set[str] | None:
    """A result's problems as the ledger names them (``BENCH:NAME``; the bare name where
    the result records no command), or None where it records no problems."""
    names = data.get("problems")
    if not isinstance(names, list | dict):
        return None
    bench = _bench_of(_provenance(data))
    return {f"{bench}:{n}" if bench else str(n) for n in names}


def _matches(recorded: set[str], ledger: frozenset[str]) -> set[str]:
    """``ledger``'s problems as ``recorded`` names them (bare names for a result that
    records no command)."""
    return set(ledger) if any(":" in p for p in recorded) else {
        p.split(":", 1)[1] for p in ledger}


def _ledger_result(results: Path, name: str) -> dict[str, Any] | None:
    """A result the ledger names: a file in ``results``, or ``COMMIT:PATH``, a version
    since overwritten (read from git; None where it cannot be)."""
    if ":" not in name:
        path = results / name
        return json.loads(path.read_text()) if path.is_file() else None
    text = _git("show", name)
    return json.loads(text) if text else None


def _runs_revision(commit: str, revision: str, following: str | None) -> str | None:
    """Why results made at ``commit`` did not run ``revision`` (None: they did, or git
    cannot say): it lacks the revision's commit, or has the next revision's."""
    if _git("cat-file", "-e", f"{commit}^{{commit}}") is None:
        return f"made at `{commit[:10]}`, a commit not in this repository's history"
    if _git("merge-base", "--is-ancestor", revision, commit) is None:
        return f"made at `{commit[:10]}`, before `{revision}`"
    if following and _git("merge-base", "--is-ancestor", following, commit) is not None:
        return f"made at `{commit[:10]}`, which has the next revision `{following}` too"
    return None


COMMITTED = ROOT / "bench" / "results"  # the results the ledger describes


def ledger_problems(results: Path,
                    ledger: tuple[heldout_ledger.Revision, ...] = heldout_ledger.LEDGER,
                    committed: bool | None = None) -> list[str]:
    """Where ``bench/heldout_ledger.py`` and the results disagree: the ledger itself
    (:func:`heldout_ledger.problems`), and, for the committed results (``committed``;
    by default whether ``results`` is bench/results, not a scratch folder), a result it
    names that is missing or ran other problems, a judgement made on code of another
    revision, and a result on the ledger's problems that it does not name (a
    judgement not recorded)."""
    found = heldout_ledger.problems(ledger)
    if committed is None:
        committed = results.resolve() == COMMITTED.resolve()
    if not committed:
        return found
    git = _git("rev-parse", "HEAD") is not None
    named: set[str] = set()
    for k, revision in enumerate(ledger):
        following = ledger[k + 1].commit if k + 1 < len(ledger) else None
        uses = [(name, revision.fitted_on, False) for name in revision.fit_results]
        uses += [(name, j.problems, True) for j in revision.judged_by for name in j.results]
        for name, problems, judged in uses:
            named.add(name)
            if ":" in name and not git:
                continue
            data = _ledger_result(results, name)
            if data is None:
                found.append(f"{revision.name}: {name} is not in {results} (or git)")
                continue
            recorded = _problem_ids(data)
            if recorded is not None:
                expected = _matches(recorded, problems)
                if recorded != expected if judged else not recorded <= expected:
                    found.append(f"{revision.name}: {name} ran {', '.join(sorted(recorded))};"
                                 f" the ledger says {', '.join(sorted(expected))}")
            m = _provenance(data)
            if judged and git and has_provenance(m):
                why = _runs_revision(m["commit"], revision.commit, following)
                if why:
                    found.append(f"{name} is recorded as judging {revision.name}"
                                 f" (`{revision.commit}`) but was {why}: record the"
                                 " revision it judged (a fresh held-out set is due)")
    known = frozenset().union(*(r.fitted_on for r in ledger),
                              *(j.problems for r in ledger for j in r.judged_by))
    for path in sorted(results.glob("*.json")):
        recorded = _problem_ids(json.loads(path.read_text()))
        if path.name not in named and recorded and recorded & known:
            found.append(f"{path.name} ran problems the ledger tracks"
                         f" ({', '.join(sorted(recorded & known))}) but the ledger does not"
                         " name it: record what it fitted or judged")
    return found


def machine_line(m: dict[str, Any] | str | None) -> str:
    if m is None:
        return "machine: not recorded"
    if isinstance(m, str):
        return f"machine: {m}"
    start = ", ".join(f"{x:.2f}" for x in m["load_average_at_start"])
    end = ", ".join(f"{x:.2f}" for x in m.get("load_average_at_end", []))
    ran = (f"Command: `{m['command']}` at {_commit(m)}. " if has_provenance(m)
           else "Command and commit: not recorded. ")
    kernels = "; ".join(f"{b['library']} {b['version']}, kernel {b['kernel']}"
                        f"{' (OPENBLAS_CORETYPE)' if b.get('coretype_env') else ''},"
                        f" {b['threads']} threads" for b in m.get("blas") or [])
    return (f"{ran}machine: {m['host']}, {m['cores']} cores ({m['cpu']}), {m['memory_gib']} GiB,"
            f" GPU: {m['gpu']};{f' BLAS: {kernels};' if kernels else ''}"
            f" load average (1, 5, 15 min) {start} at start, {end or '?'}"
            f" at end ({m['started']} – {m.get('finished', '?')})")


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


# -- sections ---------------------------------------------------------------------------


def single_section(t: dict[str, Any], out: Path, tag: str) -> list[str]:
    s = t["single"]
    rows = []
    for label, r in s["rows"].items():
        rows.append([label, str(r["ranks"]), _f(r["time_to_target_s"]),
                     str(r["epochs_to_target"]) if r["time_to_target_s"] else "not reached",
                     _f(r["speedup"], "{:.2f}x"), _f(r["efficiency"], "{:.0%}"),
                     f"{r['samples_per_s']:.0f}", f"{r['throughput_efficiency']:.0%}",
                     _f(r["test_accuracy"], "{:.3f}")])
    lines = [f"### Single model ({tag})", "",
             f"Time for the built-in CNN to reach validation accuracy {s['target_val_accuracy']}"
             f" (training time, sum of epoch times; same global batch at every size), settings"
             f" `{s['settings']}`, config `{s['config']}`. {SEED_SINGLE}.", ""]
    lines += _table(["size", "ranks", "time to target s", "epochs", "speed-up",
                     "efficiency", "samples/s", "throughput efficiency", "test acc."], rows)
    if any((r["efficiency"] or 0) > 1.05 for r in s["rows"].values()):
        lines += ["Efficiency above 100 % cannot come from the ranks: the dp=1 run was slowed"
                  " by other load on the machine (see the load average), so these speed-ups"
                  " are noise, not a result.", ""]
    plt = _plt()
    fig, ax = plt.subplots(figsize=(5, 3))
    labels = list(s["rows"])
    ax.bar(labels, [r["speedup"] or 0 for r in s["rows"].values()], label="measured")
    ax.plot(labels, [r["ranks"] for r in s["rows"].values()], "k--", marker="o",
            label="ideal (= ranks)")
    ax.set_ylabel("speed-up to target vs dp=1")
    ax.set_title(f"single model ({tag})")
    ax.legend()
    fig.tight_layout()
    name = f"{FIGURES}/{tag}-single.png"
    fig.savefig(out / name, dpi=90)
    plt.close(fig)
    return [*lines, f"![single-model speed-up]({name})", ""]


def hpo_section(t: dict[str, Any], out: Path, tag: str) -> list[str]:
    c = t["calibration"]
    lines = [f"### HPO ({tag})", "",
             f"Threshold: val_accuracy **{c['threshold']}**, the accuracy that only the top"
             f" {c['top_fraction']:.0%} of {c['configurations']} random configurations reached"
             f" ({c['reaching']} did; their median was {_f(c['median_val'], '{:.3f}')}, best"
             f" {_f(c['best_val'], '{:.3f}')}). Each search stops at the threshold or after"
             f" {t['profile']['budget']} trials; runs and time count every run, failed ones"
             f" included; {t['hpo_slots']} slots, 1-rank trials; median [min–max] over"
             f" all {t['profile']['seeds']} seeds: a seed that never reached the threshold"
             " counts at its whole budget (every run, or its whole wall time), a lower bound"
             " marked ≥, and searches are ranked on that median of runs (a ≥ median can"
             f" only be worse than its rank). {SEED_HPO}.", ""]
    rows = []
    for rank, (algorithm, r) in enumerate(_ranked(t.get("hpo", {})), start=1):
        rows.append([str(rank), algorithm, _cell(r["runs"]),
                     _cell(r["generations"]) if algorithm == "genetic" else "—",
                     _cell(r["time_s"]),
                     ", ".join(_f(s["best_val"], "{:.3f}") for s in r["seeds"])])
    lines += _table(["rank", "search", "runs to threshold", "generations",
                     "time to threshold s", "best val per seed"], rows)
    plt = _plt()
    fig, ax = plt.subplots(figsize=(5, 3))
    values = [v for v in c["run"]["values"] if v is not None]
    ax.hist(values, bins=20, color="grey")
    ax.axvline(c["threshold"], color="red", label=f"threshold {c['threshold']:.3f}")
    ax.set_xlabel("val_accuracy of a random configuration")
    ax.set_ylabel("configurations")
    ax.legend()
    fig.tight_layout()
    name = f"{FIGURES}/{tag}-calibration.png"
    fig.savefig(out / name, dpi=90)
    plt.close(fig)
    return [*lines, f"![random configurations and the threshold]({name})", ""]


def combined_section(t: dict[str, Any], out: Path, tag: str) -> list[str]:
    over = " (oversubscribed: more slots than cores)" if t.get("oversubscribed") else ""
    lines = [f"### Combined ({tag})", "",
             f"Time to the same threshold on one allocation of {t['slots']} slots{over},"
             f" {t['profile']['combined_seeds']} seed(s); HPO is {t['combined_algorithm']}."
             " Every seed counts: one that never reached the threshold at its whole wall"
             " time, a lower bound. A speed-up over a bounded baseline is a lower bound (≥),"
             " one of a bounded row an upper bound (≤), and where both are bounded it is"
             " unknown (~)."
             f" Estimate = product of the individual speed-ups: HPO's from the HPO table, dp's"
             f" and mp's from the single-model table of this run. {SEED_COMBINED}.", ""]
    rows = []
    for label, r in t["combined"].items():
        rows.append([label, _cell(r["time_s"], "{:.1f}"), _cell(r["runs"]),
                     BOUND_MARK[r.get("speedup_bound")] + _f(r["measured_speedup"], "{:.2f}x"),
                     BOUND_MARK[r.get("individual_bound")]
                     + _f(r["individual_speedup"], "{:.2f}x"),
                     BOUND_MARK[r.get("estimated_bound")]
                     + _f(r["estimated_speedup"], "{:.2f}x")])
    lines += _table(["configuration", "time to threshold s", "runs", "measured speed-up",
                     "individual factor", "estimate (product)"], rows)
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 3))
    labels = [f"row {i + 1}" for i in range(len(rows))]
    measured = [r["measured_speedup"] or 0 for r in t["combined"].values()]
    estimate = [r["estimated_speedup"] or 0 for r in t["combined"].values()]
    xs = range(len(labels))
    ax.bar([x - 0.2 for x in xs], measured, width=0.4, label="measured")
    ax.bar([x + 0.2 for x in xs], estimate, width=0.4, label="product estimate")
    ax.set_xticks(list(xs), labels)
    ax.set_ylabel("speed-up vs random search")
    ax.legend()
    fig.tight_layout()
    name = f"{FIGURES}/{tag}-combined.png"
    fig.savefig(out / name, dpi=90)
    plt.close(fig)
    order = "; ".join(f"{i + 1}. {label}" for i, label in enumerate(t["combined"]))
    return [*lines, f"Rows: {order}.", "", f"![combined: measured vs estimated]({name})", ""]


def tables_sections(t: dict[str, Any], out: Path, tag: str) -> list[str]:
    lines = [machine_line(t["machine"]), ""]
    lines += [f"Profile `{t['profile']['name']}`; k = {t['k']}; total wall"
              f" {t['wall_s']:.0f} s."] + [f"Note: {n}" for n in t["profile"]["notes"]] + [""]
    if "single" in t:
        lines += single_section(t, out, tag)
    if "calibration" in t and "hpo" in t:
        lines += hpo_section(t, out, tag)
    if "combined" in t:
        lines += combined_section(t, out, tag)
    return lines


# Issue 40's goals, each a ratio of medians at one trial count on both sides (Tune's
# default: its steady state per trial at its cap, where it could not run the count).
OVERHEAD_GOALS = (("nestor-fn/tune-reuse", "nestor's function trials / Tune `reuse_actors`",
                   0.4),
                  ("nestor/tune-reuse", "nestor's command trials / Tune `reuse_actors`", 0.5))
PER_TRIAL_GOAL, PER_TRIAL_GOAL_COUNTS = 1 / 150, (2000, 10000)


def _med(r: dict[str, Any], key: str, digits: int) -> str:
    """A median with its range over the repetitions: ``12.3 [11.9–13.0]``."""
    low, high = r.get(f"{key}_range", (r[key], r[key]))
    return f"{r[key]:.{digits}f} [{low:.{digits}f}–{high:.{digits}f}]"


def interleaved_overhead_section(o: dict[str, Any]) -> list[str]:
    """bench/orchestration_bench.py's overhead part run interleaved (issue 40 item 2):
    each figure a median over repetitions with its range, the ratios at equal counts,
    and issue 40's goals held against them."""
    ov = o["overhead"]
    where = machine_line(o.get("machine_detail") or o.get("machine"))
    rows, exits = [], []
    for label, by_count in ov["runs"].items():
        for n, r in by_count.items():
            if "results_to_exit_s" in r:
                exits.append(f"{label} at {int(n):,}: {_med(r, 'results_to_exit_s', 2)} s")
            if "reps" not in r:  # the Optuna loop: timed once, alone
                rows.append([label, f"{int(n):,}", "1", "–", f"{r['steady_ms_per_trial']:.2f}",
                             "–", f"{r['total_s']:.1f}", f"{r['total_ms_per_trial']:.2f}", "–"])
                continue
            rows.append([label, f"{int(n):,}", str(r["reps"]), _med(r, "startup_s", 1),
                         _med(r, "steady_ms_per_trial", 2), _med(r, "wind_down_s", 1),
                         _med(r, "total_s", 1), f"{r['total_ms_per_trial']:.2f}",
                         _med(r, "load_average", 1)])
    cap = ov["tune_new_actor_cap"]
    ratios = ov.get("ratios", {})
    goals = []
    for n in ov["counts"]:
        for key, label, bound in OVERHEAD_GOALS:
            value = ratios.get(f"{key}@{n}")
            if value is not None:
                goals.append(f"- {n:,} trials: {label} {value:.2f}x (goal at most {bound:g}x:"
                             f" {'met' if value <= bound else 'not met'})")
        for key, label in (("nestor-fn", "function"), ("nestor", "command")):
            equal = ratios.get(f"{key}/tune-default per trial@{n}")
            steady = ratios.get(f"{key}@{n}/tune-default steady@{cap} per trial")
            value, how = ((equal, f"Tune's default at {n:,} too") if equal is not None else
                          (steady, f"against Tune's default's steady state per trial at"
                                   f" {cap:,}"))
            if value is None:
                continue
            goal = (f" (goal at most 1/{1 / PER_TRIAL_GOAL:.0f}:"
                    f" {'met' if value <= PER_TRIAL_GOAL else 'not met'})"
                    if n in PER_TRIAL_GOAL_COUNTS else "")
            goals.append(f"- {n:,} trials: nestor's {label} trials per trial 1/{1 / value:.0f}"
                         f" of Tune's default, end to end ({how}){goal}")
    return ["## Orchestration overhead", "", where, "",
            f"Trivial trials, {ov['concurrent']} at a time on 2 slots, at"
            f" {', '.join(f'{n:,}' for n in ov['counts'])} trials. nestor's command trials:"
            f" `{ov['nestor_command']}` (a process per trial on warm 1-rank gangs); its"
            f" function trials: `{ov['nestor_function']}`, a Python function returning x²;"
            " both with the journal's fsync, and every event in MLflow when the command exits"
            " (checked). Tune runs the same function as a function trainable on its own Ray,"
            " with `reuse_actors=True` (the nearer match to nestor's warm gangs) and by"
            f" default (a new actor per trial, at most {cap:,} trials: at 2,000 it would take"
            " over half an hour a run). The method, as the results file records it:"
            f" \"{ov['method']}\". Each cell is the median over the repetitions, [min–max]."
            " *Start-up*: the command's start to the first trial's end (imports, Ray, the"
            " first gang or actor). *Steady*: between the first and the last trial's end, per"
            " trial after the first. *Wind-down*: the last trial's end to the command's exit"
            " (nestor: the results, MLflow catching up, Ray's shutdown). *Load*: the 1-minute"
            " load average at each run's end (2 cores). The Optuna row is an ask/tell loop in"
            " one process, no scheduling, timed once.", "",
            *_table(["system", "trials", "reps", "start-up s", "steady ms/trial",
                     "wind-down s", "total s", "total ms/trial", "load"], rows),
            *(["nestor's results printed to the command's exit (MLflow and Ray's shutdown):"
               " " + "; ".join(exits) + ".", ""] if exits else []),
            "Against Tune, medians at one trial count on both sides, and issue 40's goals:",
            "", *goals, ""]


def overhead_section(o: dict[str, Any]) -> list[str]:
    ov = o["overhead"]
    if ov.get("reps"):
        return interleaved_overhead_section(o)
    where = machine_line(o.get("machine_detail") or o.get("machine"))
    if "runs" not in ov:  # written before start-up and steady state were told apart
        return ["## Orchestration overhead", "", where, "",
                "Not comparable: this result timed nestor with Ray's start-up and Tune"
                " without; rerun `bench/orchestration_bench.py --parts overhead`.", ""]
    rows = []
    loaded = any("load_average" in r for by_count in ov["runs"].values()
                 for r in by_count.values())  # older results kept no load per run
    for label, by_count in ov["runs"].items():
        for n, r in by_count.items():
            rows.append([label, f"{int(n):,}", f"{r['startup_s']:.1f}",
                         f"{r['steady_ms_per_trial']:.2f}", f"{r['wind_down_s']:.1f}",
                         f"{r['total_ms_per_trial']:.2f}"]
                        + ([f"{r['load_average']:.1f}" if "load_average" in r else "–"]
                           if loaded else []))
    counts = ", ".join(f"{n:,}" for n in ov["counts"])
    capped = [n for n in ov["counts"] if n > ov["tune_new_actor_cap"]]
    default = next((by for label, by in ov["runs"].items()
                    if label.startswith("ray tune, default")), {})
    each = (f", {default[max(default, key=int)]['steady_ms_per_trial'] / 1000:.1f} s each in"
            " its steady state here" if default else "")
    cap = (f" Tune's default (a new actor per trial{each}) ran at most"
           f" {ov['tune_new_actor_cap']:,} trials: {', '.join(f'{n:,}' for n in capped)}"
           " would take hours." if capped else "")
    nestor = (f"nestor's are command trials, a process each (`{ov['nestor_command']}`)"
              if ov.get("nestor_command") else "nestor's trials are not recorded")
    method = (f" The results file records its method: \"{ov['method']}\"." if ov.get("method")
              else " The results file does not record its method.")
    return ["## Orchestration overhead", "", where, "",
            f"Trivial trials, {ov['concurrent']} at a time on 2 slots, at {counts} trials:"
            f" {nestor}; Tune's a function trainable returning x² and the time it ended. Each"
            " system and count runs in a fresh process, timed from its command's start to"
            " its exit (imports, Ray's start and shutdown and, for nestor, every event in"
            " MLflow included); each trial's end is the one the system recorded (nestor's"
            " journal, Tune's results). *Start-up*: the command's start to the first trial's"
            " end (imports, Ray, the framework, the first gang or actor). *Steady*: time"
            " between the first and the last trial's end, per trial after the first."
            " *Wind-down*: last trial's end to the command's exit, Ray's shutdown included."
            " *Total*: all of it per trial. The systems run one after the other, once each"
            " per count: load during one system's turn is not the other's (see the load"
            " column). Tune with `reuse_actors=True` is the nearer match to nestor's warm"
            f" gangs.{cap} The Optuna row is an ask/tell loop in one process, no scheduling,"
            f" timed alone.{method}",
            *([" *Load*: the 1-minute load average as the run ended (2 cores; other work"
               " shared the machine)."] if loaded else []),
            "", *_table(["system", "trials", "start-up s", "steady ms/trial", "wind-down s",
                         "total ms/trial"] + (["load"] if loaded else []), rows),
            *_against_tune(ov["runs"])]


def _tune_default_total(default: dict[str, Any], n: int) -> tuple[float, str]:
    """Tune's default's end-to-end seconds at ``n`` trials, and how they were had: its
    own run at ``n`` where it ran that many, else from the phases of its largest run
    (start-up + steady per trial x (n - 1) + wind-down: a new actor per trial makes its
    steady state a fixed cost per trial), said so beside the ratio."""
    if str(n) in default:
        return default[str(n)]["total_s"], ""
    ran = max(default, key=int)
    r = default[ran]
    total = r["startup_s"] + r["steady_ms_per_trial"] / 1000 * (n - 1) + r["wind_down_s"]
    return total, (f" (Tune's default ran {int(ran):,} trials; at {n:,} its start-up, steady"
                   f" state and wind-down there give {total:.0f} s)")


def _against_tune(runs: dict[str, dict[str, Any]]) -> list[str]:
    """nestor's end-to-end time against Tune's at each count this run has, both sides
    at the same number of trials: the ratios issue 25's goals are stated in (below Tune
    ``reuse_actors``; at most 1/100 of Tune's default per trial), read from the table
    above, not kept apart."""
    def row(prefix: str) -> dict[str, Any]:
        return next((by for label, by in runs.items() if label.startswith(prefix)), {})

    nestor, reuse, default = row("nestor"), row("ray tune, reuse"), row("ray tune, default")
    if not nestor or not default:
        return []
    lines = []
    for n, r in nestor.items():
        vs_reuse = (f"{r['total_s']:.1f} s against Tune `reuse_actors` "
                    f"{reuse[n]['total_s']:.1f} s" if n in reuse else "no Tune reuse row")
        tune_total, how = _tune_default_total(default, int(n))
        steady = default[max(default, key=int)]["steady_ms_per_trial"]
        lines.append(f"- {int(n):,} trials: {vs_reuse}; per trial 1/"
                     f"{tune_total / r['total_s']:.0f} of Tune's default end to end at"
                     f" {int(n):,} trials{how}; steady state 1/"
                     f"{steady / r['steady_ms_per_trial']:.0f} of Tune's default's")
    return ["", "nestor end to end against Tune, from the rows above, each ratio at one"
            " number of trials on both sides:", "", *lines, ""]


def projection_section(o: dict[str, Any]) -> list[str]:
    """The MLflow projection's rate by store size, into a server, and its lag, from the
    same orchestration_bench run as the overhead table."""
    if "projection" not in o and "lag" not in o:
        return []
    lines = ["### MLflow projection", "", machine_line(o.get("machine_detail") or o.get("machine")),
             ""]
    if "command" in o:
        lines += [f"Command: `{o['command']}`; commit {str(o.get('commit', '?'))[:10]}.", ""]
    p = o.get("projection")
    if p:
        per_cpu = p.get("events_per_cpu_s", {})
        window = p["window_runs"]  # one for every size in results before 2026-11-26
        per_size = isinstance(window, dict)
        rows = [[f"{int(size):,}", _f(rate), _f(per_cpu.get(size))]
                + ([f"{window[size]:,}"] if per_size else [])
                for size, rate in p["rates"].items()]
        covers = ("the window of runs given" if per_size else f"the last {window:,} runs")
        lines += [f"A journal of trivial trials ({p['events_per_run']} events each) projected"
                  " from nothing into the run directory's own SQLite store; the rate over the"
                  f" whole batches that cover {covers} before each"
                  " size, in wall-clock events/s and per CPU-second of the process (less"
                  f" dependent on other work; load {p['load_average_at_end']:.1f} at its end).",
                  "", *_table(["runs in the store", "events/s", "events per CPU-s"]
                              + (["window (runs)"] if per_size else []), rows)]
    srv = o.get("projection_server")
    if srv:
        lines += [f"Into a real local `mlflow server` (SQLite behind it, started by the bench),"
                  f" {srv['runs']:,} runs through MLflow's REST API (each run's create,"
                  " log_batch and end in order; a batch's runs 8 at once from commit"
                  " 300249d on, one at a time before):"
                  f" {srv['events_per_s']:.1f} events/s (load {srv['load_average_at_end']:.1f}).",
                  ""]
    lag = o.get("lag")
    if lag:
        q = lag["lag_s"]
        lines += [f"Lag from journal append to MLflow showing the event, the simulated mixed"
                  f" workload replayed at {lag['speedup']:g}x for {lag['window_s']:g} s"
                  f" ({lag['events']:,} events, {lag['events_per_s']}/s): p50 {q['p50']} s,"
                  f" p90 {q['p90']} s, p99 {q['p99']} s, max {q['max']} s"
                  f" (load {lag['load_average_at_end']:.1f}).", ""]
    return lines


def _share(value: float) -> str:
    return f"{max(value, 0.0):.1%}"  # float sums can leave -0.0 where nothing was idle


def scale_section(sim: dict[str, Any], name: str) -> list[str]:
    """bench/simulate.py --nodes 4096: one row per workload, mode and schedule."""
    quick = ", quick (a quarter of the generations and hours)" if sim.get("quick") else ""
    lines = [f"## {sim['slots']:,} simulated slots ({sim['nodes']:,} nodes x"
             f" {sim['slots_per_node']}), fsync {'on' if sim.get('fsync') else 'off'}{quick}",
             "", f"`{name}`; " + machine_line(sim["machine"]), "",
             f"Node failures at MTBF {sim['node_mtbf_h']:g} h per node, {sim['repair_h']:g} h"
             f" to repair; rank failures in {sim['rank_failure']:.1%} of attempts; allocation"
             f" mode {sim['allocation_h']:g} h. Driver CPU per event is the driver's CPU less"
             " the simulator's own; wall and memory are the driver's, on a shared machine.", ""]
    rows = []
    for wname, w in sim["workloads"].items():
        for r in w["runs"]:
            rows.append([wname, r["mode"], r["schedule"], f"{r['completed']:,}",
                         f"{r['virtual_h']:.1f}", _share(r["utilization"]),
                         _share(r["idle_share_after_last_launch"]),
                         _share(r["startup_share"]), str(r["lost"]),
                         str(r["node_failures"]), f"{r['scheduler_cpu_ms_per_event']:.3f}",
                         f"{r['events_per_s']:,.0f}", f"{r['peak_memory_mib'] or 0:,.0f}",
                         f"{r['driver_wall_s']:,.0f}"])
    return lines + _table(["workload", "mode", "schedule", "trials", "virtual h", "busy",
                           "final drain", "gang start-up", "lost", "node failures",
                           "driver ms CPU/event", "events/s", "peak MiB", "wall s"], rows) + [
        "Busy and the final drain (idle after the last launch) are shares of the available"
        " slot-seconds over the whole makespan: a sweep's busy share includes its drain, an"
        " allocation's, cut by its time limit while trials still run, next to none."
        + _whole_run(sim), ""]


def _whole_run(sim: dict[str, Any]) -> str:
    """The whole command's wall time (every workload, mode and schedule, analysis
    included), from the machine record's start and finish; '' where not recorded."""
    m = sim.get("machine") or {}
    try:
        start, end = (datetime.datetime.strptime(m[k], "%Y-%m-%d %H:%M:%S")
                      for k in ("started", "finished"))
    except (KeyError, TypeError, ValueError):
        return ""
    driver = sum(r["driver_wall_s"] for w in sim["workloads"].values() for r in w["runs"])
    return (f" The whole command took {(end - start).total_seconds():,.0f} s of wall time,"
            f" {driver:,.0f} s of it in the drivers' runs.")


def simulate_section(sim: dict[str, Any], out: Path) -> list[str]:
    """The real scheduler on 2,048 simulated slots (bench/simulate.py)."""
    lines = ["## 2,048 simulated slots, the real scheduler", "", machine_line(sim["machine"]), "",
             f"nestor's StageScheduler and TrialRunners on a SimulatedBackend of"
             f" {sim['nodes']} nodes x {sim['slots_per_node']} slots (virtual clock; a"
             " model-parallel group never straddles two nodes). New gangs take"
             f" {sim['startup_s'][0]:.0f}-{sim['startup_s'][1]:.0f} s to start (held, not busy);"
             " warm gangs of the same shape are reused. Nodes fail at random (MTBF"
             f" {sim['node_mtbf_h']:,.0f} h per node), each out for {sim['repair_h']:g} h; a rank"
             f" fails in {sim['rank_failure']:.1%} of attempts; {sim['retries']} retries."
             f" Mode *sweep* runs the planned sweep to its last trial (its final drain"
             f" included); mode *allocation* fills a {sim['allocation_h']:g} h allocation with a"
             " larger sweep until the time limit stops the driver (as Slurm's SIGTERM does;"
             " the trials it cuts are journalled and resumable). Journal fsync"
             f" {'on' if sim['fsync'] else 'off'}."
             + (" Quick run (`--quick`): a quarter of the generations and hours." if sim["quick"]
                else ""), ""]
    header = ["mode", "schedule", "trials", "virtual h", "busy", "start-up",
              "idle before last launch", "final drain", "full at (min)", "driver ms to fill",
              "node failures",
              "lost", "CPU ms/event", "driver s"]
    for name, w in sim["workloads"].items():
        lines += [f"**{name}**: {w['note']}; lognormal durations, median {w['median_min']:g} min,"
                  f" sigma {w['sigma']:g}; sweep: {w['generations']} generations"
                  f" ({'; '.join(w['stages'])}).", ""]
        rows = []
        for r in w["runs"]:
            fill = r["time_to_fill_min"]
            rows.append([r["mode"], r["schedule"], f"{r['completed']:,}", f"{r['virtual_h']:.1f}",
                         _share(r["utilization"]), _share(r["startup_share"]),
                         _share(r["idle_share_before_last_launch"]),
                         _share(r["idle_share_after_last_launch"]),
                         f"{_f(fill['held'])} / {_f(fill['busy'])}",
                         _f(r["driver_s_to_fill"] and 1000 * r["driver_s_to_fill"], "{:.0f}"),
                         str(r["node_failures"]),
                         str(r["lost"]), f"{r['scheduler_cpu_ms_per_event']:.2f}",
                         f"{r['driver_wall_s']:.1f}"])
        lines += _table(header, rows)
    lines += ["Busy: slot-seconds in which a trial's ranks ran (failed attempts included) over"
              " the slot-seconds available (nodes out for repair excluded). Idle before the last"
              " launch is what generation barriers (or fragmentation) cost; the final drain is"
              " the heavy tail's last stragglers. Full at: minutes until 97 % of the slots were"
              " held / busy (virtual), and the real milliseconds the driver took to issue those"
              " launches. CPU ms/event: the driver's process time less the simulator's, per"
              " backend event (a trial has two). Lost: trials that failed for good, or (sweep)"
              " were planned and never completed.", ""]
    plt = _plt()
    fig, axes = plt.subplots(1, len(sim["workloads"]), figsize=(6 * len(sim["workloads"]), 3))
    axes = axes if hasattr(axes, "__len__") else [axes]
    for ax, (name, w) in zip(axes, sim["workloads"].items(), strict=True):
        for r in w["runs"]:
            if r["mode"] == "sweep":
                ax.plot(r["occupancy"]["t_h"], r["occupancy"]["busy"], label=r["schedule"])
        ax.axhline(sim["slots"], color="k", linestyle=":", label="slots")
        ax.set_title(f"{name} sweep")
        ax.set_xlabel("virtual hours")
        ax.set_ylabel("busy slots")
        ax.legend()
    fig.tight_layout()
    figure = f"{FIGURES}/simulate.png"
    fig.savefig(out / figure, dpi=90)
    plt.close(fig)
    return [*lines, f"![busy slots over virtual time]({figure})", ""]


def headline(t: dict[str, Any] | None, sim: dict[str, Any] | None,
             o: dict[str, Any] | None, e2e_runs: list[dict[str, Any]] | None = None,
             splan: dict[str, Any] | None = None,
             f: dict[str, Any] | None = None, **more: dict[str, Any] | None) -> list[str]:
    """Each figure with the command, commit and machine of the one results file it
    comes from; a figure whose file does not record them is left out, and said so."""
    out = ["## Headline figures", "",
           "Each line compares figures from one results file (one run, one machine) and"
           " ends with the command that wrote it, the commit it ran on and the machine.", ""]
    missing: list[str] = []
    found = _headline_lines(t, sim, o, e2e_runs, splan, f, **more)
    out += _runs_line([result for result, _ in found])
    for result, lines in found:
        m = result.get("machine_detail") or result.get("machine")
        if not has_provenance(m):
            missing += [line.split(":")[0].lstrip("- ") for line in lines]
            continue
        out += [f"{line}. *From* {source(m)}" for line in lines]
        label = stale_label(m)
        if label is not None:
            out.append(label)
        if heldout_ledger.judgement_of(result.get(RESULTS_FILE, "")) is not None:
            out.append(f"  - {heldout_ledger.label(result[RESULTS_FILE])}")
    if len(out) == 4 and not missing:
        out.append("None: no results file is committed (`make bench-quick` writes them).")
    if missing:
        out += ["", "Not in the headline (their results files record no command or commit;"
                " rerun them): " + "; ".join(missing) + "."]
    return [*out, ""]


def _provenance(result: dict[str, Any]) -> Any:
    return result.get("machine_detail") or result.get("machine")


def run_key(result: dict[str, Any]) -> tuple[str | None, str | None, Any, str | None]:
    """(run id, commit, dirty, host) of a result: results with one key came from one
    run of bench/steps.py on one machine at one commit."""
    m = _provenance(result)
    m = m if isinstance(m, dict) else {}
    return m.get("run"), m.get("commit"), m.get("dirty"), m.get("host")


def run_problems(results: list[dict[str, Any]]) -> list[str]:
    """Why the headline's figures are not from one run: a result with no run id (run by
    hand, not by bench/steps.py), from uncommitted code, or a second run, commit or host."""
    problems, keys = [], {}
    for result in results:
        m = _provenance(result)
        key = run_key(result)
        what = f"`{m['command']}`" if has_provenance(m) else "a result with no command"
        if key[0] is None:
            problems.append(f"{what}: no run id (not run by bench/steps.py)")
        elif key[2] is not False:
            problems.append(f"{what}: run on uncommitted code (dirty: {key[2]})")
        keys.setdefault(key, what)
    if len(keys) > 1:
        problems.append("the headline mixes " + "; ".join(
            f"run {run} at {str(c)[:10]} on {host} ({what})"
            for (run, c, _, host), what in keys.items()))
    return problems


def _runs_line(results: list[dict[str, Any]]) -> list[str]:
    if not results:
        return []
    keys = {run_key(result) for result in results}
    if len(keys) == 1 and not run_problems(results):
        run, commit, _, host = next(iter(keys))
        m = _provenance(results[0])
        make = {"quick": "make bench-quick", "full": "make bench"}.get(m.get("size"), "")
        return [f"All from one run, `{run}` ({m.get('size', '?')} sizes"
                + (f", `{make}`" if make else "") + f"), at commit `{commit[:10]}` on {host}.",
                ""]
    return [f"**Not one run**: {len({k[:2] for k in keys})} runs or commits; figures are"
            " compared only within their own line (`python -m bench.report --check"
            " --same-run` says which).", ""]


def _headline_lines(t: dict[str, Any] | None, sim: dict[str, Any] | None,
                    o: dict[str, Any] | None, e2e_runs: list[dict[str, Any]] | None,
                    splan: dict[str, Any] | None, f: dict[str, Any] | None,
                    **more: dict[str, Any] | None) -> list[tuple[dict[str, Any], list[str]]]:
    found: list[tuple[dict[str, Any], list[str]]] = []
    lines: list[str] = []
    if t and "single" in t:
        for label, r in t["single"]["rows"].items():
            if label != "dp=1":
                lines.append(f"- single model, {label}: {_f(r['speedup'], '{:.2f}x')} to"
                             f" {t['single']['target_val_accuracy']} val accuracy"
                             f" (efficiency {_f(r['efficiency'], '{:.0%}')}"
                             + ("; above 100 %: the dp=1 run was slowed by other load, so"
                                " this is noise, not a result)" if (r["efficiency"] or 0) > 1.05
                                else ")"))
    if t and "hpo" in t:
        cells = ", ".join(_hpo_headline(a, r) for a, r in _ranked(t["hpo"]))
        lines.append(f"- HPO to val accuracy {t['calibration']['threshold']}, ranked on the"
                     f" median over all seeds (≥: seeds that never reached it counted at"
                     f" their whole budget): {cells}")
    if t and "combined" in t:
        rows = list(t["combined"].values())
        last = rows[-1]
        lines.append(f"- combined, HPO+DP+MP vs random search: measured"
                     f" {_f(last['measured_speedup'], '{:.2f}x')}, product estimate"
                     f" {_f(last['estimated_speedup'], '{:.2f}x')}")
    lines_sim: list[str] = []
    if sim:
        for name, w in sim["workloads"].items():
            cells = ", ".join(f"{r['schedule']} {_share(r['utilization'])}" for r in w["runs"]
                              if r["mode"] == "sweep")
            lost = sum(r["lost"] for r in w["runs"])
            cpu = max(r["scheduler_cpu_ms_per_event"] for r in w["runs"])
            quick = " (quick: a quarter of the generations and hours)" if sim.get("quick") else ""
            lines_sim.append(f"- {sim['slots']:,} simulated slots{quick}, {name} sweep: busy"
                             f" {cells}; {lost} trials lost; scheduler CPU at most {cpu:.2f} ms"
                             " per event")
    lines_o: list[str] = []
    if o and o["overhead"].get("reps"):
        lines_o.append(interleaved_headline(o["overhead"]))
    elif o and "runs" in o["overhead"]:
        cells = []
        for label, by_count in o["overhead"]["runs"].items():
            n = max(by_count, key=int)
            r = by_count[n]
            cells.append(f"{label} {r['steady_ms_per_trial']:.1f} ms/trial over {int(n):,}"
                         f" (start-up {r['startup_s']:.1f} s)")
        lines_o.append("- per-trial overhead, steady state, trivial trials 2 at a time: "
                     + "; ".join(cells))
    e2e_lines: list[tuple[dict[str, Any], list[str]]] = []
    for e2e in e2e_runs or []:
        x = e2e_verdict(e2e, "time_s")
        if not x:
            continue
        sm = x["summary"]
        e2e_lines.append((e2e, [
            f"- `parallel: auto` end to end ({seeds_text(e2e['seeds'])}, {e2e['slots']} slots,"
            f" s to val accuracy {e2e['threshold']:g}, median [min–max], ≥: a seed that never"
            f" reached it, at its whole stage): auto {x['auto'].cell()}, best hand-picked"
            f" `{x['best']}` {sm[x['best']].cell()} (auto / best {x['auto_over_best']}), worst"
            f" `{x['worst']}` {sm[x['worst']].cell()} (worst / auto {x['worst_over_auto']})"]))
    lines_splan: list[str] = []
    if splan:
        cells = []
        for table in splan["tables"]:
            rows = {r["label"]: r for r in table["rows"] if r.get("shape")}
            cells.append(f"generations of {table['population']}: " + ", ".join(
                f"{label} {rows[label]['speedup']:.0f}x" for label in
                ("HPO", "HPO+DP", "HPO+DP+MP") if label in rows))
        lines_splan.append(f"- SIMULATED combined table, {splan['nodes']} nodes, cost model of this"
                     " machine (seed's estimate: HPO 11x, HPO+DP 38x, HPO+DP+MP 56x): "
                     + "; ".join(cells))
    if t:
        found.append((t, lines))
    if sim:
        found.append((sim, lines_sim))
    if o and lines_o:
        found.append((o, lines_o))
    found += e2e_lines
    if splan:
        found.append((splan, lines_splan))
    if f:
        found.append((f, [fidelity_headline(f)]))
    for name, render_line in _file_headlines():
        result = more.get(name)
        if result:
            found.append((result, render_line(result)))
    return [(result, lines) for result, lines in found if lines]


def interleaved_headline(ov: dict[str, Any]) -> str:
    """The overhead part's totals at its largest count, and its ratios there."""
    n = str(max(ov["counts"]))
    short = {"nestor": "nestor command trials", "nestor-fn": "nestor function trials",
             "tune-reuse": "Tune reuse_actors"}
    from bench.orchestration_bench import SYSTEMS

    cells = [f"{name} {ov['runs'][SYSTEMS[key]][n]['total_s']:.1f} s" for key, name in
             short.items() if n in ov["runs"].get(SYSTEMS[key], {})]
    ratios = ov.get("ratios", {})
    said = [f"{ratios[f'{key}/tune-reuse@{n}']:.2f}x ({name})" for key, name in
            (("nestor-fn", "function"), ("nestor", "command")) if f"{key}/tune-reuse@{n}" in ratios]
    cap = ov["tune_new_actor_cap"]
    per = ratios.get(f"nestor@{n}/tune-default steady@{cap} per trial",
                     ratios.get(f"nestor/tune-default per trial@{n}"))
    return (f"- end to end, {int(n):,} trivial trials 2 at a time, the systems interleaved,"
            f" median of {ov['reps']}: " + ", ".join(cells)
            + (f"; nestor / Tune reuse_actors {', '.join(said)}" if said else "")
            + (f"; nestor's command trials per trial 1/{1 / per:.0f} of Tune's default"
               if per else ""))


def multifidelity_headline(m: dict[str, Any]) -> list[str]:
    if any("per_seed" not in r for r in m["rows"]):
        return []
    cells = "; ".join(f"{r['search']} {_cell(r['epochs'])}" for r in m["rows"])
    return [f"- multi-fidelity searches on simulated training ({m['seeds']} seeds), epochs"
            f" until a full-length model reaches loss {m['quality']:g}, median [min–max]"
            f" (≥: a seed that never got there, at all it spent): {cells}"]


def backends_headline(b: dict[str, Any]) -> list[str]:
    cells = ", ".join(f"{case} {r['torch_over_horovod']:.2f}x"
                      for case, r in b["cases"].items())
    same = max(r["max_train_loss_diff"] for r in b["cases"].values())
    return [f"- torch.distributed over Horovod, samples/s on the same trials: {cells};"
            f" largest train-loss difference {same:.2g}"]


def gang_headline(g: dict[str, Any]) -> list[str]:
    return [f"- {g['gangs']} gangs started on real Ray: one at a time"
            f" {g['one_at_a_time_s']:.1f} s, through RayBackend {g['concurrently_s']:.1f} s;"
            f" longest hold of the scheduling loop per launch"
            f" {1000 * g['longest_loop_hold_s']:.1f} ms"]


def fidelity_headline(f: dict[str, Any]) -> str:
    """``mnist5k, 50 slot-s each: slot-s to val 0.92 pbt 20, ...; test of the best ...``."""
    from bench.stats import rank_key

    p = f["profile"]
    ranked = sorted(f["searches"].items(), key=lambda kv: rank_key(_summary(kv[1]["slot_s"])))
    cells = "; ".join(f"{name} {_summary(r['slot_s']).cell()} (test {_spread(r['test'])})"
                      for name, r in ranked)
    return (f"- mnist5k searches, {p['budget_slot_s']:g} slot-s each ({p['name']},"
            f" {seeds_text(p['seeds'])}), median [min–max] slot-s to val accuracy"
            f" {p['threshold']}, ranked: {cells}")


def render(results: Path, out_md: Path) -> Path:
    """Write REPORT.md (and its figures beside it) from the results files alone."""
    out_md.parent.mkdir(parents=True, exist_ok=True)
    out_md.write_text(render_text(results, out_md.parent))
    return out_md


# Every results file the report reads (its stem), by the name its sections use.
RESULT_NAMES = {"t": "tables", "g": "gpu-tables", "sim": "simulate", "splan": "simulate-planning",
                "fidelity": "search-fidelity", "sine": "auto-sine", "backends": "backends",
                "gangs": "gang-start", "multi": "multifidelity", "heldout": "auto-heldout",
                "many": "many_at_once", "mf_heldout": "multifidelity_heldout",
                "planning": "planning", "quick": "bench-quick", "full": "bench-full",
                "mf_dev": "multifidelity_dev", "mf_auto": "multifidelity_auto"}


def _file_headlines() -> tuple[tuple[str, Callable[[dict[str, Any]], list[str]]], ...]:
    """The headline renderer of each results file that renders its own line, by the
    name in RESULT_NAMES, in the headline's order."""
    return (("sine", sine_headline), ("heldout", heldout_headline),
            ("multi", multifidelity_headline), ("backends", backends_headline),
            ("gangs", gang_headline), ("many", many_at_once_headline),
            ("mf_heldout", mf_heldout_headline))


def load(results: Path) -> dict[str, Any]:
    """Every results file the report reads, by the name its sections use."""
    found = {key: _load(results, name) for key, name in RESULT_NAMES.items()}
    found["o_runs"] = _overhead_runs(results)  # the headline's first, then further runs
    found["o"] = found["o_runs"][0] if found["o_runs"] else None
    found["p_runs"] = _projection_runs(results)
    found["e2e_runs"] = [json.loads(f.read_text())
                         for f in sorted(results.glob("e2e-planning*.json"))]
    return found


def _headline_of(r: dict[str, Any]) -> list[tuple[dict[str, Any], list[str]]]:
    return _headline_lines(r["t"], r["sim"], r["o"], r["e2e_runs"], r["splan"], r["fidelity"],
                           sine=r["sine"], multi=r["multi"], backends=r["backends"],
                           gangs=r["gangs"], heldout=r["heldout"], many=r["many"],
                           mf_heldout=r["mf_heldout"])


def same_run(results: Path) -> list[str]:
    """Why the headline's figures are not all from one run at one commit ([] when they
    are): what ``--check --same-run`` fails on after ``make bench-quick``."""
    found = [result for result, _ in _headline_of(load(results))]
    return run_problems(found) if found else ["no headline figure: no results"]


def render_text(results: Path, out: Path) -> str:
    """The report's text; figures go to ``out/figures``. Nothing but the results
    files goes in: no section is written by hand."""
    (out / FIGURES).mkdir(parents=True, exist_ok=True)
    r = load(results)
    t, g, sim, o, e2e_runs = r["t"], r["g"], r["sim"], r["o"], r["e2e_runs"]
    splan, fidelity, sine, backends = r["splan"], r["fidelity"], r["sine"], r["backends"]
    gangs, multi, heldout = r["gangs"], r["multi"], r["heldout"]
    many, mf_heldout, planning = r["many"], r["mf_heldout"], r["planning"]
    lines = ["# nestor benchmarks", "",
             "Generated by `python -m bench.report` from the committed `bench/results/*.json`"
             " alone (`python -m bench.report --check` fails when this file differs from what"
             " they render; the tests run it). Every figure is compared only with figures from"
             " the same results file: one run, on one machine, whose command, commit and load"
             " are stated beside each section. A section whose results file is absent says"
             " \"Not run\". On a shared machine the load average says how much to trust a"
             " figure.", ""]
    lines += headline(t, sim, o, e2e_runs, splan, fidelity, sine=sine, multi=multi,
                      backends=backends, gangs=gangs, heldout=heldout, many=many,
                      mf_heldout=mf_heldout)
    for size in ("quick", "full"):
        if r[size]:
            lines += steps_section(r[size])
    lines += ["## The seed's three tables (CPU)", ""]
    lines += tables_sections(t, out, "cpu") if t else ["Not run (no bench/results/tables.json).",
                                                       ""]
    lines += ["## The seed's three tables (GPU)", ""]
    if g:
        lines += tables_sections(g, out, "gpu")
    else:
        lines += ["Not measured here: the machine that ran these benchmarks has no GPU"
                  " (nvidia-smi found none), so the headline has no GPU figure. On a machine"
                  " with one, `make bench-gpu-tables` runs the same tables with Horovod built with"
                  " NCCL and writes `bench/results/gpu-tables.json`, kept apart from the CPU"
                  " results.", ""]
    lines += gpu_check_section(_load(results, "gpu-check"))
    lines += overhead_section(o) if o else ["## Orchestration overhead", "", "Not run.", ""]
    lines += projection_section(o) if o else []
    for further in r["o_runs"][1:]:  # e.g. on later code, apart from the headline
        m = further.get("machine") or {}
        lines += [f"### A further run of orchestration_bench (commit {str(m.get('commit'))[:10]},"
                  " not the headline's run)", ""]
        lines += overhead_section(further)[2:] + projection_section(further)
    for further in r["p_runs"]:  # the projection's parts run alone
        m = further.get("machine") or {}
        lines += [f"### A further run of orchestration_bench's MLflow projection parts"
                  f" (commit {str(m.get('commit'))[:10]})", ""]
        lines += projection_section(further)[2:]
    lines += simulate_section(sim, out) if sim else [
        "## 2,048 simulated slots, the real scheduler", "", "Not run.", ""]
    million = _load(results, "million-events")
    lines += million_events_section(million) if million else [MILLION_TITLE, "", "Not run.", ""]
    for path in sorted(results.glob("simulate-4096*.json")):
        lines += scale_section(json.loads(path.read_text()), path.name)
    journal = _load(results, "journal")
    lines += journal_section(journal) if journal else [JOURNAL_TITLE, "", "Not run.", ""]
    lines += gang_start_section(gangs) if gangs else [
        "## Starting gangs on real Ray", "", "Not run.", ""]
    for run in e2e_runs:
        lines += e2e_planning_section(run)
    if not e2e_runs:
        lines += ["## `parallel: auto` against hand-picked shapes, end to end", "", "Not run.",
                  ""]
    lines += planning_section(planning) if planning else [PLANNING_TITLE, "", "Not run.", ""]
    lines += simulate_planning_section(splan) if splan else [
        "## The seed's combined table at 128 nodes — a SIMULATION", "", "Not run.", ""]
    lines += fidelity_section(fidelity, out) if fidelity else [
        SEARCH_FIDELITY_TITLE, "", "Not run.", ""]
    own = _load(results, "own-code")
    lines += own_code_section(own) if own else [OWN_CODE_TITLE, "", "Not run.", ""]
    lines += auto_sine_section(sine) if sine else [AUTO_SINE_TITLE, "", "Not run.", ""]
    lines += heldout_section(heldout) if heldout else [HELDOUT_TITLE, "", "Not run.", ""]
    conditional = _load(results, "conditional")
    lines += conditional_section(conditional) if conditional else [
        CONDITIONAL_TITLE, "", "Not run.", ""]
    lines += many_at_once_section(many) if many else [MANY_TITLE, "", "Not run.", ""]
    engine = _load(results, ENGINE_NAME)
    lines += many_engine_section(engine) if engine else []
    for path, further in _further_many_runs(results):  # runs of a few widths more
        lines += [f"### {path.name}: {_further_many_title(further, many)}", ""]
        lines += many_at_once_section(further)[1:]
    lines += mf_heldout_section(mf_heldout) if mf_heldout else [
        MF_HELDOUT_TITLE, "", "Not run.", ""]
    for path in sorted(results.glob("multifidelity_heldout_*.json")):  # more seeds, apart
        lines += [f"### {path.name}: a further run", ""]
        lines += mf_heldout_section(_read(path))[1:]
    lines += (mf_heldout_section(r["mf_dev"], MF_DEV_TITLE, "bench/multifidelity_dev_bench.py")
              if r["mf_dev"] else [MF_DEV_TITLE, "", "Not run.", ""])
    lines += mf_auto_section(r["mf_auto"]) if r["mf_auto"] else [MF_AUTO_TITLE, "", "Not run.",
                                                                   ""]
    lines += backends_section(backends) if backends else [BACKENDS_TITLE, "", "Not run.", ""]
    lines += multifidelity_section(multi) if multi else [
        "## Multi-fidelity searches on simulated training", "", "Not run.", ""]
    lines += kernels_section(results)
    return "\n".join(lines)


GPU_CHECK_TITLE = "## The five-minute GPU check (`make bench-gpu`)"


def _step_status(step: dict[str, Any]) -> str:
    """A step's status; one that skipped itself (dp 2 on one GPU) says so, also in results
    written before the check named it."""
    return "skipped" if step.get("skipped") and step.get("status") == "ok" else str(
        step.get("status"))


def _timeline_cells(shape: dict[str, Any]) -> list[str]:
    """A packing run's trial seconds, trials at once, and the wall time outside the
    journal's span of trials (start-up before the first, shut-down after the last)."""
    line = shape.get("timeline")
    if not line:
        return ["", "", ""]
    trials = line["trial_s"]
    overlap = len(trials) == line["at_once_max"]
    span = line["to_first_trial_s"] + (max(trials) if overlap else sum(trials))
    return [" / ".join(f"{t:.1f}" for t in trials), str(line["at_once_max"]),
            _f(shape["wall_s"] - span - line["trials_end_to_exit_s"])]

def gpu_check_section(g: dict[str, Any] | None) -> list[str]:
    """bench/gpu_check.py on a GPU: the node, the trainers' throughput, packing, a sweep, a
    user's function and command trainers, and dp 2. Until a GPU has run it, the section says
    none has."""
    lines = [GPU_CHECK_TITLE, ""]
    if not g:
        return [*lines, "Not run: no GPU has run `make bench-gpu` yet (no"
                " `bench/results/gpu-check.json`), so nothing here is a GPU figure. Its CPU"
                " rehearsal (`python -m bench.gpu_check --cpu`), which runs every step but"
                " CUDA, runs in `tests/bench/test_gpu_check.py`.", ""]
    steps = g.get("steps", {})
    lines += [machine_line(g.get("machine")), "",
              f"Finished in {_f(g.get('elapsed_s'), '{:.0f}')} s of its {g.get('deadline_s')} s"
              f" deadline; steps: " + ", ".join(f"{name} {_step_status(step)}"
                                                 for name, step in steps.items()) + ".", ""]
    env = steps.get("environment", {})
    if env.get("status") == "ok":
        gpus = ", ".join(f"{x['name']} (sm {x['capability']}, {x['memory_gib']} GiB)"
                         for x in env.get("gpus", [])) or "none"
        lines += [f"torch {env.get('torch')}, CUDA build {env.get('cuda_build')}, cuDNN"
                  f" {env.get('cudnn')}, NCCL {env.get('nccl')}, driver {env.get('driver')};"
                  f" GPUs: {gpus}; Ray {env.get('ray')} sees"
                  f" `{json.dumps(env.get('cluster_resources'), sort_keys=True)}`.", ""]
    rows = steps.get("throughput", {}).get("rows", [])
    if rows:
        lines += ["Built-in trainers, samples/s after the first epoch"
                  f" ({json.dumps(steps['throughput'].get('settings'))}; fp32 with TF32 matmuls"
                  " on, as trainers/gpu.py sets; data on the device: the training split copied"
                  " to the GPU once, pinned: each batch copied from pinned host memory):", ""]
        lines += _table(["trainer", "precision", "data", "samples/s", "peak GPU MiB",
                         "device_gpu"],
                        [[r["trainer"], r["precision"], r["data"], _f(r.get("samples_per_s"),
                          "{:,.0f}"), _f(r.get("peak_gpu_mib"), "{:,.0f}"),
                          _f(r.get("device_gpu"), "{:.0f}")] for r in rows])
    pack = steps.get("packing", {})
    if pack.get("status") == "ok":
        lines += [f"4 one-rank cnn trials through `nestor run`"
                  f" ({json.dumps(pack.get('settings'))}); the trials' own seconds and how many"
                  " ran at once are read off the run's journal, and the rest of the wall time is"
                  " the command's start (imports, Ray) and its end (MLflow, Ray's stop):", ""]
        labels = ("packed", "one_at_a_time")
        lines += _table(["shape", "slots", "gpus_per_trial", "wall s", "GPU util mean %",
                         "max %", "trials' seconds", "at once", "start and end s"],
                        [[label.replace("_", " "), str(pack[label]["slots"]),
                          str(pack[label]["gpus_per_trial"]), _f(pack[label]["wall_s"]),
                          _f(pack[label]["gpu_util_mean"]), _f(pack[label]["gpu_util_max"]),
                          *_timeline_cells(pack[label])] for label in labels])
        lines += [f"Packed 4 to a GPU against one at a time: {pack['speedup']}x the speed (wall"
                  " time one at a time / packed).", ""]
    sweep = steps.get("sweep", {})
    if sweep.get("status") == "ok":
        lines += [f"`nestor {sweep['command'].split(' --run-dir')[0]}`: {sweep['trials']} trials"
                  f" in {sweep['wall_s']} s, device_gpu {sweep['device_gpu']},"
                  f" {sweep['mlflow_runs']} MLflow runs.", ""]
    own = steps.get("own_code", {})
    if own.get("status") == "ok":
        lines += [f"A user's own trainers, written as a user writes them (torch on `ctx.device`;"
                  f" a script that picks `cuda` when torch sees one), 2 trials each packed"
                  f" {own['gpus_per_trial']} of a GPU, one `nestor run` of two stages in"
                  f" {own['wall_s']} s, {own['mlflow_runs']} MLflow runs: " + "; ".join(
                      f"{name} trainer {row['completed']} of {row['trials']} completed,"
                      f" device_gpu {row['device_gpu']}, the user's tensors on the GPU"
                      f" {row['on_gpu']}" for name, row in own["stages"].items()) + ".", ""]
    dp = steps.get("dp2", {})
    if dp.get("skipped"):
        lines += [f"dp 2: not run ({dp['skipped']}).", ""]
    for backend, row in dp.get("backends", {}).items():
        lines += [f"dp 2 on {backend}: {row['dp1_samples_per_s']:,.0f} samples/s at dp 1,"
                  f" {row['dp2_samples_per_s']:,.0f} at dp 2: scaling efficiency"
                  f" {row['efficiency']:.0%}.", ""]
    for name, step in steps.items():
        if _step_status(step) not in ("ok", "skipped"):
            lines += [f"{name}: {step.get('status')}:"
                      f" {step.get('error') or step.get('timed_out') or step.get('skipped')}", ""]
    return lines


AUTO_SINE_TITLE = "## `algorithm: auto` against each fixed choice, sine-fit problems"


def auto_sine_section(a: dict[str, Any]) -> list[str]:
    """bench/auto_bench.py: regret on the sine-fit problems (median and quartiles)."""
    lines = [AUTO_SINE_TITLE, "", machine_line(a["machine"]), ""]
    if "problems" not in a:  # written before regret: improvement over the default
        return [*lines, "Not comparable: this result measured improvement over the default"
                " coefficients, which the centre of the box alone scores 221,567x on sin7;"
                " rerun `bench/auto_bench.py` for regret.", ""]
    lines += ["Each search fits the coefficients of the seed's sine-fit command (Cray Urika"
              " HPO's example) and variants. *Regret*: the best error a search found less the"
              " error of the least-squares optimum in the box (exact: the error is a quadratic"
              " of the coefficients), on a log scale; lower is better. The centre of the box"
              " (one evaluation; CMA-ES starts there) and random search stand beside the"
              f" searches. {a['budget']} trials, {a['parallel']} at once, median [lower"
              f" quartile, upper quartile] over {a['seeds']} seeds, every run counted."
              " `optuna-cmaes-1` is Optuna's own CmaEsSampler one trial at a time, a"
              " reference auto cannot choose.", ""]
    for key, p in a["problems"].items():
        lines += [f"**{key}**: least-squares optimum's error {p['optimum_error']:.4g}; auto"
                  f" picked {', '.join(p['auto_picked'])}.", ""]
        tiny = 1e-9 * max(1.0, p["optimum_error"])  # below this: the optimum, to rounding

        def shown(v: float, tiny: float = tiny) -> str:
            return "0 (optimum)" if v <= tiny else f"{v:.2e}"

        def log(v: float, tiny: float = tiny) -> str:
            return "−∞" if v <= tiny else f"{math.log10(v):.1f}"

        rows = [["centre of the box (one evaluation)", shown(p["centre_regret"]), "—",
                 log(p["centre_regret"]), ""]]
        for name, r in sorted(p["searches"].items(), key=lambda kv: kv[1]["median"]):
            rows.append([name, shown(r["median"]), f"[{shown(r['q1'])}, {shown(r['q3'])}]",
                         log(r["median"]), r["note"]])
        lines += _table(["search", "median regret", "quartiles", "log10 median", ""], rows)
    return lines


def sine_headline(a: dict[str, Any]) -> list[str]:
    """Regret on the seed's sine-fit (sin7): auto beside the centre, random search,
    the best choice without a surrogate and Optuna's CMA-ES."""
    if "problems" not in a or "sin7" not in a["problems"]:
        return []
    p = a["problems"]["sin7"]
    s = p["searches"]

    def cell(name: str) -> str:
        r = s[name]
        return f"{name} {r['median']:.2g} [{r['q1']:.2g}, {r['q3']:.2g}]"

    cells = [cell("auto") + f" (picks {', '.join(p['auto_picked'])})",
             f"centre of the box {p['centre_regret']:.2g} (one evaluation)"]
    cells += [cell(n) for n in ("random", "optuna-cmaes-1") if n in s]
    plain = [n for n in s if n not in ("auto", "lq-cmaes", "random", "optuna-cmaes-1")]
    if plain:
        cells.append("best without a surrogate " + cell(min(plain, key=lambda n: s[n]["median"])))
    return [f"- sine-fit sin7 regret (best error - the least-squares optimum's"
            f" {p['optimum_error']:.2g}; {a['budget']} trials, {a['parallel']} at once,"
            f" {a['seeds']} seeds, median [quartiles]): " + "; ".join(cells)]


HELDOUT_TITLE = "## `algorithm: auto` on a held-out problem set"


def heldout_section(h: dict[str, Any]) -> list[str]:
    """bench/auto_heldout_bench.py: auto against Optuna and nevergrad on problems its
    rules were not fitted to."""
    from bench.stats import Spread

    who = ["auto", *h["competitors"]]
    lines = [HELDOUT_TITLE, "", *_ledger_lines(h), machine_line(h["machine"]), "",
             "Problems fixed in `bench/auto_heldout_bench.py` before its results were seen,"
             " none of them among those `search/_auto.py`'s rules were fitted to (sine-fit,"
             " `bench/auto_suite_bench.py`'s nine). Regret: the noise-free value of the trial"
             " each search reports as best, less the known optimum; median [min–max] over"
             f" {h['seeds']} seeds, {h['budget']} trials each, results oldest first."
             " **Beaten** lists the competitors whose every seed beat auto's median (beyond"
             " the spread). Competitors: " + ", ".join(h["competitors"]) + ".", ""]
    rows, beaten_any = [], []
    for key, p in h["problems"].items():
        for width, x in p["by_parallel"].items():
            cells = [Spread(**x["cells"][w]).cell("{:.3g}") for w in who]
            beaten = x["auto_beaten_beyond_spread_by"]
            if beaten:
                beaten_any.append(f"{key} at {width} at once ({', '.join(beaten)})")
            rows.append([key, p["family"], str(p["dims"]), width, *cells,
                         ", ".join(x["auto_picked"]), ", ".join(beaten) or "—"])
    lines += _table(["problem", "family", "dims", "at once", *who, "auto picked", "beaten by"],
                    rows)
    lines += [("Auto was beaten beyond the spread on: " + "; ".join(beaten_any) + "."
               if beaten_any else "Auto was not beaten beyond the spread anywhere here."), ""]
    errors = sorted({f"{who}: {e}" for p in h["problems"].values()
                     for x in p["by_parallel"].values()
                     for who, found in x.get("errors", {}).items() for e in found})
    if errors:
        lines += ["Runs that crashed (counted as seeds without a figure, `n/seeds` in the"
                  " cells): " + "; ".join(errors) + ".", ""]
    return lines


CONDITIONAL_TITLE = "## Conditional spaces and constraints, against Optuna's define-by-run TPE"


def conditional_section(c: dict[str, Any]) -> list[str]:
    """bench/conditional_bench.py: regret on a conditional, constrained HPO-like problem."""
    from bench.stats import Spread

    lines = [CONDITIONAL_TITLE, "", machine_line(c["machine"]), "",
             "An HPO-like problem fixed in `bench/conditional_bench.py`: an optimiser choice"
             " (adam, sgd, rmsprop) whose own parameters exist only with it (sgd's"
             " `nesterov` too), a layer count whose width exists only from 3 layers up, and"
             f" the constraint `{c['constraint']}`; known optimum 0 (sgd), local optima"
             " 0.10 (adam) and 0.15 (rmsprop). Regret: the noise-free loss of the best trial"
             f" seen (noise {c['noise']:g}), median [min–max] over {c['seeds']} seeds,"
             f" {c['budget']} trials one at a time, systems interleaved seed by seed. Optuna's"
             " TPE runs define-by-run (defaults, and multivariate with group=True); its"
             " configurations that break the constraint are pruned unevaluated and not"
             " counted, as nestor's searches never ask them. Every nestor trial was checked"
             " to lie in the space (active parameters only, constraint met).", ""]
    rows = []
    ranked = sorted(c["systems"], key=lambda s: Spread(**c["cells"][s]).median or math.inf)
    for system in ranked:
        cell = Spread(**c["cells"][system])
        rows.append([system, cell.cell("{:.3f}"), f"{c['seconds'][system] / c['seeds']:.1f}"])
    lines += _table(["search", "regret", "s per run"], rows)
    tpe = [s for s in c["systems"] if s.startswith("optuna")]
    best_optuna = min((Spread(**c["cells"][s]).median or math.inf) for s in tpe) if tpe else None
    if best_optuna is not None:
        better = [s for s in c["systems"] if not s.startswith("optuna")
                  and (Spread(**c["cells"][s]).median or math.inf) < best_optuna]
        lines += [("Median regret below Optuna TPE's best median: " + ", ".join(better) + "."
                   if better else "No nestor search had a median regret below Optuna"
                   " TPE's best."), ""]
    return lines


def heldout_headline(h: dict[str, Any]) -> list[str]:
    cases = [(key, width, x["auto_beaten_beyond_spread_by"])
             for key, p in h["problems"].items() for width, x in p["by_parallel"].items()]
    beaten = [f"{key} at {width} ({', '.join(by)})" for key, width, by in cases if by]
    return [f"- `auto` on the held-out set ({len(h['problems'])} problems x"
            f" {len(cases) // max(len(h['problems']), 1)} widths, {h['seeds']} seeds,"
            f" {h['budget']} trials, against {', '.join(h['competitors'])}): beaten beyond the"
            f" spread in {len(beaten)} of {len(cases)} cases"
            + (": " + "; ".join(beaten) if beaten else "")]


MANY_TITLE = "## `auto` at 16 to 1,024 trials at once"


def _why_left_out(name: str, r: dict[str, Any]) -> str:
    """Why a search has no row at a width: it raised (``failed``), its package did not
    import, or the bench leaves it out past its ``max_width`` (ask time)."""
    if name in r.get("failed", {}):
        return f"{name} could not run (it raised `{r['failed'][name]}`)"
    if name in r.get("not_installed", []) or (name == "ngopt" and not r.get("nevergrad", True)):
        return f"{name} not run (its package does not import here)"
    limit = r.get("max_width", {}).get(name)
    if limit is not None:
        where = "at any width" if limit == 0 else f"past {limit} at once"
        return (f"{name} not run {where} (`MAX_WIDTH` in the bench, which says why: the"
                " machine time its ask and tell take)")
    if name == "optuna-tpe":
        return ("optuna-tpe not run: its ask time (it refits on every trial) rules it out"
                " past the bench's `--tpe-max-width`")
    return f"{name} not run"


def many_verdict(rows: list[dict[str, Any]]) -> str:
    """``auto`` against the other searches at one width on the mean rank, its
    quartiles deciding between *behind but tied* (they overlap) and *beaten*."""
    auto = next((r for r in rows if r["search"] == "auto"), None)
    if auto is None:
        return "auto has no row"
    others = [r for r in rows if r is not auto]
    ahead = [r for r in others if r["mean_rank"] < auto["mean_rank"]]
    level = [r["search"] for r in others if r["mean_rank"] == auto["mean_rank"]]
    low, high = auto["rank_quartiles"]
    parts = []
    for r in ahead:
        overlap = low <= r["rank_quartiles"][1] and r["rank_quartiles"][0] <= high
        parts.append(f"behind {r['search']} on the mean rank ({auto['mean_rank']:g} against"
                     f" {r['mean_rank']:g}), " + ("quartiles overlapping, so tied best"
                                                  if overlap else "beaten beyond the quartiles"))
    if level:
        parts.append(f"tied with {', '.join(level)} on the mean rank")
    if not parts:
        parts.append("best on the mean rank")
    alone = " (random search the only other search run)" if [
        r["search"] for r in others] == ["random"] else ""
    return "; ".join(parts) + alone


def many_at_once_section(r: dict[str, Any]) -> list[str]:
    """bench/many_at_once_bench.py: auto, Optuna's TPE with the constant liar and
    random search at 16 to 1,024 pending trials, on a virtual clock."""
    lines = [MANY_TITLE, "", *_ledger_lines(r), machine_line(r["machine"]), "",
             ("Problems fixed in `bench/many_at_once_bench.py` before any search ran on them: "
              if _held_out(r) else
              "Dev problems (`--problems " + r["problem_set"] + "`; auto's rules were fitted"
              " on them): ") + ", ".join(r["problems"])
             + f". Each search runs {r['rounds']} x width"
             " evaluations with width slots on a virtual clock (a trial takes 0.5 to 2 time"
             " units from its configuration; a slot the searcher leaves empty idles). Rank:"
             " of the best value found, among the searches run at that width, per problem and"
             f" seed ({len(r['problems'])} problems x {r['seeds']} seeds; ties share); mean"
             " rank [lower–upper quartile]. Regret (loss, on a multi-fidelity problem: its"
             " loss after a full training, whose optimum the bench does not compute): median"
             " [min–max] over seeds"
             " (`bench/stats.py`). Idle: the share of slot time left empty while trials were"
             " owed. Ask: the searcher's real time per trial.", ""]
    if r.get("note"):  # where a run's parts ran, when not all on the machine above
        lines += [f"Note: {r['note']}", ""]
    verdicts, gone = [], set()
    for w in r["widths"]:
        rows = []
        for x in w["rows"]:
            rows.append([x["search"], "; ".join(x["labels"]),
                         f"{x['mean_rank']:g} [{x['rank_quartiles'][0]:g}–"
                         f"{x['rank_quartiles'][1]:g}]",
                         *[x["median_best"].get(p, "—") for p in r["problems"]],
                         f"{x['median_idle']:.0%}", f"{x['median_virtual_time']:g}",
                         f"{x['median_ask_ms_per_trial']:.3g}"])
        mf = [p for p in r.get("multi_fidelity", []) if any(
            p in x["median_best"] for x in w["rows"])]
        note = (f" (the multi-fidelity problems {', '.join(mf)}: that many full trainings'"
                f" worth of epochs, 1-{r.get('max_fidelity')} each)") if mf else ""
        lines += [f"**{w['width']:,} at once**, {w['evaluations']:,} evaluations{note}:", ""]
        lines += _table(["search", "as run", "mean rank [quartiles]",
                         *[f"{'loss' if p in r.get('multi_fidelity', []) else 'regret'} {p}"
                           for p in r["problems"]], "idle", "virtual time",
                         "ask ms/trial"], rows)
        left = [_why_left_out(n, r) for n in w.get("left_out", [])
                if n not in r.get("failed", {})]
        if left:
            lines += ["Left out here: " + "; ".join(left) + ".", ""]
        gone |= set(w.get("left_out", [])) & set(r.get("failed", {}))
        if any(x["search"] == "auto" for x in w["rows"]):  # a sweep may leave auto out
            verdicts.append(f"at {w['width']:,}, {many_verdict(w['rows'])}")
    if gone:
        lines += ["Could not run at any width: " + "; ".join(
            _why_left_out(n, r) for n in sorted(gone)) + ".", ""]
    if verdicts:
        lines += ["Auto: " + "; ".join(verdicts) + ".", ""]
    return lines


def _held_out(r: dict[str, Any]) -> bool:
    """Whether a many-at-once run is on held-out problems (``heldout``, ``heldout-mf``;
    results before problem sets were named are), not on the dev ones auto was fitted to."""
    return str(r.get("problem_set", "heldout")).startswith("heldout")


def _further_many_runs(results: Path) -> list[tuple[Path, dict[str, Any]]]:
    """The further many-at-once runs: held-out ones first, newest first, then the dev
    sweeps that chose auto's rules, newest first."""
    runs = [(path, _read(path))
            for path in results.glob("many_at_once_*.json")
            if not path.name.startswith(ENGINE_NAME)]  # fmt: skip
    runs.sort(key=lambda run: run[1]["machine"].get("started", ""), reverse=True)
    return sorted(runs, key=lambda run: not _held_out(run[1]))


def _further_many_title(further: dict[str, Any], headline: dict[str, Any] | None) -> str:
    """What a further run is: a sweep on the dev problems, or a held-out run, marked
    *earlier* when it started before the headline run (auto's rules may have changed
    since; its commit says which code it ran)."""
    if not _held_out(further):
        return "a further run on the dev problems (a sweep for a rule of auto; not held out)"
    started = further["machine"].get("started", "")
    if further.get("written_as"):  # renamed: that name holds the headline's run
        return (f"a further run (its command wrote {further['written_as']}; renamed so that"
                " file stays the headline run of `bench/steps.py`)")
    if headline is not None and started < headline["machine"].get("started", ""):
        commit = str(further["machine"].get("commit", "unknown"))[:8]
        return (f"an earlier run ({started}, commit {commit}; the section's own run is"
                " newer, and auto may pick differently since)")
    return "a further run"


ENGINE_NAME = "many_at_once_engine"  # bench/many_at_once_engine.py's results, apart


def many_engine_section(r: dict[str, Any]) -> list[str]:
    """bench/many_at_once_engine.py: auto through run_workflow on the simulated backend,
    against the many-at-once bench's own loop, per width."""
    lines = ["### `auto` through the real scheduler on the simulated backend", "",
             machine_line(r["machine"]), "",
             "The held-out problems above, `auto` only, run as a user's sweep runs: an hpo"
             " stage on `run_workflow` (StageScheduler, TrialRunner, journal) and a"
             " `SimulatedBackend` of width one-slot nodes with no gang start-up, a trial's"
             " virtual hours and loss from the problem. Same: runs whose best loss equals"
             " the bench loop's (same search, same seed). Idle: the share of slot time"
             " empty before the last launch. Driver: real seconds of the whole run.", ""]
    rows = []
    for width in r["widths"]:
        runs = [x for x in r["runs"] if x["width"] == width]
        if not runs:
            continue
        same = sum(math.isclose(x["engine"]["best"], x["loop"]["best"], rel_tol=1e-9)
                   for x in runs)  # fmt: skip
        timed = sum(math.isclose(x["engine"]["virtual_time"], x["loop"]["time"],
                                 rel_tol=1e-9) for x in runs)  # fmt: skip
        idle = max(x["engine"]["idle_before_last_launch"] for x in runs)
        driver = sorted(x["engine"]["driver_s"] for x in runs)
        picks = sorted({x["engine"]["label"] for x in runs})
        rows.append([f"{width:,}", f"{len(runs)}", f"{same} of {len(runs)}",
                     f"{timed} of {len(runs)}", f"{idle:.1%}",
                     f"{statistics.median(driver):.1f} [{driver[0]:.1f}–{driver[-1]:.1f}]",
                     "; ".join(picks)])
    lines += _table(["at once", "runs", "same best", "same virtual time", "idle, at most",
                     "driver s, median [min–max]", "auto picked"], rows)
    return lines


def many_at_once_headline(r: dict[str, Any]) -> list[str]:
    cells = "; ".join(f"{w['width']:,}: {many_verdict(w['rows'])}" for w in r["widths"])
    return [f"- `auto` at many trials at once ({len(r['problems'])} problems x {r['seeds']}"
            f" seeds, mean rank of the best value): {cells}"]


KERNELS = "kernels"  # bench/results/kernels/KERNEL/: the search results rerun on another
# BLAS kernel (OPENBLAS_CORETYPE), each file named as the one it reproduces
KERNELS_TITLE = "## Search results on two BLAS kernels"
# A result's values that are not search outcomes: how long it took, where it ran.
_NOT_OUTCOMES = (RESULTS_FILE, "machine", "machine_detail", "command", "commit", "wall_s",
                 "cpu_s", "seconds", "elapsed_s", "time_s", "duration_s",
                 "load_average_at_start", "load_average_at_end")


def outcome_leaves(data: Any, path: str = "") -> dict[str, Any]:
    """Every value of a result that a search decided (``_NOT_OUTCOMES`` and keys that
    time the search, ``*_ms_per_trial``, left out), by its path."""
    if isinstance(data, dict):
        out: dict[str, Any] = {}
        for key, value in data.items():
            if key in _NOT_OUTCOMES or str(key).endswith("_ms_per_trial"):
                continue
            out |= outcome_leaves(value, f"{path}/{key}")
        return out
    if isinstance(data, list):
        out = {}
        for i, value in enumerate(data):
            out |= outcome_leaves(value, f"{path}[{i}]")
        return out
    return {path: data}


def _same(x: Any, y: Any) -> bool:
    """Equal outcomes, NaN on both sides counted equal (a result may hold NaN)."""
    return x == y or (isinstance(x, float) and isinstance(y, float) and math.isnan(x)
                      and math.isnan(y))


def _kernel_of(data: dict[str, Any]) -> str:
    blas = (data.get("machine") or {}).get("blas") or []
    kernels = dict.fromkeys(f"{b['library']} {b['kernel']}" for b in blas)  # numpy's, scipy's
    return ", ".join(kernels) or "kernel not recorded"


def _kernel_headline(stem: str) -> Any:
    """The headline renderer of a results file by its stem (every many-at-once run's is
    the many-at-once one), None where it has none."""
    if stem.startswith("many_at_once"):
        return many_at_once_headline
    return next((render for name, render in _file_headlines() if RESULT_NAMES[name] == stem),
                None)


def kernels_section(results: Path) -> list[str]:
    """Each search result rerun on another BLAS kernel against the one beside it here:
    its headline on both (where it has one), and how many of its outcomes differ
    (issue 40 item 3: a figure that holds on one kernel alone is not quoted)."""
    folder = results / KERNELS
    reruns = sorted(folder.glob("*/*.json")) if folder.is_dir() else []
    pairs = [(path, results / path.name) for path in reruns if (results / path.name).is_file()]
    if not pairs:
        return [KERNELS_TITLE, "", "Not run (no bench/results/kernels/KERNEL/*.json).", ""]
    lines = [KERNELS_TITLE, "",
             "OpenBLAS picks a kernel by the CPU (`OPENBLAS_CORETYPE` overrides it); a search"
             " whose model fits a matrix can then take another path on the same seed. Each"
             " file under `bench/results/kernels/KERNEL/` is a search result rerun with that"
             " kernel, by the same command at the same commit, beside the result of the same"
             " name here. *Outcomes*: every value the searches decided (regrets, ranks, best"
             " values, epochs), timings and machine left out.", ""]
    rows, shown = [], []
    for rerun_path, main_path in pairs:
        main, rerun = _read(main_path), _read(rerun_path)
        a, b = outcome_leaves(main), outcome_leaves(rerun)
        differ = sum(1 for key in a.keys() | b.keys() if not _same(a.get(key), b.get(key)))
        same_code = main["machine"].get("commit") == rerun["machine"].get("commit")
        rows.append([f"`{main_path.name}`", _kernel_of(main), _kernel_of(rerun),
                     f"{differ:,} of {len(a.keys() | b.keys()):,}",
                     "yes" if same_code else "no"])
        render_line = _kernel_headline(main_path.stem)
        if render_line is not None and differ:
            here, there = render_line(main), render_line(rerun)
            shown += ([f"`{main_path.name}`: the headline reads the same on both:", "", *here,
                       ""] if here == there else
                      [f"`{main_path.name}`: the headlines differ:", "",
                       *[f"{line} ({_kernel_of(main)})" for line in here],
                       *[f"{line} ({_kernel_of(rerun)})" for line in there], ""])
    lines += _table(["result", "here", "rerun", "outcomes that differ", "same commit"], rows)
    if shown:
        lines += ["Where outcomes differ, the headline each renders:", "", *shown]
    return lines


MF_HELDOUT_TITLE = "## Multi-fidelity searches on held-out problems, one epoch budget"


def mf_heldout_verdict(h: dict[str, Any], fraction: str) -> str:
    """Which searches ranked ahead of ``auto`` (a lower mean rank) at one fraction of
    the budget, and which level with it."""
    rows = h["rows"]
    auto = next((r for r in rows if r["search"] == "auto"), None)
    if auto is None:
        return "auto has no row"
    mine = auto["mean_rank"][fraction]
    ahead = sorted((r for r in rows if r["mean_rank"][fraction] < mine),
                   key=lambda r: r["mean_rank"][fraction])
    level = [r["search"] for r in rows if r is not auto and r["mean_rank"][fraction] == mine]
    place = len(ahead) + 1
    nth = {1: "st", 2: "nd", 3: "rd"}.get(place % 10 if place % 100 not in (11, 12, 13) else 0,
                                          "th")
    text = (f"auto {mine:g}, {place}{nth} of {len(rows)}" if ahead
            else f"auto {mine:g}, best")
    if ahead:
        text += ", behind " + ", ".join(f"{r['search']} ({r['mean_rank'][fraction]:g})"
                                        for r in ahead)
    if level:
        text += f"; level with {', '.join(level)}"
    return text


def mf_heldout_section(h: dict[str, Any], title: str = MF_HELDOUT_TITLE,
                       script: str = "bench/multifidelity_heldout_bench.py") -> list[str]:
    """bench/multifidelity_heldout_bench.py: which search to spend 30 full trainings on,
    on problems nestor's rules were not tuned on, at 25, 50 and 100 % of the budget (the
    dev suite, ``script`` bench/multifidelity_dev_bench.py, runs the same searches)."""
    fractions = list(h["rows"][0]["mean_rank"]) if h["rows"] else []
    lines = [title, "", *_ledger_lines(h), machine_line(h["machine"]), "",
             f"Synthetic problems fixed in `{script}` before any"
             " search ran on them (" + ", ".join(h["problems"]) + "): a configuration trained"
             " t epochs (1 to 100) reports a loss that falls towards its floor at its own pace,"
             " so short trainings can rank configurations wrongly. Every search gets"
             f" {h['budget_epochs']:,} epochs (30 full trainings), {h['slots']} slots,"
             " asynchronous, on a virtual clock. Rank: of the regret (the true floor of the"
             " configuration a search would return, less the best floor) among all"
             f" {len(h['rows'])} searches per problem and seed ({len(h['problems'])} problems"
             f" x {h['seeds']} seeds; 1 = best, ties share), after "
             + ", ".join(fractions) + " of the budget was told; mean ranks only (this result"
             " records no quartiles of them). Regret at 100 %: median [min–max] over seeds"
             " (`bench/stats.py`). `old auto` is what auto picked before issue 29. Auto"
             f" picked: {'; '.join(h['auto_picked']) or 'not recorded'}.", ""]
    rows = [[r["search"], *[f"{r['mean_rank'][f]:g}" for f in fractions],
             *[r["median_regret_at_100%"].get(p, "—") for p in h["problems"]],
             f"{r['median_epochs_spent']:,.0f}", f"{r['ask_ms_per_trial']:g}"]
            for r in h["rows"]]
    lines += _table(["search", *[f"mean rank {f}" for f in fractions],
                     *[f"regret {p}" for p in h["problems"]], "epochs spent",
                     "ask ms/trial"], rows)
    lines += ["Auto: " + "; ".join(f"at {f}, {mf_heldout_verdict(h, f)}"
                                   for f in fractions) + ".", ""]
    beaten = mf_beyond_spread(h)
    lines += ["Beyond the spread at 100 % (another search's worst seed below auto's best"
              " seed on a problem): " + ("; ".join(
                  f"{p}: {', '.join(names)}" for p, names in beaten.items()) or "none")
              + ".", ""]
    return lines


MF_DEV_TITLE = ("## Multi-fidelity dev suite: where cheap results rank faithfully and where"
                " they mislead")
MF_AUTO_TITLE = "## `auto` with a fidelity at 1, 4 and 16 at once, fresh held-out problems"


def _quartile_cell(q: list[float]) -> str:
    return f"{q[1]:g} [{q[0]:g}–{q[2]:g}]"


def mf_auto_verdict(rows: list[dict[str, Any]], name: str, fraction: str) -> str:
    """Where ``name`` stands at one share of the budget: first (the lowest median rank),
    tied (its quartiles overlap the first's), or behind it."""
    mine = next((r for r in rows if r["search"] == name), None)
    if mine is None:
        return f"{name} not run"
    first = min(rows, key=lambda r: (r["rank"][fraction][1], r["mean_rank"][fraction]))
    q = mine["rank"][fraction]
    if first is mine or q[1] == first["rank"][fraction][1]:
        return f"first, {_quartile_cell(q)}"
    best = first["rank"][fraction]
    how = "tied" if q[0] <= best[2] else "behind"
    return (f"{how} ({_quartile_cell(q)}; first {first['search']},"
            f" {_quartile_cell(best)})")


def mf_auto_section(h: dict[str, Any]) -> list[str]:
    """bench/multifidelity_auto_bench.py: auto with a fidelity at 1, 4 and 16 at once
    against nestor's searches, Optuna's and Syne Tune's, on problems auto was not fitted
    to, at 25, 50 and 100 % of the budget."""
    lines = [MF_AUTO_TITLE, "", *_ledger_lines(h), machine_line(h["machine"]), "",
             "Problems written for this bench and fixed before any search ran on them"
             " (`bench/multifidelity_auto_bench.py`: " + ", ".join(h["problems_fixed"])
             + "; this run: " + ", ".join(h["problems"]) + "); they judge " + h["judges"]
             + f". Every search gets {h['budget_epochs']:,} epochs"
             f" ({h['budget_epochs'] // h['max_epochs']} full trainings) on a virtual clock,"
             " the trials run"
             " asynchronously on as many slots as the width. Rank: of the regret (the"
             " expected loss after a full training of the configuration a search would"
             " return, less the best of 20,000 random ones') among all searches per"
             " problem and seed (1 = best, ties share), after 25, 50 and 100 % of the"
             f" budget: median [quartiles] over {len(h['problems'])} problems x"
             f" {h['seeds']} seeds" + (
                 f" (cut short: {h['cells']} of {h['cells_planned']} (width, problem, seed)"
                 " cells ran)" if h.get("cells", 0) < h.get("cells_planned", 0) else "")
             + ". Regret at 100 %: median over seeds.", ""]
    for width, w in h["widths"].items():
        rows = w["rows"]
        fractions = list(rows[0]["rank"]) if rows else []
        lines += [f"### {width} at once", "",
                  "Auto picked: " + ("; ".join(w["auto_picked"]) or "not recorded") + ".", ""]
        table = [[r["search"], *[_quartile_cell(r["rank"][f]) for f in fractions],
                  *[f"{r['median_regret_at_100%'].get(p, math.nan):.3g}"
                    for p in h["problems"]],
                  f"{r['median_epochs_spent']:,.0f}", f"{r['median_trials']:g}",
                  f"{r['ask_ms_per_trial']:g}"]
                 for r in sorted(rows, key=lambda r: (r["rank"]["100%"][1],
                                                      r["mean_rank"]["100%"]))]
        lines += _table(["search", *[f"rank {f}" for f in fractions],
                         *[f"regret {p}" for p in h["problems"]], "epochs spent", "trials",
                         "ask ms/trial"], table)
        for name in ("auto", "auto prefer final"):
            lines += [f"`{name}`: " + "; ".join(f"at {f}, {mf_auto_verdict(rows, name, f)}"
                                                for f in fractions) + ".", ""]
    return lines


def _cell_range(cell: str) -> tuple[float, float] | None:
    """(min, max) of a ``median [min–max]`` cell (``bench/stats.py``'s Spread.cell)."""
    match = re.match(r"\s*\S+ \[(\S+)–(\S+)\]", cell)
    return (float(match.group(1)), float(match.group(2))) if match else None


def mf_beyond_spread(h: dict[str, Any]) -> dict[str, list[str]]:
    """Per problem, the searches whose worst seed's regret at the end was below auto's
    best seed's: auto beaten there by more than the spread over seeds."""
    rows = {r["search"]: r["median_regret_at_100%"] for r in h["rows"]}
    if "auto" not in rows:
        return {}
    beaten: dict[str, list[str]] = {}
    for problem in h["problems"]:
        mine = _cell_range(rows["auto"].get(problem, ""))
        if mine is None:
            continue
        for name, cells in rows.items():
            theirs = _cell_range(cells.get(problem, ""))
            if name != "auto" and theirs is not None and theirs[1] < mine[0]:
                beaten.setdefault(problem, []).append(name)
    return beaten


def mf_heldout_headline(h: dict[str, Any]) -> list[str]:
    fractions = list(h["rows"][0]["mean_rank"]) if h["rows"] else []
    return [f"- multi-fidelity held-out, mean rank of {len(h['rows'])} searches on"
            f" {h['budget_epochs']:,} epochs: "
            + "; ".join(f"{f}: {mf_heldout_verdict(h, f)}" for f in fractions)]


BACKENDS_TITLE = "## Horovod against torch.distributed, the same trials"


def backends_section(b: dict[str, Any]) -> list[str]:
    """bench/backend_bench.py: the two trial backends on the same real trials, paired."""
    lines = [BACKENDS_TITLE, "", machine_line(b["machine"]), "",
             f"The built-in CNN on mnist5k through `python -m nestor.trainers`, under `horovodrun"
             f" --gloo` and under `torchrun` (`--backend torch`: DDP over Gloo), alternating,"
             f" {b['repeats']} repeat(s) of {b['epochs']} epochs (the first not counted):"
             f" dp 2 at batch {b['batch_per_rank']} per rank, and mp 2 with fully connected"
             f" layers of {b['mp_width']} units split in two. Medians over repeats; the ratio"
             " is taken repeat by repeat. Both backends start from the same seed, so their loss"
             " curves must agree.", ""]
    rows = [[case, f"{r['horovod_samples_per_s']:.0f}", f"{r['torch_samples_per_s']:.0f}",
             f"{r['torch_over_horovod']:.2f}", f"{r['max_train_loss_diff']:.2g}"]
            for case, r in b["cases"].items()]
    lines += _table(["case", "horovod samples/s", "torch samples/s", "torch / horovod",
                     "largest train-loss difference"], rows)
    return [*lines, "", f"Command: `{b['command']}`.", ""]


JOURNAL_TITLE = "## The journal with fsync on: durable events per second"


def journal_section(j: dict[str, Any]) -> list[str]:
    """bench/journal_bench.py: one fsync per event against group commit, same disk."""
    lines = [JOURNAL_TITLE, "", machine_line(j["machine"]), "",
             "The same events (a few hundred bytes each) written to a journal on the disk runs"
             " use: *per-event* waits for its own fsync each time (the journal before group"
             " commit); *stream* is one writer that never waits, an event counted once the"
             " journal's writer thread says it is durable; *callers* are threads that each wait"
             " for their event to be durable before the next. Durable events per second of wall"
             " time, first append to last acknowledgement.", ""]
    rows = [[mode, f"{r['events']:,}", f"{r['durable_events_per_s']:,}",
             f"{r['events_per_fsync']:g}", f"{r['cpu_ms_per_event']:g}", f"{r['wall_s']:g}"]
            for mode, r in j["modes"].items()]
    return lines + _table(["mode", "events", "durable events/s", "events per fsync",
                           "CPU ms/event", "wall s"], rows)


MILLION_TITLE = "## A million journal events: resume, status, results"
MILLION_ROWS = (("resume", "resume ready to schedule (killed at 90 %)", "resume_s"),
                ("status_first", "status, first look (the driver's snapshot)", "status_s"),
                ("status_killed", "status, first look at the killed driver's run", "status_s"),
                ("status_no_snapshot", "status with no snapshot (whole journal folded)", None),
                ("status", "status again (fold snapshot)", "status_s"),
                ("status_tail", "status, snapshot + last 10 % folded", "status_s"),
                ("results", "results (results.json)", "results_s"),
                ("plots", "plots' numbers (whole fold, slots, curves)", "plots_s"))


def million_events_section(m: dict[str, Any]) -> list[str]:
    """bench/million_events.py: each figure at each journal size, against its goal."""
    sizes = m.get("sizes") or [m]
    goals = m.get("goals") or {}
    lines = [MILLION_TITLE, "", machine_line(m.get("machine")), "",
             "Simulated sweeps (the mixed workload, fsync on) whose journals are measured, each"
             " command in a fresh process, with its peak memory, its CPU seconds where"
             " measured, and the 1-minute load as it started (the machine is shared: at a"
             " load of 30 on 2 cores wall time is mostly waiting)."
             + (" Two sizes show how each figure grows with the journal." if len(sizes) > 1
                else ""), ""]
    header = ["what", *[f"{s['events']:,} events ({s['journal_mib']:.0f} MiB)" for s in sizes],
              "goal"]
    rows = []
    for key, label, goal in MILLION_ROWS:
        if not all(key in s for s in sizes):
            continue
        cells = [f"{s[key]['wall_s']:.2f} s"
                 + (f" ({s[key]['cpu_s']:.2f} s CPU)" if "cpu_s" in s[key] else "")
                 + f", {s[key]['peak_mib']:,.0f} MiB"
                 + (f" (load {s[key]['load']:.0f})" if "load" in s[key] else "")
                 for s in sizes]
        if key == "status_first" and "driver_snapshot" not in sizes[-1]:  # before it kept one
            label = "status, first look (whole journal folded)"
        if key == "resume" and sizes[-1][key].get("live"):
            label = "resume ready to schedule (a copy taken while the driver ran)"
        rows.append([label, *cells, f"≤ {goals[goal]} s" if goal in goals else "—"])
    lines += _table(header, rows)
    growth = m.get("growth")
    if growth:
        lines += ["", f"From the smaller journal to the larger ({growth['events']:.2f}x the"
                  " events), wall time grew " + ", ".join(
                      f"{label.split(' (')[0]} {growth[key + '_wall_s']:.2f}x"
                      for key, label, _ in MILLION_ROWS if key + "_wall_s" in growth)
                  + "; peak memory " + ", ".join(
                      f"{label.split(' (')[0]} {growth[key + '_peak_mib']:.2f}x"
                      for key, label, _ in MILLION_ROWS if key + "_peak_mib" in growth) + "."]
    if goals.get("peak_mib"):
        lines += ["", f"Driver memory goal: ≤ {goals['peak_mib']:,} MiB throughout."]
    if sizes[-1]["events"] < 1_000_000:
        lines += ["", f"The largest journal here has {sizes[-1]['events']:,} events: short of"
                  " the 1,000,000 the goal names. Times are from a machine shared with other"
                  " work at the load shown, so they compare only within a row's load; peak"
                  " memory does not depend on the load."]
    return [*lines, "", f"Command: `{m.get('command', 'unknown')}`.", ""]


def gang_start_section(g: dict[str, Any]) -> list[str]:
    """bench/gang_start_bench.py: N gangs started through RayBackend against one at a time."""
    return ["## Starting gangs on real Ray", "", machine_line(g.get("machine")), "",
            f"{g['gangs']} one-rank Horovod gangs on {g['gangs']} logical CPUs of one Ray:"
            " one at a time (`GangPool.acquire` in the loop, as the engine did before) against"
            " all launched through `RayBackend` (each start-up in a thread of its own, off the"
            " scheduling loop). On 2 cores the ranks' start-ups compete for CPU and Ray starts"
            " workers two at a time, so concurrency saves no wall time here; what it saves is"
            " the loop's time: it is held for one booking per launch, not for the start-up.",
            "", *_table(["one at a time s", "concurrently s", "ratio",
                         "longest loop hold per launch ms"],
                        [[f"{g['one_at_a_time_s']:.1f}", f"{g['concurrently_s']:.1f}",
                          f"{g['speedup']:.2f}x", f"{1000 * g['longest_loop_hold_s']:.1f}"]]), ""]

def e2e_planning_section(e: dict[str, Any]) -> list[str]:
    """bench/e2e_planning_bench.py: parallel: auto against each hand-picked shape, nestor run."""
    s = e["summary"]
    lines = [f"## `parallel: auto` against hand-picked shapes, end to end (threshold"
             f" {e['threshold']:g})", "",
             machine_line(e["machine"]), "",
             f"The same HPO stage run by `nestor run` once per arm and seed: random search over"
             f" the learning rate ({e['lr_range'][0]:g}-{e['lr_range'][1]:g}, log) of the"
             f" built-in CNN on {e['dataset']}, {e['epochs']} epoch(s) a run, per-rank batch"
             f" {e['per_rank_batch']} under `batch: {{global_max: {e['global_max']}}}` (lr"
             f" scaled linearly with dp in every arm), at most {e['budget']} runs, on"
             f" {e['slots']} slots, until a run reaches val accuracy {e['threshold']:g}."
             f" Arms: `parallel: auto` and every hand-picked `{{data, model}}` that fits the"
             f" slots and the cap ({', '.join(a for a in e['arms'] if a != 'auto')}). Seeds"
             f" 1-{e['seeds']} are the search's seed (every arm draws the same learning rates);"
             " seeds run one after another, the arms in turn within each, so the machine's"
             " load falls on all alike. Time: from the moment the stage's shape was fixed"
             " (for auto, its `stage_planned` event) to `threshold_reached`; slot-seconds:"
             " ranks x seconds of every training run up to then (runs cut by it counted in"
             " part). A seed that never reached the threshold counts at its whole stage (≥)."
             " This machine is a shared 2-core one: other engineers' jobs ran beside these"
             " (see the load average), so single runs vary a lot; compare medians. The"
             " shapes do not train alike: dp doubles the global batch and the learning rate"
             " (linear rule), and model-parallel runs reached other accuracies than 1x1 for"
             " the same learning rates; so whether a run crosses the threshold is part of"
             " what is compared, not only its speed.", ""]
    rows = []
    for arm, x in s.items():
        by_seed = " / ".join(f"{'' if r['reached'] else '≥'}{r['time_to_threshold_s']:.0f}"
                             for r in e["rows"][arm])
        rows.append([f"`{arm}`", e2e_summary(e, arm, "time_s").cell("{:.1f}"), by_seed,
                     e2e_summary(e, arm, "slot_s").cell("{:.1f}"),
                     f"{x['mean_slot_s_total']:.1f}", str(x["runs"])])
    lines += _table(["arm", "s to threshold, median [min–max]", "per seed s",
                     "slot-s to threshold, median [min–max]", "mean slot-s, all runs", "runs"],
                    rows)
    plans = sorted({r["plan"]["shape"] for r in e["rows"].get("auto", []) if r.get("plan")})
    if plans:
        why = next(r["plan"]["why"] for r in e["rows"]["auto"] if r.get("plan"))
        lines += [f"`auto` chose {', '.join(plans)} (e.g. \"{why}\")."
                  + (f" Its first run measured the profile ({e['profile']['seconds']:.0f} s,"
                     " once; cached per trainer, settings and machine, and not counted above)."
                     if e.get("profile") else " Its profile was already in the cache (measured"
                     " by an earlier run of this trainer on this machine)."), ""]
    for what, label in (("time_s", "time"), ("slot_s", "slot-seconds")):
        x = e2e_verdict(e, what)
        if x:
            lines.append(f"- {label}: auto / best hand-picked (`{x['best']}`)"
                         f" {x['auto_over_best']} (goal ≤ 1.10: {x['goal_best']}); worst"
                         f" (`{x['worst']}`) / auto {x['worst_over_auto']} (goal ≥ 2:"
                         f" {x['goal_worst']})")
    twin = plans[0] if len(plans) == 1 and plans[0] in s else None
    if twin and "auto" in s:
        gap = s["auto"]["median_time_s"] / s[twin]["median_time_s"] - 1
        lines.append(f"- noise: `auto` ran the very shape of the `{twin}` arm on the same seeds;"
                     f" their medians differ by {gap:+.0%}, which is this machine's run-to-run"
                     " variation at this size: differences between arms smaller than that are"
                     " not resolved here")
    return [*lines, ""]


E2E_KEYS = {"time_s": "time_to_threshold_s", "slot_s": "slot_s_to_threshold"}


def e2e_summary(e: dict[str, Any], arm: str, what: str) -> Any:
    """An arm's seconds (or slot-seconds) to the threshold through bench/stats.py: a
    seed that never reached it counts at its whole stage, a lower bound."""
    from bench.stats import summarize_seeds

    rows = e["rows"][arm]
    key = E2E_KEYS[what]
    return summarize_seeds([r[key] if r["reached"] else None for r in rows],
                           budgets=[r[key] for r in rows])


def _ratio(top: Any, bottom: Any) -> str:
    """top / bottom, marked ≥ where only the numerator is a lower bound, ≤ where only
    the denominator is, ~ where both are (then it is unknown)."""
    mark = BOUND_MARK[{(True, False): "lower", (False, True): "upper",
                       (True, True): "unknown"}.get((top.median_is_lower_bound,
                                                      bottom.median_is_lower_bound))]
    return f"{mark}{top.median / bottom.median:.2f}"


def e2e_verdict(e: dict[str, Any], what: str) -> dict[str, Any] | None:
    """auto against the best and the worst hand-picked arm, ranked by bench/stats.py's
    rank_key (medians over all seeds; bounds marked, and goals met only on exact ones)."""
    from bench.stats import rank_key

    hand = [a for a in e["rows"] if a != "auto"]
    if "auto" not in e["rows"] or not hand:
        return None
    summary = {a: e2e_summary(e, a, what) for a in e["rows"]}
    ranked = sorted(hand, key=lambda a: rank_key(summary[a]))
    best, worst, auto = ranked[0], ranked[-1], summary["auto"]

    def goal(met: bool, certain: bool) -> str:
        return ("met" if met else "not met") + ("" if certain else " (bounds: not certain)")

    within = auto.median <= 1.10 * summary[best].median
    twice = summary[worst].median >= 2 * auto.median
    return {"best": best, "worst": worst, "auto": auto, "summary": summary,
            "auto_over_best": _ratio(auto, summary[best]),
            "worst_over_auto": _ratio(summary[worst], auto),
            "goal_best": goal(within, not (auto.median_is_lower_bound if within
                                           else summary[best].median_is_lower_bound)),
            "goal_worst": goal(twice, not (summary[worst].median_is_lower_bound if not twice
                                           else auto.median_is_lower_bound))}


PLANNING_TITLE = "## The cost model against measured epochs"


def planning_section(p: dict[str, Any]) -> list[str]:
    """bench/planning_bench.py: predicted against measured time per epoch, every shape here."""
    lines = [PLANNING_TITLE, "", machine_line(p["machine"]), "",
             f"The cost model fitted to a profile of the built-in `{p['trainer']}` (a few real"
             " training steps at each profiled shape, on real Horovod ranks), against real"
             f" trials of {p['epochs']} epoch(s) (the first left out as warm-up) at per-rank"
             f" batch {p['per_rank_batch']}: best of {len(p['rows'][0]['measured_all_s'])}"
             " interleaved runs per shape, training steps only. `predicted` uses the model"
             " fitted to the whole profile; `held out` the model fitted without that shape's"
             " steps, i.e. a prediction for a shape the profile never trained at.", ""]
    rows = []
    for r in p["rows"]:
        held = (f"{r['held_out_s']:.2f} ({r['held_out_error']:+.0%})"
                if r.get("held_out_s") is not None else "—")
        rows.append([f"{r['dp']}x{r['mp']}", str(r["at_once"]), str(r["global_batch"]),
                     f"{r['measured_s']:.2f}", f"{r['predicted_s']:.2f} ({r['error']:+.0%})",
                     held])
    lines += _table(["shape", "trials at once", "global batch", "measured s / epoch",
                     "predicted s", "held out s"], rows)
    worst = max(p["rows"], key=lambda r: abs(r["error"]))
    lines.append(f"- largest error: {worst['dp']}x{worst['mp']} x {worst['at_once']} at once,"
                 f" {worst['error']:+.0%}")
    return [*lines, "", f"Command: `{p['command']}`.", ""]


def simulate_planning_section(p: dict[str, Any]) -> list[str]:
    """bench/simulate_planning.py: the seed's combined table as simulated workflows."""
    m = p["model"]
    comm, comp = m["comm"], m["compute"]
    lines = [f"## The seed's combined table at {p['nodes']} nodes — a SIMULATION", "",
             machine_line(p["machine"]), "",
             "**Simulated, not measured.** Each row is a workflow run by nestor's real"
             f" StageScheduler on the simulated backend: {p['nodes']} nodes x"
             f" {p['slots_per_node']} slots, every trial lasting what the cost model calibrated"
             f" to the profile `{p['profile']}` (recorded on this 2-core machine) predicts for"
             " its shape, node contention included, spread lognormally (sigma"
             f" {p['sigma']:g}) around it; new gangs take 2 s, warm ones are reused. The"
             f" workload: {p['generations']} generations of the CNN on mnist5k,"
             f" {p['epochs']} epochs a run, per-rank batch {p['per_rank_batch']}, global"
             f" batch cap {p['global_max']} (the seed's batch 100 and 400); HPO rows are a"
             " generational genetic search (one table per generation size); the"
             " random-search and DP+MP rows run the same number of runs one after another"
             " (random: one slot of one node). Each"
             " row's shape is the cost model's best under its restriction (`nestor plan`'s"
             " rows; model-parallel groups within a node). The collectives' alpha and beta"
             " were measured on loopback inside one node: the simulation prices inter-node"
             " allreduces as if they were as fast, so the DP rows are optimistic.", "",
             f"Cost model: compute ({comp['c0'] * 1e3:.2f} + {comp['c0_split'] * 1e3:.2f}/mp) ms"
             f" per step + ({comp['c_rep'] * 1e3:.3f} + {comp['c_split'] * 1e3:.4f}/mp) ms per"
             f" sample, x (1 + {comp['contention']:.2f} (busy ranks on the node - 1));"
             f" {comm['algorithm']} allreduce alpha {comm['alpha'] * 1e6:.0f} us, beta"
             f" {comm['beta'] * 1e9:.2f} ns/B, gamma {comm['gamma'] * 1e9:.2f} ns/B, skew"
             f" {comm['skew'] * 1e3:.1f} ms per collective in a step; {m['train_samples']:,}"
             " training samples. Predicted epoch (s) alone / with the node full: "
             + ", ".join(f"{k} {x['alone']:.2f} / {x['node_full']:.2f}"
                         for k, x in p["predicted_epoch_s"].items()) + ".", ""]
    for table in p["tables"]:
        rows = []
        for r in table["rows"]:
            if not r.get("shape"):
                rows.append([r["label"], "no shape fits", *["—"] * 8])
                continue
            rows.append([r["label"], r["shape"], str(r["at_once"]), str(r["slots_used"]),
                         str(r["global_batch"]), f"{r['simulated_s']:,.1f}",
                         f"{r['speedup']:.1f}x", f"{r['predicted_speedup']:.1f}x",
                         _share(r["utilization_allocation"]),
                         _f(r.get("seed_speedup"), "{:.0f}x")])
        lines += [f"**Generations of {table['population']}** ({table['runs']:,} runs):", ""]
        lines += _table(["configuration", "shape", "at once", "slots", "global batch",
                         "simulated s to finish", "speed-up (simulated)",
                         "speed-up (closed form)", f"utilization of {p['nodes']} nodes",
                         "seed (CUG 2018, estimate)"], rows)
    lines += ["Speed-ups are over the random-search row. Closed form: `nestor plan`'s"
              " prediction (waves x run time), without start-up, barriers' stragglers or"
              " scheduling. Utilization: busy slot-seconds over all"
              f" {p['nodes'] * p['slots_per_node']} slots x the row's makespan.", ""]
    return lines



def _spread(data: dict[str, Any], fmt: str = "{:.3f}") -> str:
    from bench.stats import Spread

    return Spread(**data).cell(fmt)


def _loaded(m: dict[str, Any] | None) -> str:
    """A sentence when the machine was busy with more than this benchmark."""
    if not m:
        return ""
    load = max([*m.get("load_average_at_start", [0.0])[:1], *m.get("load_average_at_end",
                                                                    [0.0])[:1]])
    if load < 0.75 * m.get("cores", 1):
        return ""
    return (f" These numbers come from a loaded machine ({m.get('cores')} cores shared with"
            f" other work, 1-minute load up to {load:.1f}): every search ran under the same"
            " load, interleaved seed by seed, but times are noisier than on a quiet machine.")


def fidelity_section(f: dict[str, Any], out: Path) -> list[str]:
    """bench/search_fidelity_bench.py: the searches on one slot-second budget on mnist5k."""
    p = f["profile"]
    fixed = ", ".join(f"{k} {v}" for k, v in p["fixed"].items())
    lines = [SEARCH_FIDELITY_TITLE, "", machine_line(f["machine"]), "",
             f"Profile `{p['name']}`; total wall {f['wall_s']:.0f} s."
             + "".join(f" Note: {n}." for n in p["notes"]), "",
             f"The built-in CNN on mnist5k (settings `{p['settings']}`"
             f"{', ' + fixed if fixed else ''})"
             " tuned over lr, batch size and momentum by each search, every one a real nestor"
             f" workflow on {p['slots']} slots with the same budget of **{p['budget_slot_s']:g}"
             " slot-seconds** (its trials' rank-seconds; the engine stops the workflow when they"
             " are spent, and trials cut then count as runs). Random, TPE and genetic train each"
             f" configuration {p['epochs']} epochs; ASHA, Hyperband and BOHB promote from"
             f" {p['min_budget']} epoch by eta {p['eta']} and continue promoted trials from their"
             f" checkpoints; PBT trains {p['population']} members in intervals of"
             f" {p['interval']} epoch, exploiting and exploring. *Time to threshold*: from the"
             f" stage's start until a trial first reached validation accuracy {p['threshold']}"
             " (slot-seconds include the trials still running then); median [min–max] over all"
             f" {p['seeds']} seeds, a seed that never reached it counted at its whole budget (≥,"
             " a lower bound; ranked on the median slot-seconds). *Test*: the accuracy on the"
             " test split (never trained or chosen on) of the model with the best validation"
             " accuracy. *Runs*: every training run, completed, failed or cut (a PBT interval"
             " and a promotion are runs of their own, a few epochs each)." + _loaded(
                 f["machine"]), ""]
    from bench.stats import rank_key

    ranked = sorted(f["searches"].items(), key=lambda kv: rank_key(_summary(kv[1]["slot_s"])))
    rows = [[str(i), name, _cell(r["slot_s"]), _cell(r["wall_s"]), _spread(r["test"]),
             _spread(r["val"]), _spread(r["runs"], "{:.0f}"), _spread(r["spent_slot_s"], "{:.0f}")]
            for i, (name, r) in enumerate(ranked, start=1)]
    lines += _table(["rank", "search", "slot-s to threshold", "wall s to threshold",
                     "test acc. of best", "val acc. of best", "runs", "slot-s spent"], rows)
    verdict = pbt_verdict(f)
    if verdict:
        lines += [verdict, ""]
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 3))
    for i, (_, r) in enumerate(ranked):
        for seed in r["seeds"]:
            reached = seed["slot_s_to_threshold"] is not None
            value = seed["slot_s_to_threshold"] if reached else seed["slot_seconds"]
            ax.plot([value], [i], "o" if reached else "^", color="C0" if reached else "C3",
                    fillstyle="full" if reached else "none")
    ax.set_yticks(range(len(ranked)), [name for name, _ in ranked])
    ax.invert_yaxis()
    ax.set_xlabel("slot-seconds to threshold (△: never, whole budget)")
    fig.tight_layout()
    name = f"{FIGURES}/search-fidelity.png"
    fig.savefig(out / name, dpi=90)
    plt.close(fig)
    return [*lines, f"![slot-seconds to the threshold, per seed]({name})", ""]


SEARCH_FIDELITY_TITLE = "## Searches on one slot-second budget (mnist5k CNN)"
OWN_CODE_TITLE = ("## The user's own function: nestor against Ray Tune, Optuna and Syne Tune"
                  " on one wall budget (digits CNN)")


def own_code_goal(r: dict[str, Any]) -> str:
    """Issue 38's goal, read from the results' ``goal`` (bench/own_code_bench.verdict)."""
    g = r.get("goal") or {}
    if not g:
        return ""
    systems = r["systems"]
    acc = ("met" if g["accuracy_first_or_tied"] else "not met")
    ratio = g.get("time_ratio")
    time_text = ("met" if g["time_goal_met"] else "not met")
    return (f"Goal (issue 38): nestor's best configuration first or tied on validation accuracy"
            f" at the budget: **{acc}** (nestor's best, {g['nestor_best']}:"
            f" {_spread(systems[g['nestor_best']]['val'])}; the best peer, {g['peer_best']}:"
            f" {_spread(systems[g['peer_best']]['val'])}; tied means nestor's median within"
            " the peer's range). To the target in at most 0.7x the wall time of the fastest"
            f" peer: **{time_text}** (nestor's fastest, {g['nestor_fastest']}:"
            f" {_cell(systems[g['nestor_fastest']]['to_target_s'])} s; the fastest peer,"
            f" {g['peer_fastest']}: {_cell(systems[g['peer_fastest']]['to_target_s'])} s;"
            f" ratio of medians {_f(ratio, '{:.2f}')}).")


def own_code_section(r: dict[str, Any]) -> list[str]:
    """bench/own_code_bench.py: one user function, every system, one wall budget."""
    from bench.stats import rank_key

    space = ", ".join(f"{k} {lo:g}-{hi:g}" for k, (lo, hi) in r["space"].items())
    pbt = r["pbt"]
    lines = [OWN_CODE_TITLE, "", machine_line(r["machine"]), "",
             f"The same user function, `{r['function']}` (a small PyTorch CNN on scikit-learn's"
             " digits: 60/20/20 train/val/test split fixed, checkpoints through"
             " `ctx.checkpoint_dir` / `ctx.continue_from`), tuned over " + space
             + f" on {r['slots']} slots by each system, each seed a fresh process in a fresh"
             f" folder with a wall budget of **{r['budget_s']:g} s** counted from its start"
             " (imports, Ray's start and the first trial's launch included); systems interleaved"
             f" seed by seed, {r['seeds']} seeds; total wall {r['wall_s'] / 60:.0f} min."
             f" A configuration trains up to {r['epochs']} epochs (ASHA and Hyperband rungs 1,"
             f" 3, 9, eta {r['eta']}); PBT {pbt['population']} members, exploit every"
             f" {pbt['interval']} epochs, {pbt['intervals']} intervals. nestor runs `nestor run"
             " SPEC` (a function trainer; `auto` told `fidelity: epochs`, budget the wall"
             " budget in slot-seconds) stopped by SIGTERM at the budget; Ray Tune (ASHA with"
             " OptunaSearch; PBT with checkpoints through `tune.report`) by `time_budget_s`;"
             " Optuna (`study.optimize`, TPE, HyperbandPruner, `n_jobs=2`) by `timeout`; Syne"
             " Tune (ASHA, local backend, `sleep_time` 0.5 s) by `max_wallclock_time`. Every"
             " figure comes from the function's own log, one line per evaluated epoch: *best"
             " val* is the highest validation accuracy of any epoch evaluated within the budget"
             " and *its test* that model's test accuracy; *to target* the wall seconds from the"
             f" process start to the first epoch at val ≥ {r['target']} ({r['target_note']}),"
             " a seed that never reached it counted at its whole budget (≥); *first epoch*"
             " the seconds to the first evaluated epoch (start-up); *epochs* evaluated within"
             " the budget. Median [min–max] over seeds." + _loaded(r["machine"]), ""]
    ranked = sorted(r["systems"].items(),
                    key=lambda kv: (rank_key(_summary(kv[1]["to_target_s"])),
                                    -(kv[1]["val"]["median"] or 0.0)))
    rows = [[str(i), name, _spread(s["val"]), _spread(s["test"]),
             _cell(s["to_target_s"]), _spread(s["first_epoch_s"], "{:.0f}"),
             _spread(s["epochs"], "{:.0f}")]
            for i, (name, s) in enumerate(ranked, start=1)]
    lines += _table(["rank", "system", "best val at the budget", "its test acc.",
                     f"wall s to val {r['target']}", "first epoch (s)", "epochs"], rows)
    lines += own_code_startup(r)
    goal = own_code_goal(r)
    return [*lines, *([goal, ""] if goal else [])]


def own_code_startup(r: dict[str, Any]) -> list[str]:
    """Where a run's first seconds go, where the results have it (``startup`` per seed:
    read from what each system left in its folder)."""
    from bench.stats import spread

    keys = ("ray_s", "search_s", "first_trial_s")
    rows = []
    for name, s in r["systems"].items():
        got = [seed.get("startup") or {} for seed in s["seeds"]]
        if not any(v is not None for g in got for v in g.values()):
            continue
        cells = [spread([g.get(k) for g in got]).cell("{:.0f}") if any(
            g.get(k) is not None for g in got) else "—" for k in keys]
        rows.append([name, *cells, _spread(s["first_epoch_s"], "{:.0f}")])
    if not rows:
        return []
    note = r.get("startup_note")
    return ["Where the start-up goes: seconds from the process start to the creation of"
            " Ray's session folder (its time stamp, 1 s resolution), to the search's start"
            " (nestor's `workflow_started`, Tune's experiment folder), to nestor's first trial"
            " start and"
            " to the first evaluated epoch; median [min–max] over seeds."
            + (f" {note}" if note else ""), "",
            *_table(["system", "Ray session created", "search started", "first trial started",
                     "first epoch"], rows)]


FIXED_SEARCHES = ("random", "tpe", "genetic", "asha", "hyperband", "bohb (hyperband + tpe)")


def pbt_verdict(f: dict[str, Any]) -> str:
    """Issue 18's goal, read from the medians: PBT to the threshold in less slot time
    than every search whose trials keep their hyperparameters fixed."""
    searches = f["searches"]
    if "pbt" not in searches:
        return ""
    from bench.stats import rank_key

    pbt = _summary(searches["pbt"]["slot_s"])
    others = {n: _summary(searches[n]["slot_s"]) for n in FIXED_SEARCHES if n in searches}
    if not others or pbt.median is None:
        return ""
    beaten = [n for n, s in others.items() if rank_key(pbt) < rank_key(s)]
    if len(beaten) == len(others):
        return (f"Goal (issue 18), PBT in less slot time than every fixed-hyperparameter search:"
                f" met on the medians (PBT {pbt.cell()} slot-s); compare the ranges before"
                " reading more into it.")
    missed = ", ".join(n for n in others if n not in beaten)
    return (f"Goal (issue 18), PBT in less slot time than every fixed-hyperparameter search:"
            f" not met here; PBT's slot-seconds to the threshold ({pbt.cell()}) have a median"
            f" no lower than those of {missed}.")


def multifidelity_section(m: dict[str, Any]) -> list[str]:
    """bench/multifidelity_bench.py: epochs to a quality on simulated training."""
    lines = ["## Multi-fidelity searches on simulated training", "",
             machine_line(m.get("machine")), ""]
    if any("per_seed" not in r for r in m["rows"]):  # written before bounds were marked
        return [*lines, "Not comparable: this result's medians counted seeds that never"
                " reached the quality without marking them; rerun"
                " `bench/multifidelity_bench.py`.", ""]
    rows = [[r["search"], _cell(r["epochs"]), f"{r['q1']:.0f}–{r['q3']:.0f}"]
            for r in m["rows"]]
    return [*lines,
            f"A simulated model on a 3-D sphere (no real training; `bench/multifidelity_bench.py`"
            " says how loss and noise evolve): epochs until a model trained the full"
            f" {m['max_epochs']} epochs has loss at most {m['quality']:g}, every epoch of every"
            f" trial counted on {m['parallel']} simulated slots (a continued trial from its"
            " checkpoint). Median [min–max] over"
            f" {m['seeds']} seeds (`bench/stats.py`): a seed that never got there counts at all"
            " it spent, a lower bound marked ≥; quartiles of the epochs spent beside it.", "",
            *_table(["search", "epochs to the quality", "quartiles"], rows)]


QUIET_GOAL_MIN = 30


def steps_section(b: dict[str, Any]) -> list[str]:
    """bench/steps.py's record of one run: each step's wall time, CPU time and load, so
    the 30-minute goal of ``make bench-quick`` is read off a run, not guessed. On a
    shared machine the wall time is an upper bound for a quiet one (other load only
    slows a step down) and CPU time / cores a lower bound."""
    m, size = b["machine"], b["size"]
    make = "make bench-quick" if size == "quick" else "make bench"
    rows = [[name, f"`{s['command']}`", f"{s['wall_s']:.0f}", f"{s['cpu_s']:.0f}",
             f"{s['load_average_at_start'][0]:.1f}–{s['load_average_at_end'][0]:.1f}",
             "ok" if s["rc"] == 0 else f"failed ({s['rc']})"] for name, s in b["steps"].items()]
    wall, cpu = b["total"]["wall_s"] / 60, b["total"]["cpu_s"] / 60
    verdict = (f"Total {wall:.1f} min of wall time and {cpu:.1f} min of counted CPU time"
               f" on {m['cores']} cores: on a quiet machine of the same kind at least"
               f" {cpu / m['cores']:.1f} min (counted CPU time over the cores) and at most"
               f" {wall:.1f} min (the wall time under the load shown; other load only slows a"
               " step down), so")
    if wall <= QUIET_GOAL_MIN:
        verdict += f" within the {QUIET_GOAL_MIN}-minute goal even under that load."
    elif cpu / m["cores"] <= QUIET_GOAL_MIN:
        verdict += (f" the {QUIET_GOAL_MIN}-minute goal is met only if the load, not the"
                    " steps, made up the difference: not shown by this run.")
    else:
        verdict += f" over the {QUIET_GOAL_MIN}-minute goal."
    missing = (f" Steps not in this run: {', '.join(b['missing'])}." if b.get("missing")
               else "")
    missing += f" {b['note']}" if b.get("note") else ""
    return [f"## The run: `{make}`, step by step", "", machine_line(m), "",
            f"Run `{m.get('run', '?')}`, {size} sizes (the list is `bench/steps.py`; each"
            " step's own section names its sizes). Wall time, and CPU time of the step and"
            " the processes it waited for (not those of Ray's workers that Ray leaves"
            " unreaped, so a low figure); 1-min load at its start and end." + missing, "",
            *_table(["step", "command", "wall s", "CPU s", "load", "exit"], rows),
            verdict, ""]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--results", type=Path, default=RESULTS)
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "REPORT.md")
    p.add_argument("--check", action="store_true",
                   help="render to a scratch directory and exit 1 if --out differs, if"
                        " it leaves a headline figure older than the code it measures"
                        " (bench/steps.py's MEASURES) without its stale label, if a result"
                        " comes from uncommitted code, or if bench/heldout_ledger.py and"
                        " the held-out runs disagree")
    p.add_argument("--same-run", action="store_true",
                   help="also exit 1 unless every headline figure comes from one run of"
                        " bench/steps.py at one clean commit on one machine")
    args = p.parse_args(argv)
    if args.check or args.same_run:
        code = check(args.results, args.out) if args.check else 0
        if args.same_run:
            problems = same_run(args.results)
            print("\n".join(["headline not from one run:", *problems]) if problems
                  else "headline: one run, one commit, one machine")
            code = code or int(bool(problems))
        return code
    print(f"written: {render(args.results, args.out)}")
    return 0


def check(results: Path, report: Path) -> int:
    """0 when ``report`` is exactly what ``results`` render and labels every headline
    figure made before the last change to the code it measures stale, no result comes
    from a dirty tree and the held-out ledger agrees with the results, else 1 with
    what differs."""
    import difflib
    import tempfile

    with tempfile.TemporaryDirectory() as scratch:
        expected = render_text(results, Path(scratch))
    actual = report.read_text() if report.is_file() else ""
    unfit = dirty_results(results) + ledger_problems(results)
    if unfit:
        print("\n".join([f"{results}: results from uncommitted code, or held-out runs the"
                         " ledger (bench/heldout_ledger.py) does not record as they ran:",
                         *unfit]))
        return 1
    stale = stale_problems(results, actual)
    if stale:
        print("\n".join([f"{report}: headline figures older than the code they measure,"
                         " not labelled stale (run `python -m bench.report`, or rerun them"
                         " with `make bench-quick`):", *stale]))
        return 1
    if actual == expected:
        print(f"{report} is what {results} render")
        return 0
    diff = difflib.unified_diff(actual.splitlines(), expected.splitlines(), str(report),
                                "rendered from the results", lineterm="", n=1)
    print("\n".join(list(diff)[:60]))
    print(f"{report} differs from what {results} render: run `python -m bench.report`")
    return 1


if __name__ == "__main__":
    raise SystemExit(main())

