"""nestor: nested hyperparameter optimization and workflow orchestration for deep learning.

The code lives in three packages, kept as top-level folders of the repository
and installed under this one namespace, so that a user's own module called
``search``, ``trainers`` or ``orchestrator`` (beside their training script, or
on their path) never shadows nestor's, nor nestor's theirs:

- :mod:`nestor.orchestrator`: the CLI, workflow specs, the engine, the journal,
  its projections (MLflow, results, plots) and the execution backends;
- :mod:`nestor.search`: the search algorithms, pure ask/tell logic;
- :mod:`nestor.trainers`: the built-in trainers and the contract user trainers meet.

The Python API is here: ``nestor.tune``, ``nestor.run``, ``nestor.resume``, their
``Result`` and the one exception type ``NestorError``
(:mod:`nestor.orchestrator.api`). They load on first use, so importing ``nestor``
(or ``nestor.search`` on a Ray worker) stays light: nothing imports Ray, MLflow or
torch until a run starts.
"""

from __future__ import annotations

from typing import Any

from nestor.orchestrator import __version__

API = ("NestorError", "Result", "resume", "run", "tune")
__all__ = ["__version__", *API]


def __getattr__(name: str) -> Any:
    if name in API:
        from nestor.orchestrator import api

        return getattr(api, name)
    raise AttributeError(f"module 'nestor' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *API})
