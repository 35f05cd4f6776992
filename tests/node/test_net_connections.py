"""What node/net/connections.py answers about real libp2p connections, quirks included."""

from __future__ import annotations

from contextlib import AsyncExitStack

import pytest
from libp2p.peer.peerinfo import PeerInfo
from libp2p.peer.peerstore import PeerStoreError
from multiaddr import Multiaddr
from peertrain.node.net.connections import (
    connection_kind,
    connections_by_kind,
    is_outbound,
    peerstore_addrs,
    remote_addr,
)
from peertrain.node.net.host import build_host
from peertrain.node.net.identity import Identity

LOOPBACK = [Multiaddr("/ip4/127.0.0.1/tcp/0")]


async def _connected_pair(stack: AsyncExitStack):
    dialer, listener = build_host(Identity.generate()), build_host(Identity.generate())
    for host in (dialer, listener):
        await stack.enter_async_context(host.run(LOOPBACK))
    await dialer.connect(PeerInfo(listener.get_id(), listener.get_addrs()))
    return dialer, listener


async def test_a_connected_peer_without_a_stored_address_has_none_instead_of_an_error():
    async with AsyncExitStack() as stack:
        dialer, listener = await _connected_pair(stack)
        with pytest.raises(PeerStoreError):  # the quirk the helper exists for
            listener.get_peerstore().addrs(dialer.get_id())
        assert peerstore_addrs(listener, dialer.get_id()) == []
        assert peerstore_addrs(dialer, listener.get_id()) == list(listener.get_addrs())


async def test_a_tcp_connection_is_direct_and_only_its_dialer_calls_it_outbound():
    async with AsyncExitStack() as stack:
        dialer, listener = await _connected_pair(stack)
        assert connection_kind(dialer, listener.get_id()) == "direct"
        assert connections_by_kind(listener) == {dialer.get_id().to_base58(): "direct"}
        (out,) = dialer.get_network().get_connections(listener.get_id())
        (into,) = listener.get_network().get_connections(dialer.get_id())
        assert is_outbound(out) and not is_outbound(into)
        assert str(remote_addr(out)).startswith("/ip4/127.0.0.1/tcp/")


async def test_a_peer_we_are_not_connected_to_has_no_connection_kind():
    async with AsyncExitStack() as stack:
        dialer, listener = await _connected_pair(stack)
        stranger = Identity.generate().peer_id
        assert connection_kind(dialer, stranger) is None
        assert peerstore_addrs(dialer, stranger) == []
