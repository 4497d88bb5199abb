"""Where a run directory's MLflow store and its artifacts are.

A run directory's own store records artifacts as ``mlflow-artifacts:/`` URIs, which
name a place relative to the run directory's ``mlartifacts/``, wherever the run
directory has been moved or copied: nothing in the store needs rewriting.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

STORE_FILE = "mlflow.db"  # a run directory's own MLflow store, unless the spec names one
ARTIFACTS_DIR = "mlartifacts"  # beside it, where that store keeps artifacts
ARTIFACTS_ROOT = "mlflow-artifacts:/"  # that store's artifact locations: relative to it


def artifact_location(run_dir: Path, uri: str) -> str:
    """Where the artifacts MLflow records at ``uri`` are on this machine.

    The run directory's own store records its artifacts as ``mlflow-artifacts:/``
    URIs (``ARTIFACTS_ROOT``), which name a place relative to an artifact root,
    not a path: the root is the run directory's ``mlartifacts/`` wherever the run
    directory now is (``nestor ui`` gives it to ``mlflow server`` as
    ``--artifacts-destination``; nestor writes there itself). A run directory moved
    or copied (scratch to project storage, the cluster to a laptop) keeps showing
    its artifacts, with nothing in the store rewritten. Other URIs are returned
    as they are."""
    if not uri.startswith(ARTIFACTS_ROOT):
        return uri
    place = uri[len(ARTIFACTS_ROOT):].lstrip("/")
    return (Path(run_dir).resolve() / ARTIFACTS_DIR / place).as_uri()


def list_artifacts(client: Any, run_dir: Path, run_id: str,
                   folder: str | None = None) -> list[Any]:
    """The artifacts of ``run_id`` under ``folder`` (MLflow's FileInfo), read where they
    are on this machine: MLflow's client alone cannot follow an ``mlflow-artifacts:/``
    location without a server (``nestor ui`` is one), so this reads the run directory's
    ``mlartifacts/`` for its own store, through MLflow's artifact repository."""
    from mlflow.store.artifact.artifact_repository_registry import get_artifact_repository

    uri = client.get_run(run_id).info.artifact_uri
    if not uri.startswith(ARTIFACTS_ROOT):
        return client.list_artifacts(run_id, folder)
    return get_artifact_repository(artifact_location(run_dir, uri)).list_artifacts(folder)
