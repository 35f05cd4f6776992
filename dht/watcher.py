"""Feeding the routing table from the host's connections.

py-libp2p's KadDHT ignores connections it did not make; here every connection is a chance to
learn a DHT server. The notifee only records the event (notifee callbacks run on the
connection's own path and must not wait); workers then decide whether the peer serves the
DHT: identify, which both sides run on every new connection, lists our protocol for servers
and not for clients. No probe is sent when identify is slow or fails: a server that connected
for the DHT says so in its first request, and one we query joins when it answers, so a probe
would only add a stream and a round trip per connection (measured: most of a busy join).
A disconnect removes the peer from the table and fails its in-flight requests at once.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import trio
from libp2p.abc import IHost, INetConn, INetwork
from libp2p.peer.id import ID
from libp2p.peer.peerstore import PeerStoreError
from peertrain.protocol.connection_events import ConnectionEvents

from .keyspace import peer_key
from .messages import DHT_PROTOCOL
from .table_feed import TableFeed

if TYPE_CHECKING:
    # libp2p installs trio-typing, whose stubs shadow trio's own types and do not export
    # trio.TaskStatus; this is the same protocol.
    from trio_typing import TaskStatus

log = logging.getLogger(__name__)

WORKERS = 4
QUEUE = 256
POLL = 0.1


class ConnectionWatcher(ConnectionEvents):
    def __init__(
        self,
        host: IHost,
        feed: TableFeed,
        *,
        connected_keys: dict[int, ID],
        close_peer: Callable[[ID], Awaitable[None]],
        identify_wait: float,
    ) -> None:
        self.host = host
        self.feed = feed
        self.table = feed.table
        self.book = feed.book
        self.connected_keys = connected_keys  # shared with the responder: exact-match answers
        self._close_peer = close_peer  # ends our request stream to a peer that left
        self._identify_wait = identify_wait
        self._send, self._receive = trio.open_memory_channel[ID](QUEUE)
        self.dropped = 0

    async def run(self, *, task_status: TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            for _ in range(WORKERS):
                nursery.start_soon(self._classify)
            for peer in self.host.get_connected_peers():  # connections made before we started
                self._note(peer)
            task_status.started()

    def _note(self, peer: ID) -> None:
        self.connected_keys[peer_key(peer)] = peer
        if peer in self.table:
            return
        try:
            self._send.send_nowait(peer)
        except trio.WouldBlock:
            self.dropped += 1  # it will join the table when it talks to us or answers us

    async def _classify(self) -> None:
        async for peer in self._receive:
            if peer in self.table or not self.book.is_connected(peer):
                continue
            if await self._identified_as_server(peer):
                self.feed.add_server(peer, inferred=True)

    async def _identified_as_server(self, peer: ID) -> bool:
        """True once identify lists our protocol for `peer`; False if it does not, or never says."""
        wanted = str(DHT_PROTOCOL)
        store = self.host.get_peerstore()
        with trio.move_on_after(self._identify_wait):
            while True:
                try:
                    protocols = store.get_protocols(peer)
                except PeerStoreError:  # not identified yet; we poll again
                    protocols = []
                if protocols:
                    return wanted in protocols
                if peer in self.table:
                    return True
                await trio.sleep(POLL)
        return False

    async def connected(self, network: INetwork, conn: INetConn) -> None:
        self._note(conn.muxed_conn.peer_id)

    async def disconnected(self, network: INetwork, conn: INetConn) -> None:
        peer = conn.muxed_conn.peer_id
        if network.get_connections(peer):
            return
        self.connected_keys.pop(peer_key(peer), None)
        self.table.remove(peer)
        await self._close_peer(peer)
