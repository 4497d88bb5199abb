"""The name a spec written for a simulated cluster gives its trainer.

A simulation runs the one run path, :func:`orchestrator.engine.workflow.run_workflow`,
on a :class:`~orchestrator.backends.SimulatedBackend` (made by
:func:`orchestrator.backends.factory.make_backend` with ``simulated=``): the real
scheduler on a virtual clock, the trials' durations and outcomes drawn from a
model. Its spec still names a trainer; this is the one it names.

>>> backend = SimulatedBackend(nodes=256, slots_per_node=8,             # doctest: +SKIP
...                            trial_model=lognormal_trials(600.0), seed=1)
>>> results = run_workflow(workflow, backend, Path("runs/sim"))        # doctest: +SKIP
>>> results["slot_seconds"], results["virtual_time_s"]                 # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def simulated_trial(config: Mapping[str, Any], ctx: Any) -> dict[str, float]:
    """The function trainer a simulated spec names; a simulation never calls it.

    A spec written for the simulator says ``trainer: {function:
    "orchestrator.simulate:simulated_trial"}``; run for real, it stops at once
    with this message instead of training nothing.
    """
    raise RuntimeError(
        "nestor.orchestrator.simulate:simulated_trial stands in for a trainer in simulated"
        " workflows (run_workflow on a SimulatedBackend); give a real trainer to run"
        " this spec on a cluster"
    )
