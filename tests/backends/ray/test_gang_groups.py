"""Model-parallel groups and nodes, without Ray: which nodes can hold a group (the
check a gang's placement makes first, so that an mp no node can hold fails at
once instead of after the placement timeout), and the pool's admission, which
counts whole groups per node rather than free slots. (The real multi-node
placement is tested in tests/reliability/test_gang_placement.py.)"""

from __future__ import annotations

from typing import Any

import pytest

from nestor.orchestrator.backends.ray.gangs import (
    GangPool,
    GroupTooBig,
    Shape,
    check_groups_fit,
    group_bundle,
    place_groups,
)


def node(name: str, alive: bool = True, **resources: float) -> dict[str, Any]:
    return {"NodeID": name * 8, "Alive": alive, "Resources": resources}


def test_one_bundle_holds_a_whole_model_parallel_group() -> None:
    assert group_bundle(Shape(data=3, model=2)) == {"CPU": 2.0}
    assert group_bundle(Shape(data=3, model=2), use_gpu=True) == {"CPU": 2.0, "GPU": 2.0}


def test_a_group_that_fits_one_node_passes_even_if_the_others_are_small() -> None:
    check_groups_fit(Shape(1, 4), nodes=[node("a", CPU=2), node("b", CPU=4)])
    check_groups_fit(Shape(2, 4), nodes=[node("a", CPU=2), node("b", CPU=8)])
    check_groups_fit(Shape(1, 1), nodes=[node("h", CPU=0), node("a", CPU=1)])


def test_a_group_bigger_than_every_node_names_mp_and_the_largest_node() -> None:
    nodes = [node("h", CPU=0), node("a", CPU=3), node("b", CPU=2), node("d", False, CPU=8)]
    with pytest.raises(GroupTooBig, match=r"mp=4 needs a node with 4 CPUs, but the largest"
                                          r" node \(aaaaaaaa\) has 3 CPUs"):
        check_groups_fit(Shape(2, 4), nodes=nodes)  # the dead 8-CPU node does not count


def test_on_gpus_a_node_needs_the_group_s_gpus_and_cpus() -> None:
    nodes = [node("a", CPU=16, GPU=2), node("b", CPU=1, GPU=8)]
    check_groups_fit(Shape(1, 2), use_gpu=True, nodes=nodes)
    with pytest.raises(GroupTooBig, match=r"mp=4 .* largest node \(bbbbbbbb\) has 1 CPUs, 8 GPUs"):
        check_groups_fit(Shape(1, 4), use_gpu=True, nodes=nodes)


def test_no_live_node_is_said_plainly() -> None:
    with pytest.raises(GroupTooBig, match="the cluster has no live node"):
        check_groups_fit(Shape(1, 1), nodes=[node("a", False, CPU=4)])


@pytest.mark.parametrize(("free", "shape", "left"), [
    ([3, 3, 4], Shape(2, 2), [1, 1, 4]),  # best-fit: the fullest nodes that hold a group
    ([4, 4], Shape(2, 2), [0, 4]),  # two groups on one node: PACK fills a node first
    ([1, 1, 1, 1], Shape(2, 2), None),  # 4 free slots, but no node holds a 2-rank group
    ([3, 3], Shape(1, 4), None),
])
def test_place_groups_puts_each_group_whole_on_one_node(
        free: list[int], shape: Shape, left: list[int] | None) -> None:
    assert place_groups(free, shape) == left


class Placed:
    """A started gang's executor as the pool sees it: where its ranks are."""

    def __init__(self, node_ids: list[str]) -> None:
        self.node_ids = node_ids

    def shutdown(self) -> None:
        pass


def pool_on(nodes: dict[str, int], placements: list[list[str]]) -> GangPool:
    """A pool on nodes of these sizes whose gangs start where ``placements`` say."""
    where = iter(placements)
    pool = GangPool(slots=sum(nodes.values()), executor_factory=lambda shape: Placed(next(where)))
    pool._node_slots = lambda: nodes  # type: ignore[method-assign]
    return pool


def test_a_gang_whose_groups_no_node_has_room_for_does_not_fit_though_slots_are_free() -> None:
    """12 slots on 4 nodes of 3: two 2 x 2 gangs take a 2-rank group on every node,
    so a third does not fit (it would wait out the placement timeout), while 4
    of the 12 slots are free; a one-rank trial still fits, and a warm gang is
    reused as soon as one is idle."""
    pool = pool_on({"a": 3, "b": 3, "c": 3, "d": 3}, [["a", "a", "b", "b"], ["c", "c", "d", "d"],
                                                      ["a"]])
    first, _ = pool.acquire(Shape(2, 2)), pool.acquire(Shape(2, 2))
    assert pool.busy_slots == 8 and pool.slots == 12
    assert not pool.fits(Shape(2, 2)) and not pool.fits(Shape(1, 2))
    assert pool.fits(Shape(1, 1)) and pool.fits(Shape(4, 1))
    pool.release(first)
    assert pool.fits(Shape(2, 2))
    assert pool.acquire(Shape(2, 2)) is first


def test_an_idle_gang_is_evicted_when_its_node_is_what_a_group_needs() -> None:
    """By count the new 1 x 3 gang has room (8 of 12 slots used), but no node has
    3 free: the oldest idle gang goes, and only it."""
    pool = pool_on({"a": 3, "b": 3, "c": 3, "d": 3},
                   [["a", "a"], ["b", "b"], ["c", "c", "d", "d"]])
    old, newer = pool.acquire(Shape(1, 2)), pool.acquire(Shape(1, 2))
    busy = pool.acquire(Shape(2, 2))
    pool.release(old)
    pool.release(newer)
    assert pool.fits(Shape(1, 3))
    gang, evicted = pool.reserve(Shape(1, 3))
    assert evicted == [old] and newer in pool.gangs and busy in pool.gangs
    assert gang.executor is None  # booked; started off the loop


def test_a_gang_whose_groups_the_nodes_could_never_hold_together_is_said_plainly() -> None:
    nodes = [node("a", CPU=3), node("b", CPU=3), node("c", CPU=1)]
    check_groups_fit(Shape(2, 2), nodes=nodes)
    with pytest.raises(GroupTooBig, match=r"a 3x2 gang needs 3 model-parallel groups of 2 CPUs,"
                                          r" each on one node, but the 3 live nodes hold at"
                                          r" most 2 such groups"):
        check_groups_fit(Shape(3, 2), nodes=nodes)


def test_a_gang_that_could_never_be_placed_is_let_through_to_fail_with_the_reason() -> None:
    """Admission waits for room that will come; for room that never will it would
    wait forever, so the start is let through and fails at once, saying why."""
    pool = pool_on({"a": 3, "b": 3}, [])
    assert pool.fits(Shape(1, 4)) and pool.fits(Shape(3, 2))
