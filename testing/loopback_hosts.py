"""Two real libp2p hosts on loopback, ours (`build_host`) or py-libp2p 0.8.1's stock one.

The stock host runs libp2p's own Noise and Yamux: the wire format our transport must keep
speaking, and a peer whose messages do not line up with ours.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from libp2p import new_host
from libp2p.abc import IHost
from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.crypto.x25519 import create_new_key_pair as create_x25519_key_pair
from libp2p.network.config import ConnectionConfig
from libp2p.peer.id import ID
from libp2p.peer.peerinfo import PeerInfo
from libp2p.security.noise.transport import Transport as StockNoise
from libp2p.stream_muxer.yamux.yamux import Yamux as StockYamux
from multiaddr import Multiaddr

from ..node.net.host import build_host
from ..node.net.identity import Identity
from ..node.net.transport import NOISE_ID, YAMUX_ID

LOOPBACK = [Multiaddr("/ip4/127.0.0.1/tcp/0")]


def stock_host() -> IHost:
    key_pair = create_new_key_pair()
    return new_host(
        key_pair=key_pair,
        sec_opt={
            NOISE_ID: StockNoise(key_pair, noise_privkey=create_x25519_key_pair().private_key)
        },
        muxer_opt={YAMUX_ID: StockYamux},
        connection_config=ConnectionConfig(max_connections_per_peer=1),
    )


def our_host(psk: str | None = None) -> IHost:
    return build_host(Identity.generate(), psk=psk)


@contextlib.asynccontextmanager
async def connected_pair(listener: IHost, dialer: IHost) -> AsyncIterator[tuple[IHost, IHost]]:
    """Both hosts running on loopback, `dialer` connected to `listener`."""
    async with listener.run(LOOPBACK), dialer.run(LOOPBACK):
        await dialer.connect(PeerInfo(listener.get_id(), listener.get_addrs()))
        yield listener, dialer


def muxed(host: IHost, peer: ID) -> object:
    """The muxed connection `host` holds to `peer` (ours: a YamuxConnection)."""
    return host.get_network().get_connections(peer)[0].muxed_conn
