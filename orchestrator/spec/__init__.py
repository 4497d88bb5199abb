"""Read a workflow spec from YAML into typed, checked objects.

>>> workflow = load_spec("configs/quickstart.yaml")   # doctest: +SKIP
>>> [stage.name for stage in workflow.stages]          # doctest: +SKIP

Anything wrong with the file raises SpecError listing every problem found,
each with file, line, field path, what was found and what is allowed.
"""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import ValidationError

from ._yaml import MAX_FILE_BYTES, TOO_LARGE, YamlProblem, load_yaml
from .checks import check_imports, check_workflow
from .errors import Problem, SpecError, kind_of, locate
from .model import (
    DISCRIMINATORS,
    EnsembleStage,
    HpoStage,
    Stage,
    Trainer,
    TrainStage,
    TransferStage,
    Workflow,
    concurrent_trials,
    default_slots,
)

__all__ = [
    "EnsembleStage",
    "HpoStage",
    "Problem",
    "SpecError",
    "Stage",
    "TrainStage",
    "Trainer",
    "TransferStage",
    "Workflow",
    "concurrent_trials",
    "default_slots",
    "load_spec",
    "load_spec_text",
]


def load_spec(path: str | os.PathLike[str], *, imports: bool = True) -> Workflow:
    """Load and check the workflow spec at ``path``.

    With ``imports`` (the default) each ``module:function`` trainer must also be
    importable by this Python, so `nestor validate` and `nestor run` report a
    typo before any trial starts (nothing of the module is executed).
    """
    name = str(path)
    try:
        with open(path, "rb") as handle:
            raw = handle.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        problem = Problem(name, None, "", f"cannot read the file: {exc.strerror}")
        raise SpecError([problem]) from None
    if len(raw) > MAX_FILE_BYTES:
        raise SpecError([Problem(name, None, "", TOO_LARGE)])
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SpecError(
            [Problem(name, None, "", f"the file is not UTF-8 text (byte {exc.start})")]
        ) from None
    return load_spec_text(text, name, imports=imports)


def load_spec_text(text: str, file: str = "<spec>", *, imports: bool = False) -> Workflow:
    """Load and check a spec given as text; ``file`` names it in errors.

    ``imports`` also checks that ``module:function`` trainers can be imported
    here (off by default: a spec held in memory may be meant for elsewhere).
    """
    try:
        data = load_yaml(text)
    except YamlProblem as exc:
        raise SpecError([Problem(file, exc.mark, "", exc.message)]) from None
    if not isinstance(data, dict):
        found = "an empty file" if data is None else kind_of(data)
        raise SpecError(
            [Problem(file, getattr(data, "mark", None), "",
                     f"a workflow spec must be a mapping with name: and stages:, but got {found}")]
        )
    # Top-level keys starting with "x-" hold YAML anchors for reuse (as in
    # docker-compose files); they are not part of the workflow.
    for key in [k for k in data if isinstance(k, str) and k.startswith("x-")]:
        del data[key]
    try:
        workflow = Workflow.model_validate(data)
    except ValidationError as exc:
        from .errors import problems_from_validation

        raise SpecError(problems_from_validation(file, data, Workflow, exc,
                                                 DISCRIMINATORS)) from None
    findings = check_workflow(workflow)
    if imports and not findings:
        findings = check_imports(workflow)
    if findings:
        problems = []
        for loc, message in findings:
            mark, path = locate(data, loc)
            problems.append(Problem(file, mark, path, message))
        raise SpecError(problems)
    return workflow


def spec_files(paths: list[Path]) -> list[Path]:
    """Expand directories to the YAML files in them, sorted."""
    files: list[Path] = []
    for path in paths:
        if path.is_dir():
            files.extend(sorted([*path.glob("*.yaml"), *path.glob("*.yml")]))
        else:
            files.append(path)
    return files
