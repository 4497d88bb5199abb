"""nestor: nested hyperparameter optimization and workflow orchestration for deep learning.

The code lives in three packages, kept as top-level folders of the repository
and installed under this one namespace, so that a user's own module called
``search``, ``trainers`` or ``orchestrator`` (beside their training script, or
on their path) never shadows nestor's, nor nestor's theirs:

- :mod:`nestor.orchestrator`: the CLI, workflow specs, the engine, the journal,
  its projections (MLflow, results, plots) and the execution backends;
- :mod:`nestor.search`: the search algorithms, pure ask/tell logic;
- :mod:`nestor.trainers`: the built-in trainers and the contract user trainers meet.

Importing ``nestor`` (or ``nestor.search`` on a Ray worker) stays light: nothing
here imports Ray, MLflow or torch.
"""

from nestor.orchestrator import __version__

__all__ = ["__version__"]
