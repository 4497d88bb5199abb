"""Warm Horovod gangs on a real local Ray, with real ranks over Gloo."""

from __future__ import annotations

import os
import signal
import sys
import time

import pytest
import ray.cloudpickle

from nestor.orchestrator.backends.ray.gangs import GangFailure, GangPool, GangTimeout, Shape

pytestmark = pytest.mark.slow

# Ray's workers cannot import test modules; send these functions by value.
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])


def allreduce_rank(offset: float) -> tuple[int, int, float, int]:
    import horovod.torch as hvd
    import torch

    hvd.init()
    total = hvd.allreduce(torch.tensor([hvd.rank() + offset]), op=hvd.Sum).item()
    return hvd.rank(), hvd.size(), total, os.getpid()


def die_on_rank_one() -> int:
    import horovod.torch as hvd

    hvd.init()
    if hvd.rank() == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(30)
    return hvd.rank()


def sleep_long() -> None:
    time.sleep(60)


@pytest.fixture
def pool(ray_local: object):
    with GangPool(slots=2, rendezvous_timeout_s=60) as pool:
        yield pool


def test_a_gang_is_reused_by_the_next_trial_of_its_shape(pool: GangPool) -> None:
    gang = pool.acquire(Shape(data=2))
    gang.submit(allreduce_rank, 1.0)
    first = gang.collect(timeout_s=120)
    pool.release(gang)
    again = pool.acquire(Shape(data=2))
    again.submit(allreduce_rank, 10.0)
    second = again.collect(timeout_s=60)
    pool.release(again)
    assert again is gang and pool.started == 1 and gang.trials_run == 2
    assert [(r, s, t) for r, s, t, _ in first] == [(0, 2, 3.0), (1, 2, 3.0)]
    assert [(r, s, t) for r, s, t, _ in second] == [(0, 2, 21.0), (1, 2, 21.0)]
    assert [p for *_, p in first] == [p for *_, p in second]  # the same processes


def test_slots_are_never_oversubscribed(pool: GangPool) -> None:
    big = pool.acquire(Shape(data=2))
    assert not pool.fits(Shape(data=1))
    with pytest.raises(RuntimeError, match="no room"):
        pool.acquire(Shape(data=1))
    pool.release(big)
    one = pool.acquire(Shape(data=1))  # evicts the idle 2-rank gang to make room
    two = pool.acquire(Shape(data=1))
    assert big not in pool.gangs and pool.used_slots == 2
    assert not pool.fits(Shape(data=1))
    with pytest.raises(ValueError, match="needs 4 slots but the pool has 2"):
        pool.acquire(Shape(data=2, model=2))
    for gang in (one, two):
        gang.submit(allreduce_rank, 0.0)
        assert gang.collect(timeout_s=120)[0][:3] == (0, 1, 0.0)
        pool.release(gang)


def test_a_dead_rank_breaks_the_gang_and_a_fresh_one_replaces_it(pool: GangPool) -> None:
    gang = pool.acquire(Shape(data=2))
    old_pids = gang.pids()
    gang.submit(die_on_rank_one)
    with pytest.raises(GangFailure, match="died"):
        gang.collect(timeout_s=120)
    pool.release(gang)
    assert gang not in pool.gangs
    fresh = pool.acquire(Shape(data=2))
    fresh.submit(allreduce_rank, 1.0)
    results = fresh.collect(timeout_s=120)
    pool.release(fresh)
    assert fresh is not gang
    assert [t for _, _, t, _ in results] == [3.0, 3.0]
    assert not set(old_pids) & {p for *_, p in results}


def test_a_trial_past_its_deadline_kills_the_gang(pool: GangPool) -> None:
    gang = pool.acquire(Shape(data=1))
    pid = gang.pids()[0]
    gang.submit(sleep_long)
    started = time.monotonic()
    with pytest.raises(GangTimeout, match="deadline"):
        gang.collect(timeout_s=1.0)
    assert time.monotonic() - started < 30
    pool.release(gang)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.2)
    else:
        pytest.fail(f"the timed-out rank {pid} is still alive")


@pytest.mark.parametrize(("data", "model"), [(0, 1), (1, -2), (1.5, 1)])
def test_shape_checks_its_sizes(data: object, model: object) -> None:
    with pytest.raises(ValueError, match="must be a positive integer"):
        Shape(data=data, model=model)  # type: ignore[arg-type]


def test_a_gang_ray_cannot_place_is_an_error_that_leaves_nothing_behind(
        ray_local: object) -> None:
    """Another driver's actor holds one of the 2 CPUs this pool counts as its own:
    a 2-rank gang's placement wait times out for real; the pool says so with its
    own error, keeps no gang, and removes the placement group it was waiting for."""
    import ray

    from nestor.orchestrator.backends.ray.gangs import GangStartError

    @ray.remote(num_cpus=1)
    class OtherDriversTrial:
        def ping(self) -> bool:
            return True

    other = OtherDriversTrial.remote()
    ray.get(other.ping.remote())
    with GangPool(slots=2, placement_timeout_s=2) as pool:
        before = set(ray.util.placement_group_table())
        with pytest.raises(GangStartError, match=r"could not start a 2x1 gang: Placement group"):
            pool.acquire(Shape(data=2))
        assert pool.gangs == () and pool.used_slots == 0
        left = {pid: info["state"] for pid, info in ray.util.placement_group_table().items()
                if pid not in before and info["state"] != "REMOVED"}
        assert left == {}
        ray.kill(other)
        deadline = time.monotonic() + 30  # Ray frees what is let go a moment later
        while ray.available_resources().get("CPU", 0) < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
        gang = pool.acquire(Shape(data=2))  # both CPUs are free again for a gang that fits
        gang.submit(allreduce_rank, 1.0)
        assert [r[:3] for r in gang.collect(timeout_s=120)] == [(0, 2, 3.0), (1, 2, 3.0)]


def test_a_gang_bigger_than_the_whole_cluster_fails_at_once(ray_local: object) -> None:
    """Three ranks on a 2-CPU Ray can never be placed: said at once, not after the
    placement timeout, and nothing is left behind."""
    from nestor.orchestrator.backends.ray.gangs import GangStartError

    with GangPool(slots=3, oversubscribe=True, placement_timeout_s=60) as pool:
        began = time.monotonic()
        with pytest.raises(GangStartError, match=r"could not start a 3x1 gang: a 3x1 gang needs"
                                                 r" 3 model-parallel groups .* at most 2"):
            pool.acquire(Shape(data=3))
        assert time.monotonic() - began < 5
        assert pool.gangs == () and pool.used_slots == 0


def test_on_a_shared_cluster_a_pool_counts_the_slots_others_hold(ray_local: object) -> None:
    """Another driver's actor holds a CPU this pool's own count thinks it has: the
    pool says a 2-rank gang does not fit (instead of letting Horovod wait for it
    until the placement timeout); once the CPU is back, it shuts its idle gang
    down to make room even though its own count did not need that."""
    import ray

    @ray.remote(num_cpus=1)
    class OtherDriversTrial:
        def ping(self) -> bool:
            return True

    def wait_for_free_cpus(count: int) -> None:  # Ray frees what is let go a moment later
        deadline = time.monotonic() + 30
        while ray.available_resources().get("CPU", 0) < count and time.monotonic() < deadline:
            time.sleep(0.2)

    wait_for_free_cpus(2)  # earlier tests' gangs are gone
    with GangPool(slots=3, shared=True, placement_timeout_s=5) as pool:
        idle = pool.acquire(Shape(data=1))
        idle.submit(allreduce_rank, 1.0)
        idle.collect(timeout_s=120)
        pool.release(idle)
        other = OtherDriversTrial.remote()
        ray.get(other.ping.remote())
        assert pool.cluster_shortfall(Shape(data=2)) == 1 and not pool.fits(Shape(data=2))
        assert pool.cluster_size() == 2  # short of free slots, not of slots
        assert pool.fits(Shape(data=1))  # the idle gang of that shape is reused
        ray.kill(other)
        wait_for_free_cpus(1)
        assert pool.fits(Shape(data=2))
        gang = pool.acquire(Shape(data=2))
        gang.submit(allreduce_rank, 1.0)
        assert [r[:3] for r in gang.collect(timeout_s=120)] == [(0, 2, 3.0), (1, 2, 3.0)]
        assert idle not in pool.gangs and pool.started == 2
