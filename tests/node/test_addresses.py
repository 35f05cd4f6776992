"""Advertised addresses are concrete and the best one comes first; loopback as a last resort."""

from __future__ import annotations

from multiaddr import Multiaddr
from peertrain.node.net.addresses import expand_wildcards, rank, shareable


def test_wildcards_become_concrete_addresses_with_loopback_last():
    addrs = expand_wildcards([Multiaddr("/ip4/0.0.0.0/tcp/4001")])
    texts = [str(a) for a in addrs]
    assert texts and not any("0.0.0.0" in t for t in texts)
    assert "/ip4/127.0.0.1/tcp/4001" in texts
    assert [rank(a) for a in addrs] == sorted(rank(a) for a in addrs)


def test_concrete_addresses_are_kept_and_ordered():
    # ranking only: no traffic goes to these addresses
    addrs = expand_wildcards(
        [
            Multiaddr("/ip4/127.0.0.1/tcp/1"),
            Multiaddr("/ip4/10.1.2.3/tcp/1"),
            Multiaddr("/ip4/1.1.1.1/tcp/1"),
        ]
    )
    assert [str(a) for a in addrs] == [
        "/ip4/1.1.1.1/tcp/1",
        "/ip4/10.1.2.3/tcp/1",
        "/ip4/127.0.0.1/tcp/1",
    ]


def test_shareable_hides_loopback_when_a_routable_address_exists():
    both = [Multiaddr("/ip4/10.1.2.3/tcp/1"), Multiaddr("/ip4/127.0.0.1/tcp/1")]
    assert shareable(both) == both[:1]
    assert shareable(both[1:]) == both[1:]
