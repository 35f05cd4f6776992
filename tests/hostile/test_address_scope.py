"""Peer-exchange hints stay within the scope we reach their source in: a stranger on the
internet cannot make a node dial its own loopback or LAN."""

from __future__ import annotations

import pytest
from multiaddr import Multiaddr
from peertrain.node.api.control import call
from peertrain.node.net.addresses import in_scope, interface_ips
from peertrain.testing import open_test_swarm, wait_until

# ranking only: no traffic goes to these addresses
LOOPBACK, LAN, PUBLIC = "/ip4/127.0.0.1/tcp/4001", "/ip4/10.9.8.7/tcp/4001", "/ip4/1.1.1.1/tcp/4001"


def _kept(source: str | None) -> list[str]:
    addrs = [Multiaddr(a) for a in (LOOPBACK, LAN, PUBLIC)]
    return [str(a) for a in in_scope(addrs, Multiaddr(source) if source else None)]


def test_a_public_source_points_only_to_public_addresses():
    assert _kept("/ip4/8.8.8.8/tcp/4001") == [PUBLIC]
    assert _kept(None) == [PUBLIC]  # a source we cannot place counts as public


def test_a_lan_source_may_point_into_the_lan_and_a_loopback_source_anywhere():
    assert _kept("/ip4/10.0.0.5/tcp/4001") == [LAN, PUBLIC]
    assert _kept("/ip4/127.0.0.1/tcp/4001") == [LOOPBACK, LAN, PUBLIC]


def test_a_private_address_inside_our_own_lan_is_kept_even_from_a_public_source():
    lan = [ip for ip in interface_ips("ip4") if not ip.startswith("127.")]
    if not lan:
        pytest.skip("this machine has no non-loopback IPv4 address")
    neighbour = Multiaddr(f"/ip4/{lan[0].rsplit('.', 1)[0]}.77/tcp/4001")
    assert in_scope([neighbour], Multiaddr("/ip4/8.8.8.8/tcp/4001")) == [neighbour]


async def test_a_stranger_on_the_internet_cannot_make_the_node_dial_loopback(monkeypatch):
    from peertrain.node.net.host import build_host
    from peertrain.node.net.identity import Identity
    from peertrain.node.services.peer_exchange import KnownPeer

    target = build_host(Identity.generate())  # known to nobody but the hint below
    async with (
        open_test_swarm(2) as (victim, honest),
        target.run([Multiaddr("/ip4/127.0.0.1/tcp/0")]),
    ):
        await wait_until(lambda: len(victim.status()["peers"]) == 1, timeout=10)
        hint = KnownPeer(
            peer_id=target.get_id().to_base58(), addrs=tuple(str(a) for a in target.get_addrs())
        )
        exchange, source = victim.peer_exchange, honest.host.get_id()
        public = Multiaddr("/ip4/8.8.8.8/tcp/4001")  # as if `honest` were seen there
        monkeypatch.setattr(exchange, "source_address", lambda _peer: public)
        assert await exchange._dial_new(source, (hint,)) == 0
        assert target.get_id() not in victim.host.get_connected_peers()
        monkeypatch.undo()  # the same hint from a peer on this machine is dialed
        assert await exchange._dial_new(source, (hint,)) == 1
        status = await call(victim.config.control_socket, "status", timeout=5)
        assert status["peer_id"] and victim.scoreboard.score(source.to_base58()) == 0
