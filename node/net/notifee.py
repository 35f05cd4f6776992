"""Connection events: `ConnectionEvents` (in protocol/connection_events.py, below dht/, its user)
and `Departures`, which tells a callback when the last connection to a peer closed."""

from __future__ import annotations

from collections.abc import Callable

from libp2p.abc import INetConn, INetwork
from peertrain.protocol.connection_events import ConnectionEvents as ConnectionEvents


class Departures(ConnectionEvents):
    """Calls `on_left(peer)` (base58) when a peer's last connection closed (a peer that merely
    replaced one connection by another, a hole punch over a relay, has not left), and
    `on_back(peer)` when a connection to it opens."""

    def __init__(self, on_left: Callable[[str], None], on_back: Callable[[str], None]) -> None:
        self.on_left, self.on_back = on_left, on_back

    async def connected(self, network: INetwork, conn: INetConn) -> None:
        self.on_back(conn.muxed_conn.peer_id.to_base58())

    async def disconnected(self, network: INetwork, conn: INetConn) -> None:
        peer = conn.muxed_conn.peer_id
        if not network.get_connections(peer):
            self.on_left(peer.to_base58())
