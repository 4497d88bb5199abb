"""Which filesystem a path is on, read from the kernel's mount table.

SQLite's file locks cannot be trusted on a network filesystem (NFS, Lustre, GPFS,
BeeGFS, CephFS, ...: Lustre mounted without ``flock`` refuses them with "disk I/O
error", NFS may lose them), so the tracker keeps a run directory's store on local
disk there (``local_store``). ``NESTOR_MLFLOW_LOCAL_STORE`` (``always``/``never``)
overrides the detection.
"""

from __future__ import annotations

import os
from pathlib import Path

MOUNTS = Path("/proc/mounts")


# Filesystems on which SQLite's locking is unreliable or refused (kernel and FUSE names).
NETWORK_FILESYSTEMS = frozenset({
    "nfs", "nfs4", "lustre", "gpfs", "beegfs", "cifs", "smb3", "smbfs", "ceph", "fuse.ceph",
    "fuse.cephfs", "glusterfs", "fuse.glusterfs", "fuse.sshfs", "panfs", "pvfs2", "orangefs",
    "afs", "wekafs", "fuse.weka", "ocfs2", "gfs2", "fuse.gcsfuse", "fuse.s3fs", "9p",
})


def _unescape_mount(field: str) -> str:
    """/proc/mounts writes space, tab, newline and backslash as octal escapes."""
    for code, char in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"),
                       ("\\134", "\\")):
        field = field.replace(code, char)
    return field


def filesystem_type(path: Path, mounts: str | None = None) -> str:
    """The type of the filesystem ``path`` is on: the longest mount point in
    ``mounts`` (``/proc/mounts``' text; read when None) that contains it."""
    if mounts is None:
        try:
            mounts = MOUNTS.read_text()
        except OSError:
            return "unknown"
    target = Path(os.path.realpath(path))
    best, kind = -1, "unknown"
    for line in mounts.splitlines():
        fields = line.split()
        if len(fields) < 3:
            continue
        point = Path(_unescape_mount(fields[1]))
        if (target == point or point in target.parents) and len(point.parts) > best:
            best, kind = len(point.parts), fields[2]  # a later mount over the same point wins
    return kind


def on_network_filesystem(path: Path, mounts: str | None = None) -> bool:
    """Whether SQLite should not keep a store at ``path`` (see the module's docstring)."""
    override = os.environ.get("NESTOR_MLFLOW_LOCAL_STORE", "auto").lower()
    if override in {"always", "1", "yes"}:
        return True
    if override in {"never", "0", "no"}:
        return False
    return filesystem_type(path, mounts) in NETWORK_FILESYSTEMS
