"""Where a run's own servers listen: on the address the ranks are told, never on all.

Horovod's rendezvous store (an HTTP key-value store in the driver, one per gang,
without authentication) bound every address (``('', port)``), so any machine
that could route to the driver's could read and write a gang's rendezvous. Here
it binds the address the ranks are told to reach it at: 127.0.0.1 when every
rank of the gang is on the driver's node (a local cluster), else the driver
node's cluster address. The ranks of a torch gang that sits on one node meet
through a file store in a folder only its user can enter, not a TCP store
(torch's TCPStore listens on every address and takes no bind address). A local
Ray cluster keeps its sessions in such a folder too, and Ray's token file is
made its user's alone. What stays open and why: README, "Security model".
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path
from typing import Any

LOCAL_NODE_ADDRESS = "127.0.0.1"


def private_dir(name: str) -> Path:
    """``<tmp>/<name>-<uid>``, made 0700 if missing, refused if another user owns it
    or others may enter it (where a shared /tmp lets anyone make it first)."""
    place = Path(tempfile.gettempdir()) / f"{name}-{os.getuid()}"
    place.mkdir(mode=0o700, exist_ok=True)
    info = place.lstat()
    if info.st_uid != os.getuid() or not place.is_dir() or place.is_symlink():
        raise PermissionError(f"{place} is not this user's own folder; remove it or set TMPDIR")
    if info.st_mode & 0o077:
        place.chmod(0o700)
    return place


def private_token() -> None:
    """Ray's token file (``~/.ray/auth_token``, which Ray writes 0644): its user's alone."""
    token = Path.home() / ".ray" / "auth_token"
    with contextlib.suppress(OSError):
        if token.is_file() and token.stat().st_uid == os.getuid():
            token.chmod(0o600)


def establish_rendezvous(coordinator: Any, node_ids: list[str]) -> dict[str, str]:
    """``horovod.ray.Coordinator.establish_rendezvous``, with its HTTP store bound to
    the address the ranks are given (Horovod's binds every address): the loopback
    where all the ranks (on ``node_ids``) are on the driver's node."""
    import ray
    from horovod.runner.common.util import hosts
    from horovod.runner.http.http_server import (
        RendezvousHandler,
        RendezvousHTTPServer,
        RendezvousServer,
    )
    from horovod.runner.util.threads import in_thread

    here = ray.get_runtime_context().get_node_id()
    local = all(node == here for node in node_ids)
    address = LOCAL_NODE_ADDRESS if local else ray.util.get_node_ip_address()

    class BoundRendezvous(RendezvousServer):  # type: ignore[misc]
        def start(self, handler_cls: Any = RendezvousHandler) -> int:
            self._httpd = RendezvousHTTPServer((address, 0), handler_cls, self._verbose)
            self._listen_thread = in_thread(target=self._httpd.serve_forever)
            return int(self._httpd.server_address[1])

    coordinator.rendezvous = BoundRendezvous(coordinator.settings.verbose)
    plan = hosts.get_host_assignments(hosts.parse_hosts(hosts_string=coordinator.node_id_string),
                                      coordinator.world_size)
    coordinator.global_rendezv_port = coordinator.rendezvous.start()
    coordinator.rendezvous.init(plan)
    return {"HOROVOD_GLOO_RENDEZVOUS_ADDR": address,
            "HOROVOD_GLOO_RENDEZVOUS_PORT": str(coordinator.global_rendezv_port),
            "HOROVOD_CONTROLLER": "gloo", "HOROVOD_CPU_OPERATIONS": "gloo"}
