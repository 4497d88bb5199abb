"""The README's figures that are settings, not measurements, are the code's.

Each case names a phrase of README.md with the figure in it and the constant the
code uses. Changing either alone fails here: the README cannot drift from the code
(it once said a blind node retries for 1 s and a silent one fails after 10 s; the
code's defaults were 10 s and 120 s). Measured figures live in bench/REPORT.md,
rendered from bench/results; behaviour the README promises is asserted by the tests
it names (the 2 s grace in tests/reliability/test_engine_events.py, the progress
timeout's default in tests/orchestrator/engine/test_trial_defaults.py, the lq-CMA-ES regret
in tests/search/test_lq_cmaes.py).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest

README = (Path(__file__).resolve().parents[2] / "README.md").read_text()


def _grace() -> float:
    from nestor.orchestrator.backends.ray.backend import FAILURE_GRACE_S

    return FAILURE_GRACE_S


def _backoff_max() -> float:
    from nestor.orchestrator.engine.attempts import BACKOFF_FIRST_S, BACKOFF_MAX_S

    assert BACKOFF_FIRST_S == 1.0  # "1, 2, 4 … s"
    return BACKOFF_MAX_S


def _snapshot_every() -> int:
    from nestor.orchestrator.engine.search_log import SNAPSHOT_EVERY

    return SNAPSHOT_EVERY


def _hysteresis_percent() -> float:
    from nestor.orchestrator.planning._planner import HYSTERESIS

    return round(HYSTERESIS * 100, 6)


def _gang_start() -> float:
    from nestor.orchestrator.planning._planner import GANG_START_S

    return GANG_START_S


def _placement_timeout() -> float:
    import nestor.orchestrator.backends.ray.gangs as gangs

    source = Path(gangs.__file__).read_text()  # the default, whatever the environment says
    return float(re.search(r'"NESTOR_PLACEMENT_TIMEOUT_S", "(\d+)"', source).group(1))


def _ray_probe() -> float:
    from nestor.orchestrator.backends.ray.probe import RAY_PROBE_TIMEOUT_S

    return RAY_PROBE_TIMEOUT_S


def _settle() -> float:
    from nestor.orchestrator.backends.ray.visibility import SETTLE_S

    return SETTLE_S


def _answer() -> float:
    from nestor.orchestrator.backends.ray.visibility import ANSWER_TIMEOUT_S

    return ANSWER_TIMEOUT_S


def _store_copy() -> float:
    from nestor.orchestrator.projections.local_store import SYNC_INTERVAL_S

    return SYNC_INTERVAL_S


def _spec_mib() -> float:
    from nestor.orchestrator.spec._yaml import MAX_FILE_BYTES

    return MAX_FILE_BYTES / 2**20


def _pb2_weight() -> float:
    from nestor.search._pb2 import KAPPA

    return KAPPA


def _progress_timeout_min() -> float:
    from nestor.orchestrator.spec.model import TrialPolicy

    return TrialPolicy().progress_timeout / 60


# (what, a regular expression whose group 1 is the README's figure, the code's value)
CASES: list[tuple[str, str, Callable[[], float]]] = [
    ("grace for a failed rank's peers", r"get (\d+) s to fail the same way", _grace),
    ("progress timeout default", r"`trial\.progress_timeout` \(default (\d+) min\)",
     _progress_timeout_min),
    ("start backoff cap", r"backs off \(1, 2, 4 … s, at most (\d+)\)", _backoff_max),
    ("searcher snapshot", r"`searcher/STAGE\.json` every (\d+) entries", _snapshot_every),
    ("re-plan hysteresis", r"at least (\d+) % faster than the warm shape", _hysteresis_percent),
    ("gang start-up charged", r"paying (\d+) s per new gang start-up", _gang_start),
    ("placement timeout", r"`NESTOR_PLACEMENT_TIMEOUT_S` \((\d+) s\)", _placement_timeout),
    ("doctor's Ray probe", r"does\s+not let it in within (\d+) s", _ray_probe),
    ("visibility retry", r"a blind node retries for\s+(\d+) s", _settle),
    ("visibility answer", r"does\s+not answer within (\d+) s fails the check", _answer),
    ("store copy interval", r"`RUNDIR/mlflow\.db` every (\d+) s", _store_copy),
    ("spec size cap", r"bombs, at most (\d+) MiB\)", _spec_mib),
    ("PB2 exploration weight", r"Its exploration weight is (\d+)", _pb2_weight),
]


@pytest.mark.parametrize(("what", "pattern", "code"), CASES, ids=[c[0] for c in CASES])
def test_the_readme_states_the_codes_setting(what: str, pattern: str,
                                             code: Callable[[], float]) -> None:
    found = re.search(pattern, README)
    assert found, f"README.md no longer says {what!r} as /{pattern}/"
    assert float(found.group(1)) == code(), (what, found.group(0), code())


def test_auto_picks_lq_cmaes_where_the_readme_says() -> None:
    """README: `algorithm: auto` picks lq-cmaes "for 2 to 30 numbers at up to 4 trials at
    once"; just outside either bound it picks something else."""
    from nestor.search import choose_search
    from nestor.search.space import FloatParam, SearchSpace

    assert re.search(r"picks it for\s+2 to 30 numbers at up to 4 trials at once", README)

    def label(dims: int, parallel: int) -> str:
        space = SearchSpace(tuple(FloatParam(f"c{i}", -1.0, 1.0) for i in range(dims)))
        return choose_search(space, [("f", "min")], budget=130, parallel=parallel).label()

    assert {label(d, p) for d, p in ((2, 1), (2, 4), (30, 1), (30, 4))} == {"bayesian lq-cmaes"}
    assert "lq-cmaes" not in label(31, 4) and "lq-cmaes" not in label(30, 5)


def test_pbt_perturbs_by_the_readmes_factors() -> None:
    from nestor.search._pbt import PBTSettings

    assert "perturbs (×0.8, ×1.2)" in README
    assert tuple(PBTSettings().perturbation_factors) == (0.8, 1.2)
