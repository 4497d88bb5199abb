"""Print requirements.lock without the packages that an overlay lock pins instead.

scripts/setup.sh installs torch from an overlay (requirements-cuda.lock, or
requirements-torchX.Y.lock for an older torch) whose pins replace the base lock's
lines of the same packages: torch itself and whatever that torch pins differently
(setuptools below 82 for 2.11, sympy 1.13.1 for 2.6). Giving pip both lines would
be a conflict, so the base lock's are left out.

    python scripts/lock_overlay.py requirements.lock requirements-torch2.11.lock
"""

from __future__ import annotations

import re
import sys
from pathlib import Path


def package(line: str) -> str:
    """The normalised package name a requirement line pins ('' for none)."""
    line = line.strip()
    if not line or line.startswith(("#", "-")):
        return ""
    return re.split(r"[\[=<>!~ ;]", line, maxsplit=1)[0].lower().replace("_", "-")


def without_overlay(base: str, overlay: str) -> list[str]:
    """The base lock's lines, less those pinning a package the overlay pins."""
    replaced = {package(line) for line in overlay.splitlines()} - {""}
    return [line for line in base.splitlines() if package(line) not in replaced]


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: lock_overlay.py BASE_LOCK OVERLAY_LOCK", file=sys.stderr)
        return 2
    base, overlay = (Path(path).read_text() for path in argv)
    print("\n".join(without_overlay(base, overlay)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
