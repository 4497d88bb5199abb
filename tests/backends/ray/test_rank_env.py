"""The ranks' environment from the site: NCCL_*, GLOO_SOCKET_IFNAME, UCX_* and FI_*
set where nestor starts reach every rank of both kinds of gang, on a Ray started
without them (as a cluster the driver joins with --address is); a site's
NCCL_SOCKET_IFNAME wins over Horovod's interface detection; a stage's
``trial.env`` adds more per trial; `nestor doctor` prints what ranks receive."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import ray.cloudpickle

from nestor.orchestrator.backends.ray.gangs import GangPool, Shape, site_env
from nestor.orchestrator.spec import load_spec
from nestor.trainers import TrainerRef, TrialRequest, run_trial
from nestor.trainers.comm import backend_names

pytestmark = pytest.mark.slow
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])

SITE = {"NCCL_DEBUG": "INFO", "GLOO_SOCKET_IFNAME": "lo", "NCCL_SOCKET_IFNAME": "site0",
        "UCX_TLS": "rc,sm", "FI_PROVIDER": "efa"}


def rank_view() -> dict[str, str | None]:
    return {name: os.environ.get(name) for name in SITE}


@pytest.mark.parametrize("backend", backend_names())  # every registered backend
def test_each_rank_of_a_gang_holds_the_drivers_site_settings(
        ray_local: object, monkeypatch: pytest.MonkeyPatch, backend: str) -> None:
    # Set after Ray started: its workers never inherited them, only the gang can hand
    # them on (as on a cluster started elsewhere).
    for name, value in SITE.items():
        monkeypatch.setenv(name, value)
    assert ray.get(ray.remote(rank_view).remote()) == dict.fromkeys(SITE)  # not inherited
    with GangPool(slots=2, rendezvous_timeout_s=60) as pool:
        gang = pool.acquire(Shape(data=2, backend=backend))
        gang.submit(rank_view)
        views = gang.collect(timeout_s=120)
        pool.release(gang)
    # NCCL_SOCKET_IFNAME too: the site's, not the interface Horovod detected
    assert views == [SITE, SITE]


def test_site_env_takes_only_the_sites_network_settings() -> None:
    env = {**SITE, "HOME": "/home/x", "NCCLX": "no", "HOROVOD_RANK": "3"}
    assert site_env(env) == SITE


def test_trial_env_from_the_spec_reaches_the_trial_and_is_put_back(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = tmp_path / "env.yaml"
    spec.write_text("""
name: env
stages:
  - name: tune
    kind: hpo
    trainer: {name: mlp, settings: {dataset: digits}}
    trial: {env: {NCCL_DEBUG: WARN, NCCL_IB_DISABLE: 1, NCCL_P2P_DISABLE: true}}
    search: {algorithm: random, budget: 1}
    space: {lr: {type: float, low: 0.01, high: 0.1}}
""")
    env = load_spec(spec).stage("tune").trial.env_vars()
    assert env == {"NCCL_DEBUG": "WARN", "NCCL_IB_DISABLE": "1", "NCCL_P2P_DISABLE": "1"}
    monkeypatch.setenv("NCCL_DEBUG", "INFO")
    script = tmp_path / "show.py"
    script.write_text("import os\nprint('FoM:', os.environ['NCCL_IB_DISABLE'],"
                      " len(os.environ['NCCL_DEBUG']), sep='')\n")
    result = run_trial(TrialRequest("c", TrainerRef.command(f"python3 {script}",
                                                            result_pattern=r"FoM:(\S+)"),
                                    env=env))
    assert result.ok, result.reason
    assert result.metrics["result"] == 14.0  # NCCL_IB_DISABLE 1, len("WARN") 4
    assert os.environ["NCCL_DEBUG"] == "INFO" and "NCCL_IB_DISABLE" not in os.environ


def test_doctor_prints_what_the_ranks_will_receive() -> None:
    env = dict(os.environ, NCCL_DEBUG="INFO", GLOO_SOCKET_IFNAME="ib0")
    done = subprocess.run([sys.executable, "-m", "nestor.orchestrator.commands.cli", "doctor",
                           "--no-ray"],
                          capture_output=True, text=True, env=env, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    line = "".join(done.stdout.split("ranks receive", 1)[1].split())  # the row, unwrapped
    assert "NCCL_DEBUG=INFO" in line and "GLOO_SOCKET_IFNAME=ib0" in line
    assert "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS=300" in line
