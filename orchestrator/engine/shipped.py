"""Function trainers shipped by value: a function given to the Python API that no
worker could import by its name (defined in a script's ``__main__`` or a notebook)
is pickled by value (cloudpickle, which Ray has) into the run directory, under
``functions/NAME.pkl``, and sent with every trial's request; `nestor resume` reads
it back from there, so a run started from Python resumes from the command line.

Only a trainer named ``__main__:NAME`` is looked up there: the run directory holds
the user's own code as its spec does (a command or module it names). Unpickling runs
code, so a pickle is read only when the user running nestor owns it and nobody else
may write it (as ssh treats a key): a file another user could have put or changed
there is refused (:class:`UnsafeRunData`), never loaded."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

from nestor.durable import replace_durably
from nestor.orchestrator.journal.safe import UnsafeRunData, check_id

FUNCTIONS_DIR = "functions"
MAIN = "__main__:"


def function_file(run_dir: Path, function: str) -> Path:
    """Where ``__main__:NAME``'s pickled function lies in ``run_dir``."""
    name = check_id(function[len(MAIN):], "function name")
    return run_dir / FUNCTIONS_DIR / f"{name}.pkl"


def save_functions(run_dir: Path, code: dict[str, bytes]) -> None:
    """Keep each ``__main__:NAME`` function's pickled bytes in the run directory (a
    resume from Python replaces them with the function as it is now)."""
    for function, blob in code.items():
        path = function_file(run_dir, function)
        path.parent.mkdir(exist_ok=True)
        replace_durably(path, lambda handle, blob=blob: handle.write(blob))


def register_constraints(run_dir: Path, workflow: Any) -> None:
    """Read each ``__main__:NAME`` constraint of ``workflow``'s searches from the run
    directory (a RuntimeError saying what to do where it lacks one) and register it
    for the driver's searches to call (``orchestrator.spec.shipped_rules``)."""
    import pickle

    from nestor.orchestrator.spec.shipped_rules import register

    for stage in workflow.stages:
        for rule in getattr(getattr(stage, "search", None), "constraints", None) or []:
            name = getattr(rule, "function", None)
            if name is not None and name.startswith(MAIN):
                code = shipped_code(run_dir, name, what="constraint")
                assert code is not None
                register(name, pickle.loads(code))  # the user's own, checked as a trainer's


def shipped_code(run_dir: Path, function: str | None, what: str = "trainer") -> bytes | None:
    """The pickled function a ``__main__:NAME`` trainer runs (None: another trainer);
    a RuntimeError saying what to do when the run directory lacks it."""
    if function is None or not function.startswith(MAIN):
        return None
    path = function_file(run_dir, function)
    if not path.is_file() or path.is_symlink():
        raise RuntimeError(
            f"{what} function {function!r} is defined in a script's __main__ or a notebook:"
            " no worker can import it by that name. Give the function itself to"
            " nestor.tune/nestor.run (it is shipped by value), or name an importable"
            " module ('package.module:function')")
    with open(path, "rb", opener=lambda p, flags: os.open(p, flags | os.O_NOFOLLOW)) as handle:
        found = os.fstat(handle.fileno())
        if found.st_uid != os.getuid() or found.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            raise UnsafeRunData(
                f"{path}: the pickled {what} function is owned by uid {found.st_uid} with"
                f" mode {stat.filemode(found.st_mode)}; nestor loads a pickle (which runs"
                " code) only when it is yours and nobody else may write it. Check who"
                " changed it, then chmod go-w / chown it, or run again from Python")
        return handle.read()
