"""Peers as they travel in DHT answers: peer ID bytes plus a few addresses.

Addresses we hand out come from libp2p's peerstore (what identify and our dials put there).
Addresses we learn from answers are hints, kept in our own bounded book and given to the host
only when we dial: py-libp2p's AutoConnector dials every peerstore peer until it holds
`low_watermark` (100) connections, so filling the peerstore with every peer a lookup heard of
would turn lookups into a full mesh. A lying hint costs one failed dial (Noise proves the peer
ID). Parsing multiaddrs costs tens of microseconds each, so answers naming peers we are already
connected to skip it, and parsed and printed forms are cached (bounded).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from typing import TypeVar

import multihash
from libp2p.abc import IHost
from libp2p.peer.id import ID
from libp2p.peer.peerstore import PeerStoreError
from multiaddr import Multiaddr

from .messages import MAX_ADDRS_PER_PEER, PeerAddrs

K = TypeVar("K")
V = TypeVar("V")


class _Lru(OrderedDict[K, V]):
    def __init__(self, size: int) -> None:
        super().__init__()
        self.size = size

    def remember(self, key: K, value: V) -> V:
        self[key] = value
        if len(self) > self.size:
            self.popitem(last=False)
        return value


class PeerBook:
    """Turns peers into `PeerAddrs` and back, through the host's peerstore."""

    def __init__(self, host: IHost, *, cache_size: int = 4096) -> None:
        self.host = host
        self._parsed: _Lru[str, Multiaddr | None] = _Lru(cache_size)
        self._described: _Lru[tuple[ID, tuple[Multiaddr, ...]], PeerAddrs] = _Lru(cache_size)
        self._hints: _Lru[ID, list[Multiaddr]] = _Lru(cache_size)

    def is_connected(self, peer: ID) -> bool:
        return bool(self.host.get_network().get_connections(peer))

    def addrs(self, peer: ID) -> list[Multiaddr]:
        """What the peerstore knows (identify, past dials)."""
        try:
            return list(self.host.get_peerstore().addrs(peer))
        except PeerStoreError:  # unknown or expired
            return []

    def dial_addrs(self, peer: ID) -> list[Multiaddr]:
        """Where to dial `peer`: learned hints first, then the peerstore's addresses."""
        hints = self._hints.get(peer, [])
        return [*hints, *(a for a in self.addrs(peer) if a not in hints)]

    def forget(self, peer: ID) -> None:
        """Drop the hints for `peer` (they led nowhere, or the caller wants a fresh lookup)."""
        self._hints.pop(peer, None)

    def hint(self, peer: ID, addrs: list[Multiaddr]) -> None:
        if addrs:
            self._hints.remember(peer, addrs[:MAX_ADDRS_PER_PEER])

    def describe(self, peer: ID) -> PeerAddrs:
        addrs = self.dial_addrs(peer)[:MAX_ADDRS_PER_PEER]
        cache_key = (peer, tuple(addrs))
        found = self._described.get(cache_key)
        if found is None:
            texts = tuple(str(a) for a in addrs)
            found = self._described.remember(
                cache_key, PeerAddrs(peer_id=peer.to_bytes(), addrs=texts)
            )
        return found

    def describe_all(self, peers: Iterable[ID]) -> tuple[PeerAddrs, ...]:
        return tuple(self.describe(peer) for peer in peers)

    def learn(self, answer: Iterable[PeerAddrs], *, own: ID) -> list[ID]:
        """Peers named in an answer that we could reach; their addresses go to the peerstore."""
        out = []
        for item in answer:
            if not _is_peer_id(item.peer_id):
                continue
            peer = ID(item.peer_id)
            if peer == own:
                continue
            if self.is_connected(peer):
                out.append(peer)
                continue
            addrs = [a for a in (self._parse(text) for text in item.addrs) if a is not None]
            if addrs:
                self.hint(peer, addrs)
                out.append(peer)
        return out

    def _parse(self, text: str) -> Multiaddr | None:
        if text in self._parsed:
            return self._parsed[text]
        try:
            addr = Multiaddr(text)
        except Exception:  # noqa: BLE001 - multiaddr raises many types for bad text: not an address
            addr = None
        return self._parsed.remember(text, addr)


def _is_peer_id(raw: bytes) -> bool:
    try:
        multihash.decode(raw)
    except Exception:  # noqa: BLE001 - bytes from the network; any failure means "not a peer ID"
        return False
    return True
