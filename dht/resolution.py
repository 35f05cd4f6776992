"""Resolving a bare peer ID: where can `peer` be dialled, and connecting to it.

A peer ID alone is enough to join a run (`peertrain join 12D3Koo…`), so the DHT must turn one
into addresses. Two ways, raced, because each misses cases the other covers:
- its signed peer record (`/peertrain/peer/<id>`, which every node keeps announced): the only
  way to learn relay circuit addresses, but lost while its replicas churn;
- a lookup of its key that ends as soon as a peer names it, or it answers itself: a
  neighbour holding a connection names it even when it is a client that no routing table
  lists and its record has not been stored yet.
An open connection answers first of all, unless the caller asks for a fresh answer.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import trio
from libp2p.abc import IHost
from libp2p.peer.id import ID
from libp2p.peer.peerinfo import PeerInfo
from peertrain.protocol.errors import PeertrainError

from .config import DhtConfig
from .errors import PeerNotFound
from .keyspace import peer_key
from .messages import FindNode, Nodes
from .namespaces import peer_record_key
from .peers import PeerBook
from .records import Record
from .walker import Walker

if TYPE_CHECKING:
    from multiaddr import Multiaddr

log = logging.getLogger(__name__)

Get = Callable[[str], Awaitable[dict[str, Record]]]


@dataclass(frozen=True, slots=True)
class Found:
    """A resolved peer: where to dial it, and how we learned it (connected, record, lookup)."""

    info: PeerInfo
    how: str


class Resolver:
    """`find_peer` and `resolve` for one node (`Dht` delegates to it)."""

    def __init__(
        self,
        *,
        host: IHost,
        walker: Walker,
        book: PeerBook,
        get: Get,
        config: DhtConfig,
        counts: Counter[str],
    ) -> None:
        self.host, self.walker, self.book, self.config = host, walker, book, config
        self._get = get  # the node's record get (`Values.get`)
        self._counts = counts  # shared with the node's statistics: "resolved"

    async def find_peer(
        self, peer: ID, *, fresh: bool = False, via: Sequence[str] = ("record", "lookup")
    ) -> Found | None:
        """Where `peer` can be dialled, and how we know.

        Without `fresh`, an open connection answers at once ("connected"). Otherwise two walks
        race and the first answer wins: a get of the peer's signed peer record ("record",
        which also carries relay addresses), and a lookup of the peer's key that ends when a
        peer names it or it answers itself ("lookup": a neighbour holding a connection to it
        names it even when it is a client that no routing table lists). `via` names the walks
        to run (a caller racing them itself asks for one at a time).
        """
        if not fresh and self.book.is_connected(peer):
            return Found(PeerInfo(peer, self.book.addrs(peer)), "connected")
        found: list[Found] = []
        async with trio.open_nursery() as nursery:

            async def by_record() -> None:
                try:
                    records = await self._get(peer_record_key(peer))
                except (PeertrainError, trio.TooSlowError):
                    return
                record = records.get(peer.to_base58())
                if record is not None:
                    found.append(
                        Found(PeerInfo(peer, _dialable(record.value["addrs"], peer)), "record")
                    )
                    nursery.cancel_scope.cancel()

            async def by_lookup() -> None:
                addrs = await self._named_by_lookup(peer)
                if addrs:
                    found.append(Found(PeerInfo(peer, addrs), "lookup"))
                    nursery.cancel_scope.cancel()

            if "record" in via:
                nursery.start_soon(by_record)
            if "lookup" in via:
                nursery.start_soon(by_lookup)
        return found[0] if found else None

    async def _named_by_lookup(self, peer: ID) -> list[Multiaddr]:
        """Walk toward `peer`'s key until an answer names it (or it answers); its addresses."""
        walker = self.walker
        target = peer_key(peer)
        raw = peer.to_bytes()
        named: list[Multiaddr] = []

        async def query(asked: ID) -> list[ID]:
            request = FindNode(
                target=target.to_bytes(32, "big"), server=walker.is_server, count=self.config.alpha
            )
            reply = await walker.request(asked, request, Nodes)
            heard = walker.heard(reply.peers, target)
            if asked == peer or any(item.peer_id == raw for item in reply.peers):
                named.extend(self.book.dial_addrs(peer))
            return heard

        await walker.lookup(
            target,
            query,
            width=self.config.replicas,
            alpha=self.config.alpha,
            done=lambda _open: bool(named),
        )
        return named

    async def resolve(self, peer: ID, *, timeout: float = 15.0, fresh: bool = False) -> Found:  # noqa: ASYNC109 - running out of time is PeerNotFound, not a cancellation
        """Find `peer` through the DHT (`find_peer`) and connect to it. Raises `PeerNotFound`."""
        with trio.move_on_after(timeout):
            found = await self.find_peer(peer, fresh=fresh)
            if found is None or not found.info.addrs:
                raise PeerNotFound(f"no peer in the DHT knows {peer}")
            try:
                await self.host.connect(found.info)
            except Exception as exc:  # noqa: BLE001 - py-libp2p raises many types for failed dials: translated
                addrs = [str(a) for a in found.info.addrs]
                raise PeerNotFound(
                    f"found {peer} ({found.how}) at {addrs} but could not connect: {exc}"
                ) from None
            self._counts["resolved"] += 1
            log.info(
                "dht: resolved %s by %s to %s",
                peer,
                found.how,
                ", ".join(str(a) for a in found.info.addrs),
            )
            return found
        raise PeerNotFound(f"could not resolve {peer} within {timeout:.0f} s")


def _dialable(addrs: list[str], peer: ID) -> list[Multiaddr]:
    """Multiaddrs from a peer record, without the trailing /p2p/<peer> that dialling adds."""
    from multiaddr import Multiaddr

    suffix = f"/p2p/{peer.to_base58()}"
    return [Multiaddr(a[: -len(suffix)] if a.endswith(suffix) else a) for a in addrs]
