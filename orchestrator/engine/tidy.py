"""A stage's empty trial folders, removed once when the stage ends.

Every trial gets a checkpoint folder and an artifact folder before its code runs
(``RUN/checkpoints/STAGE/TRIAL``, ``RUN/artifacts/STAGE/TRIAL``), so user code may
just write into them. Most trials of a sweep leave them empty, and the run
directory keeps no empty folder. They are removed here, all at once when the stage
is done, not by each rank as its trial ends: on a file system without a journal
(ext4 as many nodes' local scratch is made), the inode allocator passes over every
inode deleted in the last minutes before it takes one, so a removal per trial made
each later file a sweep creates slower, about 1 ms a file after a few thousand
trials; on Lustre or GPFS each removal is a round trip to the metadata server.

The run directory is data (orchestrator.journal.safe): the stage's folder must
resolve inside it, only its direct sub-folders are looked at, links are never
followed, and ``rmdir`` removes nothing that holds a file.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from nestor.orchestrator.journal.safe import check_id, within

CHECKPOINTS = "checkpoints"  # RUN/checkpoints/STAGE/TRIAL/: a trial's checkpoint folder
ARTIFACTS = "artifacts"  # RUN/artifacts/STAGE/TRIAL/: a trial's artifact folder


def remove_empty_trial_folders(run_dir: str | os.PathLike[str], stage: str) -> int:
    """Remove the stage's trial folders that hold nothing; how many were removed."""
    removed = 0
    for top in (CHECKPOINTS, ARTIFACTS):
        folder = within(run_dir, Path(top) / check_id(stage, "stage name"))
        if folder is None:
            continue
        try:
            fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        except OSError:  # not there (no trial made one), or not a folder
            continue
        try:
            with os.scandir(fd) as entries:
                names = [e.name for e in entries if e.is_dir(follow_symlinks=False)]
            for name in names:
                with contextlib.suppress(OSError):  # not empty (kept), or gone
                    os.rmdir(name, dir_fd=fd)
                    removed += 1
        finally:
            os.close(fd)
    return removed
