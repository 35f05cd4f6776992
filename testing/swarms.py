"""Real nodes in one trio process, real daemons as CLI processes.

    async with open_test_swarm(3) as nodes:         # in-process, loopback, real libp2p hosts
        await connect_all(nodes)                     # star or mesh wiring
        ...
    with cli_daemons(3, tmp_path) as daemons:        # separate processes through the CLI
        daemons[1].status()["peers"]

Both are what a user would run, minus the process boundary for the first. The pytest
plugin (peertrain.testing.plugin) wraps them as fixtures.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import trio
from peertrain.node.api.serve import serve_node
from peertrain.node.cli.processes import DaemonProcess, node_args, stop_all
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


@contextlib.contextmanager
def cli_daemons(
    n: int, base: Path, *, extra: Sequence[str] = (), env: dict[str, str] | None = None
) -> Iterator[list[DaemonProcess]]:
    """N `peertrain node start` processes; daemon i>0 bootstraps from daemon 0 by multiaddr."""
    daemons: list[DaemonProcess] = []
    try:
        first: dict[str, Any] | None = None
        for index in range(n):
            bootstrap = [first["share"]] if first else []
            daemon = DaemonProcess(
                Path(base) / f"node{index}", node_args(bootstrap=bootstrap, extra=extra), env
            )
            daemons.append(daemon.start())
            status = daemon.wait_ready()
            first = first or status
        yield daemons
    finally:
        stop_all(daemons)
