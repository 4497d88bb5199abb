"""The one place a run's backend is made: a Ray cluster's, or a simulated one.

``nestor run``/``resume`` (and every bench that runs a spec for real) get a
:class:`~orchestrator.backends.RayBackend` on a Ray cluster started for the run or
joined (``address``); a simulation gets a
:class:`~orchestrator.backends.SimulatedBackend` of the size and trial model asked
for. Either is then handed to ``orchestrator.engine.workflow.run_workflow``, the
only run path: the engine never knows which it has.

>>> backend = make_backend(workflow, run_dir, slots=4)                     # doctest: +SKIP
>>> backend = make_backend(workflow, run_dir, simulated=dict(
...     nodes=256, slots_per_node=8, trial_model=lognormal_trials(600.0)))   # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from nestor.orchestrator.backends.interface import Backend


def make_backend(workflow: Any, run_dir: Path, *, slots: int | None = None,
                 address: str | None = None,
                 simulated: Mapping[str, Any] | None = None) -> Backend:
    """The backend ``workflow`` runs on.

    ``simulated``: the :class:`~orchestrator.backends.SimulatedBackend`'s arguments
    (nodes, slots_per_node, trial_model, ...), to play the run on a virtual cluster;
    else a Ray cluster: started here (``slots``, else the spec's, else this machine's
    CPUs) or joined at ``address``. ``workflow`` is the loaded spec (read for its
    resources and its stages' backends)."""
    if simulated is not None:
        from nestor.orchestrator.backends.simulated.backend import SimulatedBackend

        return SimulatedBackend(**simulated)
    from nestor.orchestrator.backends.ray.cluster import start_backend

    return start_backend(workflow, Path(run_dir), slots=slots, address=address)
