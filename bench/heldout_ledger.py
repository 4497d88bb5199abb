"""Which problems each revision of ``auto``'s rules was fitted on, and which judged it.

A held-out set is evidence about a rule only the first time it judges one: once its
result is known, a rule changed after it (or fitted knowing it) is no longer judged
by it from outside. So a problem that has judged a revision is not used to fit a
later one, and each revision gets a fresh set. Where the project's history broke
that (issue 40 item 4's audit: rule W was fitted on dev problems after ``auto`` lost
on the held-out multi-fidelity pair, then judged on the same pair), the ledger says
so: the judgement is marked ``reused`` with why, and ``bench/REPORT.md`` labels the
results it holds as not fresh held-out evidence. ``python -m bench.report --check``
fails when the ledger and the history disagree (:func:`problems` here; the results
files' problems and commits in ``bench/report.py``).

Reconstructed from ``git log -- search/_auto.py`` (the commits that change what
``choose_search`` picks, not its docstring) and the committed results. A problem is
``BENCH:NAME``, the bench script that defines it and its name there. A result is a
file in ``bench/results`` or ``COMMIT:bench/results/FILE``, a version since
overwritten. Runs by ``make bench-quick`` that were overwritten before their file
was kept apart are left out; the versions committed now are all here.
"""

from __future__ import annotations

from dataclasses import dataclass


def _set(bench: str, *names: str) -> frozenset[str]:
    return frozenset(f"{bench}:{name}" for name in names)


SINE_FIT = _set("auto_bench", "sin7", "sin5", "cos7", "sin7-scaled")
AUTO_SUITE = _set("auto_suite_bench", "sphere5", "ellipsoid5", "rosenbrock5", "rastrigin4",
                  "ackley5", "branin", "noisy-sphere5", "noisy-rosenbrock5", "hpo4")
AUTO_HELDOUT = _set("auto_heldout_bench", "rotated-quadratic-12", "bent-cigar-10",
                    "griewank-6", "six-hump-camel-2", "noisy-sphere-20", "mixed-7",
                    "integer-6")
MF_HELDOUT = _set("multifidelity_heldout_bench", "tradeoff-4d", "branin-slow-y", "mixed-hpo",
                  "faithful-noisy-6d")
MANY_DEV_NUMERIC = _set("many_at_once_bench", "sphere-5d", "rosenbrock-5d", "rastrigin-5d")
MANY_DEV = MANY_DEV_NUMERIC | _set("many_at_once_bench", "mixed-5")
MANY_HELDOUT_MF = _set("many_at_once_bench", "mf-crossing-5d", "mf-faithful-5d")
MANY_HELDOUT = MANY_HELDOUT_MF | _set("many_at_once_bench", "ellipsoid-rot-8d", "ackley-6d",
                                      "styblinski-tang-4d", "hpo-mixed-7")
MANY_DEV_MF = _set("many_at_once_bench", "mf-noisy-sphere-3d", "mf-lr-mislead-4d")
MF_DEV = _set("multifidelity_dev_bench", "faithful-ellipsoid-3d", "faithful-valley-5d",
              "misleading-capacity-6d", "misleading-decoy-8d")
MF_AUTO = _set("multifidelity_auto_bench", "faithful-rotated-4d", "faithful-bumpy-3d",
               "misleading-overfit-5d", "misleading-mixed-5d")


@dataclass(frozen=True)
class Judgement:
    """One held-out set run on one revision: its problems, the results that hold the
    run, and (``reused``) why it is not fresh held-out evidence, or "" where these
    problems had neither judged an earlier revision nor been fitted on."""

    problems: frozenset[str]
    results: tuple[str, ...]
    reused: str = ""


@dataclass(frozen=True)
class Revision:
    """A change to what ``auto`` picks: where it landed, what it was fitted on (with
    the results that show it), and the judgements of it. ``fit_reuses`` says why the
    fit used problems that had judged an earlier revision ("" where it did not)."""

    name: str
    commit: str
    change: str
    fitted_on: frozenset[str] = frozenset()
    fit_results: tuple[str, ...] = ()
    judged_by: tuple[Judgement, ...] = ()
    fit_reuses: str = ""


LEDGER: tuple[Revision, ...] = (
    Revision("rules 1-8", "1c37d62",
             "the first auto: grid, random, genetic, TPE, CMA-ES by the space, budget and"
             " trials at once", fitted_on=SINE_FIT),
    Revision("rule M, Hyperband", "8646d09",
             "with a fidelity that splits into 3+ rungs: BOHB-style Hyperband"),
    Revision("rule 6, no startup", "7a00e8f",
             "CMA-ES spends no trial on random startup draws", fitted_on=SINE_FIT),
    Revision("rule 6, wide", "a2385fe",
             "CMA-ES's generation at least the trials at once"),
    Revision("rule 5", "3ea067d", "lq-CMA-ES for 2-30 numbers at up to 4 at once",
             fitted_on=SINE_FIT | AUTO_SUITE, fit_results=("auto-sine.json",),
             judged_by=(Judgement(AUTO_HELDOUT,
                                  ("f161dda:bench/results/auto-heldout.json",)),)),
    Revision("rule M, ASHA-TPE from 1", "1ca821a",
             "with a fidelity: ASHA with TPE on rungs from 1, an epoch budget",
             judged_by=(Judgement(MF_HELDOUT,
                                  ("b56360c:bench/results/multifidelity_heldout.json",)),)),
    Revision("rule M, BOHB from max/27", "ba6bba4",
             "with a fidelity: BOHB-style Hyperband on rungs from max/27",
             fitted_on=MF_HELDOUT,
             fit_reuses="chosen on the held-out multi-fidelity bench's first run, which had"
                        " judged rule M (ASHA-TPE from rung 1)"),
    Revision("rule M", "b56360c", "with a fidelity: ASHA with TPE on rungs from max/27",
             fitted_on=MF_HELDOUT,
             fit_results=("b56360c:bench/results/multifidelity_heldout.json",),
             fit_reuses="chosen on the held-out multi-fidelity bench's first run, which had"
                        " judged rule M (ASHA-TPE from rung 1)",
             judged_by=(Judgement(MF_HELDOUT, ("multifidelity_heldout_seeds5.json",),
                                  reused="rule M was chosen on these problems"),)),
    Revision("rule 3", "a5aab37",
             "16+ at once: genetic search breeding from the best 16, DE from 256",
             fitted_on=MANY_DEV, fit_results=("many_at_once_dev_rule3.json",),
             judged_by=(Judgement(MANY_HELDOUT, ("many_at_once_full.json",
                                                 "many_at_once_ngopt64.json",
                                                 "many_at_once_ngopt256.json")),)),
    Revision("rule 3a", "e925c1a",
             "16-63 at once on numbers: lq-CMA-ES, a generation of the width",
             fitted_on=MANY_DEV_NUMERIC, fit_results=("many_at_once_dev_numeric_rule3a.json",),
             judged_by=(
                 Judgement(MANY_HELDOUT, ("many_at_once_rule3a16.json",
                                          "72a8d3c:bench/results/many_at_once.json"),
                           reused="they had judged rule 3, whose loss at 16 at once on them"
                                  " prompted this rule"),
                 Judgement(AUTO_HELDOUT, ("72a8d3c:bench/results/auto-heldout.json",),
                           reused="they had judged rule 5 (a rerun by make bench-quick)"),
                 Judgement(MF_HELDOUT, ("72a8d3c:bench/results/multifidelity_heldout.json",),
                           reused="rule M was chosen on these problems (a rerun by make"
                                  " bench-quick)"))),
    Revision("rule 3a, async", "cee3881",
             "16-63 at once on numbers: lq-CMA-ES on the asynchronous schedule",
             fitted_on=MANY_DEV_NUMERIC,
             fit_results=("many_at_once_dev_numeric_rule3a_async.json",)),
    Revision("rule 3a, default population", "cfcf5b6",
             "16-63 at once on numbers: asynchronous lq-CMA-ES, CMA-ES's default"
             " population", fitted_on=MANY_DEV_NUMERIC,
             fit_results=("many_at_once_dev_numeric_rule3a_async.json",),
             judged_by=(
                 Judgement(MANY_HELDOUT, ("many_at_once_rule3a_async.json",),
                           reused="they had judged rule 3 and the generational rule 3a"),
                 Judgement(MANY_HELDOUT_MF, ("many_at_once_heldout_mf_w64.json",),
                           reused="they had judged rule 3 and rule 3a (rule M's pick on"
                                  " them at 16 at once)"))),
    Revision("rule W", "23e3c9d",
             "16+ at once on numbers with a fidelity: every trial in full, asynchronous"
             " lq-CMA-ES", fitted_on=MANY_DEV_MF,
             fit_results=("many_at_once_dev_mf_w16_32.json", "many_at_once_dev_mf_w256.json"),
             judged_by=(
                 Judgement(MANY_HELDOUT_MF, ("many_at_once_heldout_mf_w64_rule_w.json",),
                           reused="they had judged rule M at 64 at once"
                                  " (many_at_once_heldout_mf_w64.json), whose loss there"
                                  " prompted this rule"),
                 Judgement(MANY_HELDOUT, ("72a8d3c:bench/results/many_at_once_complete.json",
                                          "many_at_once_cbo64.json",
                                          "many_at_once_tpe1024.json"),
                           reused="they had judged rules 3 and 3a, and their multi-fidelity"
                                  " pair rule M before this rule"))),
    Revision("rule P", "9ea6b9d",
             "with a fidelity, prefer: anytime (rules M and W, the default) or final"
             " (every trial in full); rule M's ASHA-TPE models the highest rung with 10"
             " results", fitted_on=MF_DEV, fit_results=("multifidelity_dev.json",),
             judged_by=(
                 Judgement(MF_AUTO, ("multifidelity_auto.json",)),
                 # Issue 40's reruns at main on two OpenBLAS kernels: make bench-quick's
                 # search steps (Haswell here, SkylakeX under kernels/) and the full
                 # many-at-once bench on both. Evidence that the figures reproduce, not
                 # a fresh judgement of any rule.
                 Judgement(AUTO_HELDOUT, ("auto-heldout.json",
                                          "kernels/skylakex/auto-heldout.json"),
                           reused="they had judged rules 5 and 3a (reruns by make"
                                  " bench-quick, on two BLAS kernels)"),
                 Judgement(MANY_HELDOUT, ("many_at_once.json", "many_at_once_complete.json",
                                          "kernels/skylakex/many_at_once.json",
                                          "kernels/skylakex/many_at_once_complete.json"),
                           reused="they had judged rules 3, 3a and W (reruns on two BLAS"
                                  " kernels: make bench-quick's and the full bench's)"),
                 Judgement(MF_HELDOUT, ("multifidelity_heldout.json",
                                        "kernels/skylakex/multifidelity_heldout.json"),
                           reused="rule M was chosen on these problems (reruns by make"
                                  " bench-quick, on two BLAS kernels)"))),
)


def problems(ledger: tuple[Revision, ...] = LEDGER) -> list[str]:
    """Where ``ledger`` (oldest revision first) breaks held-out-means-held-out without
    saying so, or says so where it did not: a revision fitted on problems that judged
    an earlier one, or judged on problems an earlier revision was judged or any
    revision so far was fitted on, must say why (``fit_reuses``, ``reused``); a fresh
    fit or judgement must not. [] when the ledger is consistent."""
    found: list[str] = []
    judged: dict[str, str] = {}  # problem -> the first revision it judged
    fitted: dict[str, str] = {}  # problem -> the first revision fitted on it
    for revision in ledger:
        name = f"{revision.name} ({revision.commit})"
        before = sorted(revision.fitted_on & judged.keys())
        if before and not revision.fit_reuses:
            found.append(f"{name} was fitted on problems that had judged"
                         f" {judged[before[0]]}: {', '.join(before)}; a fresh held-out set is"
                         " due, or the ledger says why (fit_reuses)")
        elif revision.fit_reuses and not before:
            found.append(f"{name}: fit_reuses says its fit reused judging problems, but none"
                         " of its fitting problems had judged an earlier revision")
        for problem in revision.fitted_on:
            fitted.setdefault(problem, name)
        mine: dict[str, str] = {}
        for judgement in revision.judged_by:
            seen = sorted(judgement.problems & (judged.keys() | fitted.keys()))
            what = ", ".join(judgement.results) or "no results named"
            if seen and not judgement.reused:
                first = judged.get(seen[0]) or f"fitting {fitted[seen[0]]}"
                found.append(f"{name} judged by {what} on problems already used ({first}):"
                             f" {', '.join(seen)}; not held out unless marked reused")
            elif judgement.reused and not seen:
                found.append(f"{name} judged by {what}: marked reused, but these problems had"
                             " judged no earlier revision and fitted none")
            if not judgement.results:
                found.append(f"{name}: a judgement names no results file")
            for problem in judgement.problems:
                mine.setdefault(problem, name)
        for problem, who in mine.items():
            judged.setdefault(problem, who)
    return found


def judgement_of(result: str,
                 ledger: tuple[Revision, ...] = LEDGER) -> tuple[Revision, Judgement] | None:
    """The revision and judgement whose results include ``result`` (a file name in
    bench/results), or None."""
    for revision in ledger:
        for judgement in revision.judged_by:
            if result in judgement.results:
                return revision, judgement
    return None


def fitted_with(result: str, ledger: tuple[Revision, ...] = LEDGER) -> list[Revision]:
    """The revisions fitted on ``result`` (a file name in bench/results)."""
    return [revision for revision in ledger if result in revision.fit_results]


def label(result: str, ledger: tuple[Revision, ...] = LEDGER) -> str | None:
    """What ``bench/REPORT.md`` says of a results file the ledger names: the revision a
    held-out run judged and whether it is fresh evidence, or what was fitted on it."""
    found = judgement_of(result, ledger)
    if found is not None:
        revision, judgement = found
        if judgement.reused:
            return (f"**Reused held-out set, not fresh evidence** (`bench/heldout_ledger.py`):"
                    f" this run judged {revision.name} (`{revision.commit}`) on a set"
                    f" already used: {judgement.reused}.")
        return (f"Held out (`bench/heldout_ledger.py`): this run judged {revision.name}"
                f" (`{revision.commit}`), the first use of these problems.")
    fits = fitted_with(result, ledger)
    if fits:
        return ("Fitting evidence (`bench/heldout_ledger.py`): "
                + ", ".join(f"{r.name} (`{r.commit}`)" for r in fits) + " fitted on this run.")
    return None
