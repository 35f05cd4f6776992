"""Peer exchange: connected peers tell each other whom they know, so a swarm meshes by itself.

A node that joins through one bootstrap peer asks it for its peers and dials them, then asks
those, until it holds `target_peers` connections or learns nothing new. It is the small,
always-on discovery every daemon needs before the DHT (which finds *specific* things: runs,
stages, a bare peer ID). Addresses from peers are hints, not facts: Noise proves the peer ID on
dial, so a lying peer costs one failed dial, and answers are bounded in count and size; they
stay within the scope we reach the source in (`in_scope`: no loopback or LAN dials for a
stranger on the internet).

The same answers reveal a copied identity: a peer listing *our* peer ID at an address that is
not ours means another machine runs with our key.
"""

from __future__ import annotations

import logging
import random
from dataclasses import KW_ONLY, dataclass, field
from typing import Annotated

import trio
from libp2p.abc import IHost
from libp2p.peer.id import ID
from libp2p.peer.peerinfo import PeerInfo
from multiaddr import Multiaddr
from peertrain.protocol.ids import protocol_id
from peertrain.protocol.messages import Message, Request, Response, message
from peertrain.protocol.schema import IntRange, MaxLen

from ..errors import ConnectError
from ..net.addresses import MULTIADDR_ERRORS, in_scope, rank
from ..net.connections import direct_conns, peerstore_addrs, remote_addr
from ..net.host import connect
from ..net.peers import DUPLICATE_WARNING
from ..net.penalties import PeerScoreboard
from ..net.rpc import RpcServer, request

log = logging.getLogger(__name__)

PEX = protocol_id("pex", "1.0.0")
MAX_PEERS_PER_ANSWER = 64
MAX_ADDRS_PER_PEER = 8
SOURCES_PER_EXCHANGE = 3


@message("node/pex-peer", max_size=2048)
class KnownPeer(Message):
    peer_id: Annotated[str, MaxLen(64)]
    addrs: Annotated[tuple[Annotated[str, MaxLen(200)], ...], MaxLen(MAX_ADDRS_PER_PEER)]


@message("node/pex-request", max_size=64)
class PeersRequest(Request):
    limit: Annotated[int, IntRange(1, MAX_PEERS_PER_ANSWER)] = 32


@message("node/pex-response", max_size=140 * 1024)
class PeersResponse(Response):
    peers: Annotated[tuple[KnownPeer, ...], MaxLen(MAX_PEERS_PER_ANSWER)]


@dataclass(eq=False)
class PeerExchange:
    """Serves our peer list and keeps dialing peers' peers until `target_peers` are connected."""

    host: IHost
    scoreboard: PeerScoreboard
    _: KW_ONLY
    target_peers: int = 32
    interval: float = 1.0
    max_interval: float = 30.0
    duplicate_sightings: int = field(default=0, init=False)
    _failed: dict[str, int] = field(default_factory=dict, init=False, repr=False)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        RpcServer(self.host, PEX, PeersRequest, self._answer, scoreboard=self.scoreboard).register()
        task_status.started()
        delay = self.interval
        while True:
            before = set(self.host.get_connected_peers())
            learned = await self.exchange_once()
            # back off only while nothing changes: a new connection (someone dialed us) is a
            # peer that may know others, and must not wait out a long backoff
            changed = set(self.host.get_connected_peers()) != before
            delay = self.interval if learned or changed else min(delay * 2, self.max_interval)
            await trio.sleep(delay)

    async def _answer(self, peer: ID, req: PeersRequest) -> PeersResponse:
        known = [p for p in self.host.get_connected_peers() if p != peer][: req.limit]
        return req.reply(PeersResponse, peers=tuple(self._describe(p) for p in known))

    def _describe(self, peer: ID) -> KnownPeer:
        addrs = sorted(peerstore_addrs(self.host, peer), key=rank)[:MAX_ADDRS_PER_PEER]
        return KnownPeer(peer_id=peer.to_base58(), addrs=tuple(str(a) for a in addrs))

    async def exchange_once(self) -> int:
        """Ask a random connected peer; dial what is new. Returns how many new peers connected.

        A peer that does not answer (it lacks PEX, e.g. another node's throwaway dial-back
        probe, or it is gone) is skipped for the next one, up to `SOURCES_PER_EXCHANGE`: one
        unlucky pick must not cost a whole backoff period."""
        connected = self.host.get_connected_peers()
        if not connected or len(connected) >= self.target_peers:
            return 0
        for source in random.sample(connected, min(len(connected), SOURCES_PER_EXCHANGE)):
            try:
                answer = await request(
                    self.host, source, PEX, PeersRequest(), PeersResponse, timeout=5.0
                )
            except Exception as exc:  # noqa: BLE001 - PeertrainError, TooSlowError, the
                # transport's own: a source that cannot answer is skipped for the next one
                log.debug("peer exchange with %s failed: %s", source, exc)
                continue
            return await self._dial_new(source, answer.peers)
        return 0

    async def _dial_new(self, source: ID, peers: tuple[KnownPeer, ...]) -> int:
        own = self.host.get_id()
        connected = set(self.host.get_connected_peers())
        source_addr = self.source_address(source)
        new = 0
        for known in peers:
            try:
                peer_id = ID.from_base58(known.peer_id)
                addrs = [Multiaddr(a) for a in known.addrs]
            except MULTIADDR_ERRORS:  # ValueError covers a malformed peer ID too
                self.scoreboard.penalise(
                    source.to_base58(), 10, "peer exchange: malformed peer entry"
                )
                continue
            if peer_id == own:
                self._check_not_ours(addrs, source)
                continue
            addrs = in_scope(addrs, source_addr)
            if peer_id in connected or len(connected) >= self.target_peers or not addrs:
                continue
            if self._failed.get(known.peer_id, 0) >= 3:
                continue
            try:
                await connect(self.host, PeerInfo(peer_id, addrs))
            except ConnectError as exc:
                self._failed[known.peer_id] = self._failed.get(known.peer_id, 0) + 1
                log.debug("peer exchange: %s", exc)
                continue
            connected.add(peer_id)
            new += 1
        if len(self._failed) > 4096:
            self._failed.clear()
        return new

    def source_address(self, source: ID) -> Multiaddr | None:
        """Where we reach `source`: its hints are kept within that address's scope."""
        conns = self.host.get_network().get_connections(source)
        direct = direct_conns(conns)
        return remote_addr((direct or conns)[0]) if conns else None

    def _check_not_ours(self, addrs: list[Multiaddr], source: ID) -> None:
        ours = {str(a).split("/p2p/")[0] for a in self.host.get_addrs()}
        foreign = [str(a) for a in addrs if str(a).split("/p2p/")[0] not in ours]
        if foreign:
            self.duplicate_sightings += 1
            log.critical(
                DUPLICATE_WARNING.format(detail=f"{source} knows our peer ID at {foreign}")
            )
