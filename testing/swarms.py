"""Real nodes in one trio process: the daemons a user runs, minus the process boundary.

    async with open_test_swarm(3) as nodes:          # loopback, real libp2p hosts, node i > 0
        ...                                           # bootstrapped from node 0

One process keeps a many-node test fast and lets it reach into each daemon's state; the CLI's
own path (argument parsing, control socket, process lifetime) is processes.py's. The pytest
plugin wraps it as the `test_swarm` fixture.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import trio
from peertrain.node.api.serve import serve_node
from peertrain.node.config import NodeConfig
from peertrain.node.daemon import Daemon
from peertrain.node.net.identity import Identity


@contextlib.asynccontextmanager
async def open_test_swarm(
    n: int,
    *,
    psk: str | None = None,
    bootstrap_first: bool = True,
    base: Path | None = None,
    first: Mapping[str, Any] | None = None,
) -> AsyncIterator[list[Daemon]]:
    """N in-process daemons listening on 127.0.0.1; node i>0 bootstraps from node 0 if asked.
    `first`: more NodeConfig fields for node 0 alone (e.g. its `metrics_listen`)."""
    with tempfile.TemporaryDirectory(prefix="peertrain-test-", dir=base) as tmp:
        async with trio.open_nursery() as nursery:
            nodes: list[Daemon] = []
            for index in range(n):
                bootstrap = (nodes[0].addrs()[0],) if bootstrap_first and nodes else ()
                config = NodeConfig(
                    home=Path(tmp) / f"n{index}",
                    listen=("/ip4/127.0.0.1/tcp/0",),
                    bootstrap=bootstrap,
                    psk=psk,
                    reconnect_interval=0.2,
                    **(dict(first or {}) if index == 0 else {}),
                )
                nodes.append(await nursery.start(serve_node, Daemon(config, Identity.generate())))
            try:
                yield nodes
            finally:
                nursery.cancel_scope.cancel()


def free_tcp_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on right now (for listeners given as HOST:PORT, like metrics)."""
    import socket

    with socket.socket() as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])
