"""A daemon whose stdout is a file on a full disk serves on: the soak's member whose home (and
output) filled up exited with 1 at every restart, its banner's print raising ENOSPC."""

from __future__ import annotations

import errno
from pathlib import Path

from peertrain.node.cli.runner import print_banner

STATUS = {
    "name": "n",
    "peer_id": "p",
    "share": "/ip4/127.0.0.1/tcp/1/p2p/p",
    "addrs": ["/ip4/127.0.0.1/tcp/1"],
    "private_network": False,
}


class FullDisk:
    def write(self, text: str) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    def flush(self) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")


def test_the_banner_on_a_full_disk_does_not_end_the_daemon(monkeypatch):
    monkeypatch.setattr("sys.stdout", FullDisk())
    print_banner(STATUS, Path("/tmp/control.sock"))  # no OSError
