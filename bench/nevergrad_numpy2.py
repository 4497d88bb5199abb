"""nevergrad under NumPy 2: the one fix both benches that run NGOpt need
(bench/many_at_once_bench.py, bench/auto_heldout_bench.py). Without it NGOpt raises
``TypeError: only 0-dimensional arrays can be converted to Python scalars`` once its
MetaModel starts (checked with nevergrad 1.0.12 and NumPy 2.4.6)."""

from __future__ import annotations

from typing import Any


def patch_nevergrad_for_numpy2() -> None:
    """nevergrad 1.0.12's MetaModel (which NGOpt picks for these budgets) scores its
    surrogate with ``float(model.predict(x[None, :]))`` (optimization/metamodel.py,
    line 177): ``predict`` returns a 1-element 1-D array, and NumPy 2 made float() of
    an array with ndim > 0 an error ("only 0-dimensional arrays can be converted to
    Python scalars"; deprecated since NumPy 1.25). That module's ``float`` is shadowed
    by one that takes the single element, so NGOpt runs as published."""
    import builtins

    import numpy as np
    from nevergrad.optimization import metamodel

    def scalar(value: Any) -> float:
        return builtins.float(np.asarray(value).reshape(-1)[0]) if np.ndim(value) else (
            builtins.float(value))

    metamodel.float = scalar  # type: ignore[attr-defined]
