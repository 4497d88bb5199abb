"""Which nodes can hold a model-parallel group: the check a gang's placement makes
first, so that an mp no node can hold fails at once instead of after the
placement timeout. (The real multi-node placement is tested in
tests/reliability/test_gang_placement.py.)"""

from __future__ import annotations

from typing import Any

import pytest

from orchestrator.gangs import GroupTooBig, Shape, check_groups_fit, group_bundle


def node(name: str, alive: bool = True, **resources: float) -> dict[str, Any]:
    return {"NodeID": name * 8, "Alive": alive, "Resources": resources}


def test_one_bundle_holds_a_whole_model_parallel_group() -> None:
    assert group_bundle(Shape(data=3, model=2)) == {"CPU": 2.0}
    assert group_bundle(Shape(data=3, model=2), use_gpu=True) == {"CPU": 2.0, "GPU": 2.0}


def test_a_group_that_fits_one_node_passes_even_if_the_others_are_small() -> None:
    check_groups_fit(Shape(2, 4), nodes=[node("a", CPU=2), node("b", CPU=4)])
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
