"""Text shared by every layer: an exception worded for a journal reason or a log.

It lives in the bottom layer so that the projections (a log line on a failed
MLflow write) and the Ray backend (a trial's failure reason) word an error the
same way without either importing the other.
"""

from __future__ import annotations


def first_line(exc: BaseException) -> str:
    """An exception in one line, for a journal reason or a log (its type if it is silent)."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
