"""A real, size-limited tmpfs for a test: a full or read-only disk as the kernel gives it
(ENOSPC, EROFS), not a mock. Needs root (as CI runs); a test is skipped without it."""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest


@contextlib.contextmanager
def tmpfs(mount: Path, size: str) -> Iterator[Path]:
    """``mount`` (made here) holding a tmpfs of ``size`` (``4m``) until the block ends."""
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount)],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)
