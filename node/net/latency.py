"""Round-trip times to connected peers: `peer_latency_ms` in status, the dashboard's peer graph.

One /ipfs/ping/1.0.0 round trip (the host serves it already) per connected peer every
`INTERVAL` s, `MAX_PEERS` at most per sweep, each bounded by `TIMEOUT`; an EWMA per peer, dropped
when the peer disconnects, so the table holds connected peers only. A peer that does not answer
has no figure: this is a display, not a health check (the peer keeper and bans decide those).
"""

from __future__ import annotations

import logging
import time

import trio
from libp2p.abc import IHost
from libp2p.host.ping import ID as PING
from libp2p.host.ping import perform_ping_roundtrip
from libp2p.peer.id import ID

log = logging.getLogger(__name__)

INTERVAL = 10.0  # seconds between two pings of one peer
SWEEP = 2.0  # how often new peers are looked for: a fresh connection gets a figure soon
TIMEOUT = 5.0
MAX_PEERS = 32  # pings per sweep
WEIGHT = 0.3  # of the newest round trip in the average


class PeerLatency:
    """`rtt_ms`: peer ID → smoothed round-trip time in milliseconds."""

    def __init__(self, host: IHost) -> None:
        self.host = host
        self.rtt_ms: dict[str, float] = {}
        self._pinged: dict[str, float] = {}  # peer → when last pinged (connected peers only)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        while True:
            await self.sweep()
            await trio.sleep(SWEEP)

    async def sweep(self) -> None:
        """Ping the connected peers whose figure is `INTERVAL` s old or missing."""
        connected = {p.to_base58(): p for p in self.host.get_connected_peers()}
        self.rtt_ms = {p: v for p, v in self.rtt_ms.items() if p in connected}
        self._pinged = {p: t for p, t in self._pinged.items() if p in connected}
        now = time.monotonic()
        due = [p for p in connected if now - self._pinged.get(p, -INTERVAL) >= INTERVAL]
        async with trio.open_nursery() as nursery:
            for peer in sorted(due, key=lambda p: self._pinged.get(p, 0.0))[:MAX_PEERS]:
                self._pinged[peer] = now
                nursery.start_soon(self._ping, peer, connected[peer])

    async def _ping(self, key: str, peer: ID) -> None:
        with trio.move_on_after(TIMEOUT):
            try:
                stream = await self.host.new_stream(peer, [PING])
                try:
                    started = time.perf_counter()
                    await perform_ping_roundtrip(stream)
                    rtt = (time.perf_counter() - started) * 1000
                finally:
                    await stream.close()
            except Exception as exc:  # noqa: BLE001 - a peer that does not answer (or libp2p's
                # own error types) only has no figure; nothing else depends on it
                log.debug("ping %s: %r", key, exc)
                return
            old = self.rtt_ms.get(key)
            self.rtt_ms[key] = rtt if old is None else (1 - WEIGHT) * old + WEIGHT * rtt

    def status(self) -> dict[str, float]:
        return {peer: round(ms, 2) for peer, ms in sorted(self.rtt_ms.items())}
