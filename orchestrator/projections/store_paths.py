"""Where a run directory's MLflow store and its artifacts are.

A run directory's own store records artifacts as ``mlflow-artifacts:/`` URIs, which
name a place relative to the run directory's ``mlartifacts/``, wherever the run
directory has been moved or copied: nothing in the store needs rewriting.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from nestor.orchestrator.journal.safe import within

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


def copy_artifact(run_dir: Path, uri: str, path: Path, folder: str | None) -> None:
    """Copy the file ``path`` into the own store's artifacts of the run whose artifact
    URI is ``uri`` (an ``mlflow-artifacts:/`` one), under ``folder``, as MLflow's local
    repository does (a hidden temporary file beside the target, its times and mode
    copied, then renamed over it) but without its per-file path resolving, which cost
    a sweep of command trials about a millisecond a log file in the driver.

    What it guards stays guarded: ``folder`` must be relative and stay below the run's
    artifacts (MLflow's own check), and the folder written into must resolve inside
    the run directory's ``mlartifacts/``, so a link planted there is not followed out."""
    from mlflow.exceptions import MlflowException
    from mlflow.store.artifact.artifact_repo import verify_artifact_path

    if not uri.startswith(ARTIFACTS_ROOT):
        raise ValueError(f"{uri} is not an artifact location of the run directory's own store")
    verify_artifact_path(folder)
    root = Path(run_dir) / ARTIFACTS_DIR
    where = os.path.normpath(os.path.join(root, uri[len(ARTIFACTS_ROOT):].lstrip("/"),
                                          folder or ""))
    for made in (False, True):  # before any folder is made through a link, and after
        if within(root, where) is None:
            raise MlflowException(f"artifact folder {where} resolves outside {root}:"
                                  " not written")
        if not made:
            os.makedirs(where, exist_ok=True)
    handle, staged = tempfile.mkstemp(prefix=".", dir=where)
    try:
        with os.fdopen(handle, "wb") as out, open(path, "rb") as source:
            shutil.copyfileobj(source, out)
        shutil.copystat(path, staged)
        os.replace(staged, os.path.join(where, os.path.basename(path)))
    except BaseException:
        Path(staged).unlink(missing_ok=True)
        raise
