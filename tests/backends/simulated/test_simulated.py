"""The real scheduler on a simulated cluster: the same StageScheduler and
TrialRunner code that drives Ray, on a virtual clock, in milliseconds.

Each sweep below is checked from the journal the scheduler wrote (what it
decided and what it heard) and from the simulator's ledger (what the slots
actually did), so a test fails if either side gets it wrong.
"""

from __future__ import annotations

import json
import random
import textwrap
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from nestor.orchestrator.backends import (
    Draw,
    Launch,
    SimulatedBackend,
    SimulationError,
    Started,
    fixed_trials,
    lognormal_trials,
)
from nestor.orchestrator.backends.ray.gangs import Shape, place
from nestor.orchestrator.backends.stopping import Interrupted
from nestor.orchestrator.engine.workflow import RunError, StageScheduler, run_workflow
from nestor.orchestrator.journal.journal import Journal, read_events
from nestor.orchestrator.spec import load_spec_text
from nestor.orchestrator.spec.model import EnsembleStage


def spec(*, data: int = 2, model: int = 1, population: int = 4, generations: int = 3,
         schedule: str = "generational", retries: int = 1, timeout: float | None = None,
         extra: str = "") -> Any:
    trial = f"{{retries: {retries}" + (f", timeout: {timeout}}}" if timeout else "}")
    return load_spec_text(textwrap.dedent(f"""
        name: sim
        stages:
          - name: tune
            kind: hpo
            trainer: {{function: "nestor.orchestrator.simulate:simulated_trial", predictions: true}}
            parallel: {{data: {data}, model: {model}}}
            search: {{algorithm: genetic, population: {population}, generations: {generations},
                      schedule: {schedule}, seed: 1}}
            space:
              x: {{type: float, low: 0, high: 1}}
              y: {{type: float, low: 0, high: 1}}
            objective: {{metric: val_accuracy, mode: max}}
            trial: {trial}
        """) + textwrap.indent(textwrap.dedent(extra), "  "))


def finished(run_dir: Path) -> dict[str, dict[str, Any]]:
    return {e["trial"]["id"]: e for e in read_events(run_dir / "journal.jsonl")
            if e["event"] == "trial_finished"}


def journal(run_dir: Path, kind: str) -> list[dict[str, Any]]:
    return [e for e in read_events(run_dir / "journal.jsonl") if e["event"] == kind]


# -- placement ------------------------------------------------------------------------------


def test_placement_keeps_every_model_parallel_group_on_one_node() -> None:
    rng = random.Random(7)
    for _ in range(2000):
        free = [rng.randint(0, 8) for _ in range(rng.randint(1, 12))]
        shape = Shape(rng.randint(1, 6), rng.choice([1, 2, 3, 4, 8]))
        where = place(free, shape)
        groups_that_fit = sum(f // shape.model for f in free)
        if where is None:
            assert groups_that_fit < shape.data, (free, shape)
            continue
        assert sum(count for _, count in where) == shape.ranks
        assert len({node for node, _ in where}) == len(where)
        for node, count in where:
            assert count % shape.model == 0, (free, shape, where)  # whole groups only
            assert count <= free[node]


def test_placement_packs_onto_the_fullest_nodes_first() -> None:
    # Best fit: the two 2-slot groups go where 2 and 4 slots are free, leaving the
    # empty node whole for a wide group.
    assert place([8, 2, 4], Shape(data=2, model=2)) == [(1, 2), (2, 2)]


# -- sweeps on the real scheduler -------------------------------------------------------------


def test_a_small_sweep_finishes_with_every_trial_journalled(tmp_path: Path) -> None:
    backend = SimulatedBackend(nodes=2, slots_per_node=4, seed=3,
                               trial_model=lognormal_trials(600.0, sigma=0.5))
    results = run_workflow(spec(population=4, generations=3), backend, tmp_path / "run")
    done = finished(tmp_path / "run")
    assert len(done) == 12 and {e["status"] for e in done.values()} == {"completed"}
    started = {e["trial"]["id"] for e in journal(tmp_path / "run", "trial_started")}
    assert started == set(done)
    stage = results["stages"][0]
    assert stage["n_trials"] == stage["n_runs"] == 12
    assert all(isinstance(t["value"], float) for t in stage["trials"])
    # What the scheduler counted as busy is what the simulated slots did.
    ledger = sum((a.ended - a.started) * a.ranks for a in backend.attempts if a.started is not None)
    assert stage["slot_seconds"] == pytest.approx(ledger, abs=0.01)
    # Warm gangs: 4 slots per 2-rank trial... 4 gangs at most, reused after that.
    assert backend.gangs_started <= 4 and backend.gangs_reused >= 8
    assert journal(tmp_path / "run", "workflow_finished")


def test_the_virtual_clock_runs_ten_hours_of_trials(tmp_path: Path) -> None:
    # How fast in real time is bench/'s to say (a wall-clock bound here flakes on a
    # loaded machine); here: the clock is virtual, so the hours pass all the same.
    backend = SimulatedBackend(nodes=2, slots_per_node=4, seed=0,
                               trial_model=fixed_trials(3600.0, lambda c: c["x"]))
    results = run_workflow(spec(population=4, generations=10), backend, tmp_path / "run")
    # Ten generations of one-hour trials behind a barrier each: at least ten hours.
    assert results["virtual_time_s"] >= 10 * 3600
    assert len(finished(tmp_path / "run")) == 40


def test_an_injected_rank_failure_is_retried_on_a_new_gang(tmp_path: Path) -> None:
    backend = SimulatedBackend(nodes=2, slots_per_node=4, seed=1,
                               trial_model=fixed_trials(600.0, 0.5),
                               fail_keys={"tune/3#1": 0.5})
    run_workflow(spec(), backend, tmp_path / "run")
    failed = [e for e in journal(tmp_path / "run", "trial_attempt_failed")]
    assert [(e["trial"]["id"], e["attempt"]) for e in failed] == [("3", 1)]
    assert "simulated rank failure" in failed[0]["reason"]
    assert failed[0]["slot_seconds"] == pytest.approx(300.0 * 2)  # half its 600 s, 2 ranks
    done = finished(tmp_path / "run")
    assert done["3"]["status"] == "completed" and done["3"]["attempt"] == 2
    gangs = {(e["trial"]["id"], e["attempt"]): e["gang"]
             for e in journal(tmp_path / "run", "trial_started")}
    broken = gangs[("3", 1)]
    assert gangs[("3", 2)] != broken
    assert broken not in [g for (t, a), g in gangs.items() if (t, a) != ("3", 1)]


def test_a_lost_node_retries_its_trials_on_the_other_nodes_and_loses_nothing(
        tmp_path: Path) -> None:
    # 4 nodes x 8; trials of 4 x 2 ranks, all of the first generation running when
    # node 1 goes at t = 100 s, for 2 hours.
    backend = SimulatedBackend(nodes=4, slots_per_node=8, seed=2,
                               trial_model=fixed_trials(600.0, lambda c: c["x"]),
                               node_failures=[(100.0, 1)], repair_s=7200.0)
    run_workflow(spec(data=4, model=2, population=4, generations=3, retries=1),
                      backend, tmp_path / "run")
    lost = [a for a in backend.attempts if a.outcome == "node_lost"]
    assert lost and all(1 in a.nodes for a in lost)
    failed = journal(tmp_path / "run", "trial_attempt_failed")
    assert sorted(e["trial"]["id"] for e in failed) == sorted(
        a.key.split("/")[1].split("#")[0] for a in lost)
    assert all("node 1" in e["reason"] for e in failed)
    # Nothing lost: every planned trial completed, once.
    done = finished(tmp_path / "run")
    assert len(done) == 12 and {e["status"] for e in done.values()} == {"completed"}
    # While node 1 was out, nothing ran on it; it came back after its repair.
    (outage,) = backend.outages
    assert (outage.node, outage.start, outage.end) == (1, 100.0, 7300.0)
    during = [a for a in backend.attempts if outage.start <= a.launched < outage.end]
    assert during and all(1 not in a.nodes for a in during)


def test_the_scheduler_waits_for_a_repaired_node_when_nothing_else_fits(
        tmp_path: Path) -> None:
    # One trial needs both nodes (2 groups of 8). Node 0 fails under it: nothing runs
    # and nothing fits until the node is back. The scheduler must wait on the
    # backend's clock, not sleep in real time while virtual time stands still.
    backend = SimulatedBackend(nodes=2, slots_per_node=8, seed=0,
                               trial_model=fixed_trials(600.0, 0.5),
                               node_failures=[(300.0, 0)], repair_s=3600.0)
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["results"] = run_workflow(
                spec(data=2, model=8, population=2, generations=1), backend, tmp_path / "run")
        except Exception as exc:  # reported below
            outcome["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(60)
    assert not thread.is_alive(), "the scheduler never saw the node come back"
    assert "error" not in outcome, outcome.get("error")
    done = finished(tmp_path / "run")
    assert {e["status"] for e in done.values()} == {"completed"} and len(done) == 2
    retried = [a for a in backend.attempts if a.key.endswith("#2")]
    assert retried and min(a.launched for a in retried) >= 300.0 + 3600.0


def test_model_parallel_groups_never_straddle_nodes_in_a_sweep(tmp_path: Path) -> None:
    # Groups of 3 on nodes of 8: a node holds two groups and 2 slots no group can use.
    backend = SimulatedBackend(nodes=5, slots_per_node=8, seed=4,
                               trial_model=lognormal_trials(600.0, sigma=1.0),
                               rank_failure_p=0.1)
    run_workflow(spec(data=3, model=3, population=6, generations=3, retries=3,
                           schedule="async"), backend, tmp_path / "run")
    placed = [a for a in backend.attempts if a.where]
    assert placed
    for attempt in placed:
        assert sum(count for _, count in attempt.where) == 9
        assert all(count % 3 == 0 for _, count in attempt.where), attempt
    # 5 nodes x 2 groups = 10 groups: three 3-group gangs at once, never four.
    assert max_concurrent(backend) == 3


def max_concurrent(backend: SimulatedBackend) -> int:
    points = sorted([(a.launched, 1) for a in backend.attempts if a.where]
                    + [(a.ended, -1) for a in backend.attempts if a.where])
    busy = peak = 0
    for _, step in points:
        busy += step
        peak = max(peak, busy)
    return peak


def comparable(run_dir: Path) -> list[tuple[Any, ...]]:
    """The journal without what differs between two runs by nature (wall time, pid,
    the run directory in the paths of checkpoints)."""
    keep = []
    for e in read_events(run_dir / "journal.jsonl"):
        body = {k: v for k, v in e.items() if k not in ("time", "pid", "run_key", "run_id")}
        if "summary" in body:  # its wall time is the driver's, in real seconds
            body["summary"] = {k: v for k, v in body["summary"].items() if k != "wall_time_s"}
        keep.append(json.dumps(body, sort_keys=True).replace(str(run_dir.resolve()), "RUN"))
    return keep


def test_the_same_seed_gives_the_same_run_and_another_seed_another(tmp_path: Path) -> None:
    def run(seed: int, name: str) -> tuple[list[Any], list[Any]]:
        backend = SimulatedBackend(nodes=4, slots_per_node=8, seed=seed,
                                   trial_model=lognormal_trials(600.0, sigma=1.0),
                                   rank_failure_p=0.1, node_mtbf_s=20_000.0, repair_s=3600.0)
        run_workflow(spec(data=2, model=2, population=8, generations=3, retries=3,
                               schedule="async"), backend, tmp_path / name)
        ledger = [(a.key, a.gang, a.launched, a.started, a.ended, a.outcome, a.where)
                  for a in backend.attempts]
        return comparable(tmp_path / name), ledger

    first, again, other = run(5, "a"), run(5, "b"), run(6, "c")
    assert first == again
    assert first[1] != other[1]
    assert any(a[5] == "node_lost" for a in first[1]) or any(
        a[5] == "rank_failed" for a in first[1])


def test_a_trial_past_its_timeout_is_cancelled_on_the_virtual_clock(tmp_path: Path) -> None:
    def model(config: Any, rng: random.Random) -> Draw:
        return Draw(5000.0 if config["x"] > 0.5 else 100.0, {"val_accuracy": config["y"]})

    backend = SimulatedBackend(nodes=2, slots_per_node=4, seed=0, trial_model=model,
                               startup_s=10.0)
    run_workflow(spec(timeout=1000, retries=1), backend, tmp_path / "run")
    done = finished(tmp_path / "run")
    slow = [e for e in done.values() if e["trial"]["config"]["x"] > 0.5]
    assert slow and all(e["status"] == "failed" and e["reason"] == "timeout after 1000 s"
                        for e in slow)
    assert all(e["slot_seconds"] == pytest.approx(1000.0 * 2) for e in slow)
    assert all(e["status"] == "completed" for e in done.values() if e not in slow)
    assert {a.outcome for a in backend.attempts} >= {"cancelled", "ok"}


def test_two_shapes_share_the_cluster_and_evict_each_others_idle_gangs(tmp_path: Path) -> None:
    second = """
      - name: wide
        kind: hpo
        trainer: {function: "nestor.orchestrator.simulate:simulated_trial"}
        parallel: {data: 2, model: 4}
        search: {algorithm: random, budget: 6, seed: 2}
        space: {x: {type: float, low: 0, high: 1}}
    """
    backend = SimulatedBackend(nodes=2, slots_per_node=8, seed=0,
                               trial_model=lognormal_trials(600.0, sigma=1.0))
    results = run_workflow(spec(data=2, model=1, population=4, generations=3,
                                     extra=second), backend, tmp_path / "run")
    assert [s["n_trials"] for s in results["stages"]] == [12, 6]
    assert backend.gangs_evicted > 0
    shapes = Counter(e["shape"] for e in journal(tmp_path / "run", "trial_started"))
    assert shapes == {"2x1": 12, "2x4": 6}


def test_a_train_stage_runs_on_the_best_configuration(tmp_path: Path) -> None:
    final = """
      - name: final
        kind: train
        from: [tune]
    """
    backend = SimulatedBackend(nodes=2, slots_per_node=4, seed=0,
                               trial_model=fixed_trials(60.0, lambda c: c["x"]))
    results = run_workflow(spec(extra=final), backend, tmp_path / "run")
    tune, train = results["stages"]
    assert train["train"]["config"] == tune["best"]["config"]


@pytest.mark.parametrize("stage, words", [
    ({"name": "members", "kind": "ensemble", "from": ["tune"]},
     ["'members'", "ensemble", "hpo and train"]),
])
def test_stage_kinds_the_simulation_cannot_run_are_refused(tmp_path: Path, stage: dict,
                                                            words: list[str]) -> None:
    # Added past the spec's checks, which refuse an ensemble of a function trainer
    # itself: the simulation must refuse the kind whatever the trainer.
    workflow = spec()
    workflow = workflow.model_copy(update={"stages": [
        *workflow.stages, EnsembleStage.model_validate(stage)]})
    backend = SimulatedBackend(nodes=1, slots_per_node=4, trial_model=fixed_trials(1.0))
    with pytest.raises(RunError) as caught:
        run_workflow(workflow, backend, tmp_path / "run")
    assert all(word in str(caught.value) for word in words), caught.value
    assert not (tmp_path / "run" / "journal.jsonl").exists()


def test_early_stopping_is_refused(tmp_path: Path) -> None:
    workflow = spec()
    workflow.stages[0] = workflow.stages[0].model_copy(
        update={"early_stopping": {"rule": "median"}})
    backend = SimulatedBackend(nodes=1, slots_per_node=4, trial_model=fixed_trials(1.0))
    with pytest.raises(RunError, match="early_stopping"):
        run_workflow(workflow, backend, tmp_path / "run")


def test_the_allocation_time_limit_stops_the_driver_resumably(tmp_path: Path) -> None:
    from nestor.orchestrator.backends.stopping import Interrupted, stop_requested

    backend = SimulatedBackend(nodes=2, slots_per_node=4, seed=0,
                               trial_model=fixed_trials(3600.0, 0.5), time_limit_s=5000.0)
    with pytest.raises(Interrupted, match="SIGTERM"):
        run_workflow(spec(population=4, generations=3), backend, tmp_path / "run")
    assert backend.now() == 5000.0
    assert stop_requested() is None  # withdrawn: the next run in this process goes on
    assert len(finished(tmp_path / "run")) == 4  # the first generation, done at 1 h + start-up
    cut = journal(tmp_path / "run", "trial_interrupted")
    assert len(cut) == 4 and journal(tmp_path / "run", "workflow_interrupted")
    assert {a.outcome for a in backend.attempts if a.ended == 5000.0} == {"cancelled"}


# -- the backend alone ------------------------------------------------------------------------


class _Request:
    """The two fields of a TrialRequest the simulator reads."""

    def __init__(self) -> None:
        self.trial_id = "t"
        self.config: dict[str, Any] = {}


def test_wait_with_nothing_running_is_an_error_not_a_hang() -> None:
    backend = SimulatedBackend(nodes=1, slots_per_node=2, trial_model=fixed_trials(1.0),
                               node_mtbf_s=100.0)
    with pytest.raises(SimulationError, match="block forever"):
        backend.wait(None)
    assert backend.wait(50.0) == [] and backend.now() == 50.0


def test_a_warm_gang_starts_at_once_and_a_new_one_pays_its_startup() -> None:
    backend = SimulatedBackend(nodes=1, slots_per_node=2, trial_model=fixed_trials(100.0),
                               startup_s=30.0)
    backend.launch(Launch("a#1", Shape(2), _Request()))
    (started,) = backend.wait(None)
    assert isinstance(started, Started) and (started.at, started.startup_s) == (30.0, 30.0)
    assert not backend.fits(Shape(2)) and backend.busy_slots == 2
    (ended,) = backend.wait(None)
    assert ended.at == 130.0 and ended.result.ok and ended.result.metrics["val_accuracy"] == 0.5
    assert backend.fits(Shape(2))
    backend.launch(Launch("b#1", Shape(2), _Request()))
    (started,) = backend.wait(None)
    assert (started.at, started.startup_s, started.gang) == (130.0, 0.0, 1)


def test_cancel_ends_an_attempt_at_once_and_frees_its_slots() -> None:
    backend = SimulatedBackend(nodes=1, slots_per_node=2, trial_model=fixed_trials(100.0))
    backend.launch(Launch("a#1", Shape(2), _Request()))
    backend.wait(None)
    backend.cancel("a#1")
    (ended,) = backend.wait(0.0)
    assert ended.failure == "cancelled" and ended.started and ended.result is None
    assert backend.busy_slots == 0 and backend.fits(Shape(2))
    with pytest.raises(SimulationError):
        backend.wait(None)  # its end event must not come later


def test_the_nodes_kept_by_free_slots_place_gangs_as_gangs_place_does() -> None:
    """The simulated cluster places a new gang from its nodes kept by free slots (no
    sort of 4,096 nodes per gang); through launches, ends, cancels, evictions and node
    failures it places every gang where gangs.place on the free slots would."""
    rng = random.Random(3)
    shapes = [Shape(d, m) for d, m in ((1, 1), (2, 1), (3, 2), (1, 4), (4, 4), (2, 8),
                                        (5, 3), (16, 1))]
    backend = SimulatedBackend(nodes=24, slots_per_node=8, trial_model=lognormal_trials(60.0),
                               seed=2, node_mtbf_s=2000.0, repair_s=300.0,
                               rank_failure_p=0.1)
    checked = 0
    for step in range(600):
        for shape in shapes:
            assert backend._place(shape) == place(backend._free, shape), (step, shape)
            checked += 1
        if rng.random() < 0.6:
            shape = rng.choice(shapes)
            if backend.fits(shape):
                backend.launch(Launch(f"t{step}#1", shape, _Request()))
        elif rng.random() < 0.2 and backend._running:
            backend.cancel(rng.choice(sorted(backend._running)))
        else:
            backend.wait(rng.uniform(0.0, 120.0))
    assert checked == 600 * len(shapes) and backend.node_failures and backend.gangs_evicted


def test_constructor_errors_say_what_was_wrong() -> None:
    with pytest.raises(ValueError, match="nodes must be a positive integer, but got 0"):
        SimulatedBackend(nodes=0, slots_per_node=8, trial_model=fixed_trials(1.0))
    with pytest.raises(ValueError, match=r"node must be in 0\.\.1, but got 5"):
        SimulatedBackend(nodes=2, slots_per_node=8, trial_model=fixed_trials(1.0),
                         node_failures=[(1.0, 5)])


# -- one scenario, both backends ----------------------------------------------------------------

CONTRACT = """
name: contract
stages:
  - name: tune
    kind: hpo
    trainer: {function: "tests.backends.simulated.sim_contract_trainer:quadratic"}
    search: {algorithm: grid}
    space: {x: {type: categorical, values: [0.1, 0.5, 0.9, 0.3]}}
    objective: {metric: val_accuracy, mode: max}
    trial: {retries: 1}
"""


def contract_outcome(run_dir: Path) -> dict[str, Any]:
    """What must not depend on the backend: each trial's config, fate and value, and
    the order of its journal events."""
    out: dict[str, Any] = {}
    for e in read_events(run_dir / "journal.jsonl"):
        if e["event"] in ("trial_started", "trial_attempt_failed", "trial_finished"):
            row = out.setdefault(e["trial"]["id"], {"config": e["trial"]["config"],
                                                    "events": []})
            row["events"].append((e["event"], e["attempt"]))
            if e["event"] == "trial_finished":
                value = e["value"]
                row.update(status=e["status"],
                           value=None if value is None else round(value, 9))
    return out


@pytest.mark.slow
def test_the_same_scenario_gives_the_same_sweep_on_ray_and_in_simulation(
        tmp_path: Path, ray_local: object) -> None:
    from nestor.orchestrator.backends import RayBackend
    from nestor.orchestrator.backends.ray.gangs import GangPool
    from tests.backends.simulated import sim_contract_trainer as trainer

    def model(config: Any, rng: random.Random) -> Draw:
        if float(config["x"]) > trainer.FAILING_X:
            return Draw(1.0, failure="x above 0.8 fails on purpose")
        return Draw(1.0, {"val_accuracy": trainer.value(config)})

    workflow = load_spec_text(CONTRACT)
    simulated = SimulatedBackend(nodes=1, slots_per_node=2, trial_model=model, seed=0)
    sim_results = run_workflow(workflow, simulated, tmp_path / "sim")
    ray_results = run_workflow(workflow, RayBackend(GangPool(2)), tmp_path / "ray")
    sim, ray = contract_outcome(tmp_path / "sim"), contract_outcome(tmp_path / "ray")
    assert ray == sim
    assert {t["status"] for t in sim.values()} == {"completed", "failed"}
    assert [t["n_runs"] for t in (sim_results["stages"][0], ray_results["stages"][0])] == [5, 5]
    assert sim_results["stages"][0]["best"]["config"] == {"x": 0.3}


# -- searches whose trials carry on from others' ----------------------------------------


def resume_on_new_driver(workflow, run_dir: Path) -> None:
    """Finish ``run_dir``'s run with a new driver on a new simulated cluster (8 slots),
    from its journal, as ``nestor resume`` does."""
    again = SimulatedBackend(2, 4, lognormal_trials(60.0, 0.3), seed=2)
    log = Journal(run_dir / "journal.jsonl")
    try:
        StageScheduler(workflow, run_dir=run_dir, backend=again, journal=log,
                       events=read_events(run_dir / "journal.jsonl"), on_progress=None).run()
    finally:
        log.close()
        again.shutdown()


def kill_and_resume_population(
    run_dir: Path, spec_text: str, *, time_limit_s: float, trials: int
) -> dict[str, dict]:
    """Run a population search on 8 simulated slots until the allocation ends,
    resume it with a new driver from the journal, and check that it finishes
    with each trial run once and every continuation after its source; returns
    the finished trials (PBT and PB2 share this)."""
    workflow = load_spec_text(spec_text)
    first = SimulatedBackend(2, 4, lognormal_trials(60.0, 0.3), seed=1, time_limit_s=time_limit_s)
    with pytest.raises(Interrupted):
        run_workflow(workflow, first, run_dir)
    before = len(finished(run_dir))
    assert 0 < before < trials
    resume_on_new_driver(workflow, run_dir)
    done = finished(run_dir)
    assert len(done) == trials and all(e["status"] == "completed" for e in done.values())
    ended = [e["trial"]["id"] for e in journal(run_dir, "trial_finished")]
    assert len(ended) == len(set(ended)), "a finished trial ran again"
    for event in done.values():
        source = event["trial"].get("continue_from")
        if source is not None:
            assert done[source]["seq"] < event["seq"]
    return done


def pbt_spec(extra: str = "") -> str:
    """A PBT stage of 4 members over 5 intervals on simulated trials; ``extra``
    is one more line of the stage (e.g. ``keep_checkpoints: 1``)."""
    return textwrap.dedent(f"""
        name: pbt
        stages:
          - name: tune
            kind: hpo
            trainer: {{function: "nestor.orchestrator.simulate:simulated_trial", checkpoints: true}}
            search: {{algorithm: pbt, population: 4, interval: 1, intervals: 5,
                     quantile: 0.5, seed: 3}}
            {extra}
            space:
              x: {{type: float, low: 0, high: 1}}
              y: {{type: float, low: 0, high: 1}}
        """)


def test_a_pbt_population_killed_midway_resumes_and_runs_no_trial_twice(tmp_path: Path) -> None:
    """Population-based training: the allocation ends mid-way, a new driver
    resumes from the journal, and the population finishes with each interval
    trained once, every exploit continuing a trial that finished."""
    done = kill_and_resume_population(tmp_path / "run", pbt_spec(), time_limit_s=150.0, trials=20)
    assert any(e["trial"].get("origin") == "exploit" for e in done.values())


def test_keep_checkpoints_lets_go_of_what_no_trial_will_continue_across_a_kill(
    tmp_path: Path,
) -> None:
    """PBT under keep_checkpoints: 1, its driver killed mid-way: the population still
    finishes with every exploit finding its donor's checkpoint (a missing one fails
    the trial), none removed before the last trial that continues from it started,
    and at the end only the best model is left."""
    run_dir = tmp_path / "run"
    done = kill_and_resume_population(run_dir, pbt_spec("keep_checkpoints: 1"),
                                      time_limit_s=150.0, trials=20)
    removals = journal(run_dir, "checkpoint_removed")
    removed = {e["trial"]: e["seq"] for e in removals}
    assert len(removed) == len(removals) >= 12, "a checkpoint was removed twice, or few were"
    for started in journal(run_dir, "trial_started"):
        source = started["trial"].get("continue_from")
        if source in removed:
            assert started["seq"] < removed[source], f"{source} removed before it was used"
    kept = set(done) - set(removed)
    # Done, nothing more can continue anything: only the best (of the last interval) stays.
    assert len(kept) == 1 and {done[t]["trial"]["generation"] for t in kept} == {4}


def test_an_lq_cmaes_search_killed_midway_resumes_and_runs_no_trial_twice(
    tmp_path: Path,
) -> None:
    """lq-CMA-ES through the engine: its steps (as many trials as slots are free,
    then a wait for the model) survive a driver that dies mid-generation; the
    resumed driver replays the journalled asks and tells and finishes the budget."""
    spec_text = textwrap.dedent("""
        name: lq
        stages:
          - name: tune
            kind: hpo
            trainer: {function: "nestor.orchestrator.simulate:simulated_trial"}
            search: {algorithm: bayesian, sampler: lq-cmaes, budget: 40, seed: 3}
            space:
              x: {type: float, low: 0, high: 1}
              y: {type: float, low: 0, high: 1}
        """)
    done = kill_and_resume_population(tmp_path / "run", spec_text, time_limit_s=150.0, trials=40)
    assert {e["trial"]["origin"] for e in done.values()} == {"lq-cmaes"}


def test_a_genetic_search_killed_midway_resumes_from_its_snapshot_as_from_its_whole_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A genetic search's driver dies mid-way with a snapshot of the search's
    internals on disk: the driver resumed from it schedules exactly what one resumed
    by replaying the whole journalled log schedules (the same trials, in the same
    order, with the same configs), and runs no finished trial again."""
    import shutil

    from nestor.orchestrator.engine import search_log

    monkeypatch.setattr(search_log, "SNAPSHOT_EVERY", 4)
    monkeypatch.setattr(search_log, "SNAPSHOT_BYTES_PER_ENTRY", 10**9)
    covered: list[int] = []
    restore = search_log.SearchLog.restore
    monkeypatch.setattr(search_log.SearchLog, "restore", lambda self, mine: (
        restore(self, mine), covered.append(self.snapshot_at))[0])
    workflow = load_spec_text(textwrap.dedent("""
        name: ga
        stages:
          - name: tune
            kind: hpo
            trainer: {function: "nestor.orchestrator.simulate:simulated_trial"}
            search: {algorithm: genetic, population: 6, generations: 6, seed: 3}
            space:
              x: {type: float, low: 0, high: 1}
              y: {type: float, low: 0, high: 1}
        """))
    killed = tmp_path / "snapshot"
    first = SimulatedBackend(2, 4, lognormal_trials(60.0, 0.3), seed=1, time_limit_s=150.0)
    with pytest.raises(Interrupted):
        run_workflow(workflow, first, killed)
    assert 0 < len(finished(killed)) < 36
    snapshot_covers = json.loads((killed / "searcher" / "tune.json").read_text())[
        "snapshot"]["covers"]
    assert snapshot_covers > 0
    replayed = tmp_path / "replayed"
    shutil.copytree(killed, replayed)
    (replayed / "searcher" / "tune.json").unlink()
    for run_dir in (killed, replayed):
        resume_on_new_driver(workflow, run_dir)
    assert covered == [0, snapshot_covers, 0]  # a fresh start, then each resume's
    started = [[(e["trial"]["id"], e["trial"]["config"], e["attempt"])
                for e in journal(run_dir, "trial_started")] for run_dir in (killed, replayed)]
    assert started[0] == started[1]
    done = [{t: {k: v for k, v in e.items() if k not in ("time", "checkpoint")}
             for t, e in finished(r).items()}
            for r in (killed, replayed)]  # the same but when and in which run directory
    assert len(done[0]) == 36 and done[0] == done[1]
    ended = [e["trial"]["id"] for e in journal(killed, "trial_finished")]
    assert len(ended) == len(set(ended)), "a finished trial ran again"
