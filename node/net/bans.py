"""Bans that bite: a banned peer is disconnected at once and its reconnects are closed on arrival.

The scoreboard decides (node/net/penalties.py); this enforces. Refusing new streams alone (the
inbound shield does that) left a banned peer's open gossipsub stream being read and its
connection counted; now the connection goes. Penalties are taken synchronously inside handlers,
so a ban only queues the peer (bounded; a full queue drops, and the peer's next stream or
connection re-queues it) and one task does the disconnecting.
"""

from __future__ import annotations

import logging

import trio
from libp2p.abc import IHost, INetConn, INetwork
from libp2p.peer.id import ID

from .notifee import ConnectionEvents
from .penalties import PeerScoreboard

log = logging.getLogger(__name__)

QUEUE = 256


class BanEnforcer(ConnectionEvents):
    """`await nursery.start(enforcer.run)`: disconnects peers as the scoreboard bans them."""

    def __init__(self, host: IHost, scoreboard: PeerScoreboard) -> None:
        self.host = host
        self.scoreboard = scoreboard
        self._send, self._receive = trio.open_memory_channel[ID](QUEUE)
        self.disconnections = 0
        scoreboard.on_ban.append(self._queue_text)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        self.host.get_network().register_notifee(self)
        task_status.started()
        async for peer in self._receive:
            if peer in self.host.get_connected_peers():
                await self._disconnect(peer)

    async def connected(self, network: INetwork, conn: INetConn) -> None:
        peer = conn.muxed_conn.peer_id
        if self.scoreboard.is_banned(peer.to_base58()):
            self._queue(peer)

    def _queue_text(self, peer: str) -> None:
        try:
            self._queue(ID.from_base58(peer))
        except ValueError:
            log.warning("ban of an unparsable peer ID %r not enforced on connections", peer)

    def _queue(self, peer: ID) -> None:
        try:
            self._send.send_nowait(peer)
        except trio.WouldBlock:
            pass  # its next connection or stream arrives here again

    async def _disconnect(self, peer: ID) -> None:
        try:
            await self.host.disconnect(peer)
            self.disconnections += 1
            log.info("disconnected banned peer %s", peer)
        except Exception as exc:  # noqa: BLE001 - a connection already gone is the goal reached
            log.info("disconnecting banned peer %s: %s", peer, exc)
