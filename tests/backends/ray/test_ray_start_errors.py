"""Ray failing to start or to be joined is one clear line (exit 2), not Ray's
traceback: on a loaded machine Ray's node can time out during start-up (seen by
several sessions here). (Joining an --address with no cluster behind it is not
tried here: Ray retries the connection for minutes before it gives up.)"""

from __future__ import annotations

import pytest

from nestor.orchestrator.backends import ClusterError
from nestor.orchestrator.backends.ray.cluster import ray_started


def test_ray_timing_out_at_start_becomes_one_cluster_error_line() -> None:
    with pytest.raises(ClusterError) as caught, ray_started("a local Ray for this run"):
        raise Exception("The current node timed out during startup. This could happen"
                        " because some of the Ray processes failed to start.\nmore text")
    said = str(caught.value)
    assert said.startswith("could not start or join a local Ray for this run: The current node")
    assert "more text" not in said and "try again" in said


def test_a_bug_of_another_kind_is_not_dressed_up_as_a_cluster_error() -> None:
    with pytest.raises(KeyError), ray_started("a local Ray for this run"):
        raise KeyError("not Ray's start")
