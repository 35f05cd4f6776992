"""Keeping the configured peers connected, and noticing a copied identity.

`PeerKeeper` dials every bootstrap peer at start and re-dials any that drops, with capped
exponential backoff, so a node that started before its bootstrap peer, or lost it, heals by
itself. `IdentityGuard` warns loudly when this node's own peer ID turns up elsewhere: two
machines started from a copied home look like one peer and corrupt each other's state.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import trio
from libp2p.abc import IHost, INetConn, INetwork
from libp2p.peer.peerinfo import PeerInfo

from ..errors import ConnectError, DialBackedOff
from .connections import remote_addr
from .host import connect
from .notifee import ConnectionEvents

log = logging.getLogger(__name__)

DUPLICATE_WARNING = (
    "ANOTHER NODE IS USING THIS NODE'S IDENTITY ({detail}). Was this home copied from another "
    "machine? Each machine needs its own home: delete identity.key on one of them."
)


class PeerKeeper:
    """Connects to `peers` and keeps reconnecting the ones that drop."""

    def __init__(
        self,
        host: IHost,
        peers: Sequence[PeerInfo],
        *,
        interval: float = 2.0,
        max_backoff: float = 30.0,
    ):
        self.host = host
        self.peers = list(peers)
        self.interval = interval
        self.max_backoff = max_backoff
        self.last_error: dict[str, str] = {}  # peer ID -> why the last dial failed

    def failures(self) -> dict[str, str]:
        """Why each configured peer we are not connected to failed, for status: a node whose
        bootstrap peer refuses its key was told to add --bootstrap peers instead."""
        connected = {p.to_base58() for p in self.host.get_connected_peers()}
        return {peer: why for peer, why in self.last_error.items() if peer not in connected}

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        own = self.host.get_id()
        peers = [p for p in self.peers if p.peer_id != own]
        for p in self.peers:
            if p.peer_id == own:
                log.critical(
                    DUPLICATE_WARNING.format(
                        detail=f"a bootstrap address carries our own ID: {p.addrs}"
                    )
                )
        async with trio.open_nursery() as nursery:
            for peer in peers:
                nursery.start_soon(self._keep, peer)
            task_status.started()

    async def _keep(self, peer: PeerInfo) -> None:
        backoff = self.interval
        key = peer.peer_id.to_base58()
        while True:
            if peer.peer_id not in self.host.get_connected_peers():
                try:
                    await connect(self.host, peer)
                except ConnectError as exc:
                    # a backed-off dial repeats the failure already told (once per cause)
                    if not isinstance(exc, DialBackedOff) and self.last_error.get(key) != str(exc):
                        log.warning("%s (retrying every ≤%.0f s)", exc, self.max_backoff)
                    if not isinstance(exc, DialBackedOff):
                        self.last_error[key] = str(exc)
                    await trio.sleep(backoff)
                    backoff = min(backoff * 2, self.max_backoff)
                    continue
                if key in self.last_error:
                    log.info("connected to %s after earlier failures", key)
                self.last_error.pop(key, None)
                backoff = self.interval
            await trio.sleep(self.interval)


class IdentityGuard(ConnectionEvents):
    """A network notifee: a connection whose remote peer ID is our own means a cloned identity."""

    def __init__(self, host: IHost):
        self.host = host
        self.duplicates_seen = 0

    async def connected(self, network: INetwork, conn: INetConn) -> None:
        remote = conn.muxed_conn.peer_id
        if remote == self.host.get_id():
            self.duplicates_seen += 1
            log.critical(
                DUPLICATE_WARNING.format(
                    detail=f"a connection from {_remote_text(conn)} proved our key"
                )
            )


def _remote_text(conn: INetConn) -> str:
    addr = remote_addr(conn)
    return str(addr) if addr is not None else "an unknown address"
