"""What a libp2p connection and the peerstore say about a peer, without their surprises.

py-libp2p 0.8.1 raises where a caller wants an empty answer: `peerstore.addrs()` raises
PeerStoreError for a connected peer it holds no address of, or one whose record expired
(docs/libp2p-notes.md), and a connection's addresses come through several wrapper classes (ours,
upstream's, the relay's). Every node sub-layer asks through these helpers instead.
"""

from __future__ import annotations

from collections.abc import Sequence

from libp2p.abc import IHost, INetConn
from libp2p.peer.id import ID
from libp2p.peer.peerstore import PeerStoreError
from multiaddr import Multiaddr

CIRCUIT = "/p2p-circuit"


def peerstore_addrs(host: IHost, peer: ID) -> list[Multiaddr]:
    """The addresses the peerstore holds for `peer`; [] when it holds none (unknown, expired,
    or connected without a stored address)."""
    try:
        return list(host.get_peerstore().addrs(peer))
    except PeerStoreError:
        return []


def transport_addrs(conn: INetConn) -> list[Multiaddr]:
    """The addresses `conn` runs over ([] when it cannot say)."""
    try:
        return list(conn.get_transport_addresses())
    except Exception:  # noqa: BLE001 - a closing connection, through any of the wrapper classes
        # that delegate this call, may raise anything: "no addresses" is the honest answer
        return []


def is_relayed(conn: INetConn) -> bool:
    """True when every address of `conn` runs through a relay (a closing one counts as direct)."""
    addrs = [str(a) for a in transport_addrs(conn)]
    return bool(addrs) and all(CIRCUIT in a for a in addrs)


def direct_conns(conns: Sequence[INetConn]) -> list[INetConn]:
    return [c for c in conns if not is_relayed(c)]


def remote_addr(conn: INetConn) -> Multiaddr | None:
    addrs = transport_addrs(conn)
    return addrs[0] if addrs else None


def is_outbound(conn: INetConn) -> bool:
    """True when we dialed `conn` (its remote port is then the peer's listen port)."""
    muxed = getattr(conn, "muxed_conn", None)
    return bool(getattr(muxed, "is_initiator", False))


def connection_kind(host: IHost, peer: ID) -> str | None:
    """ "direct" when any connection to `peer` is direct, "relayed" when all run through a relay,
    None when not connected."""
    conns = host.get_network().get_connections(peer)
    if not conns:
        return None
    return "direct" if direct_conns(conns) else "relayed"


def connections_by_kind(host: IHost) -> dict[str, str]:
    """Every connected peer's base58 ID → "direct" | "relayed"."""
    out = {}
    for peer in host.get_connected_peers():
        kind = connection_kind(host, peer)
        if kind:
            out[peer.to_base58()] = kind
    return out
