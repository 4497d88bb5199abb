"""Names that changed, so that one thing has one name across `nestor sweep`'s flags,
the spec's keys and the Python API (issue 39). An old spelling keeps working as a
deprecated alias: it is read as the new one, and a one-line notice on stderr names
the new one (once a process, so a spec loaded several times says it once)."""

from __future__ import annotations

import sys
from typing import Any

from nestor.search import renamed_settings

# A search's old key names are declared by its searcher class (``renamed_settings``:
# a genetic search's ``mode`` read like the objective's direction, ``objective.mode``,
# `--mode`; it says how a generation replaces the last, now ``replacement``).

_said: set[tuple[str, str]] = set()


def notice(old: str, new: str) -> None:
    """Say once a process that ``old`` is deprecated and ``new`` is its name now."""
    if (old, new) in _said:
        return
    _said.add((old, new))
    print(f"nestor: {old} is deprecated; use {new} (same meaning)", file=sys.stderr,
          flush=True)


def renamed_search_keys(block: Any) -> Any:
    """A ``search:`` block with its algorithm's old key names replaced by the new ones
    (with the notice); both spellings at once is left to the model to refuse."""
    if not isinstance(block, dict):
        return block
    renames = renamed_settings(str(block.get("algorithm")))
    if not any(old in block for old in renames):
        return block
    out = {}
    for key, value in block.items():
        new = renames.get(key)
        if new is not None and new not in block:
            notice(f"search.{key} (algorithm {block['algorithm']})", f"search.{new}")
            key = new
        out[key] = value
    return out
