"""Reach the run members that hold something we want, by the addresses they announce in RunState.

A node that is not (yet) connected to a holder (a sampler outside the run, a joiner fetching the
partition) dials it at the addresses in its member record first; one that cannot be reached is
left to the download, which tries the others.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

import trio
from libp2p.abc import IHost
from libp2p.peer.id import ID
from libp2p.peer.peerinfo import PeerInfo
from multiaddr import Multiaddr
from peertrain.crdt.runstate import RunState

from ..errors import NodeError
from ..net.host import connect

log = logging.getLogger(__name__)

DIAL_TIMEOUT = 10.0


async def reach(host: IHost, state: RunState, peers: Iterable[str]) -> list[ID]:
    """The IDs of `peers`, each dialled at its announced addresses if we have no connection."""
    connected = {p.to_base58() for p in host.get_connected_peers()}
    members = state.members()
    ids = []
    for peer in sorted(set(peers)):
        ids.append(ID.from_base58(peer))
        member = members.get(peer)
        if peer in connected or member is None:
            continue
        try:
            addrs = [Multiaddr(a) for a in member.info.addrs]
            with trio.move_on_after(DIAL_TIMEOUT):
                await connect(host, PeerInfo(ids[-1], addrs))
        except (NodeError, ValueError) as exc:
            log.debug("could not reach %s: %s", peer[:12], exc)
    return ids
