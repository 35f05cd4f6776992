"""Our host speaks Noise + Yamux only, dials quickly, and refuses outsiders of a private network.

Every test uses real libp2p hosts on real loopback sockets.
"""

from __future__ import annotations

import contextlib

import pytest
import trio
from libp2p import new_host
from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.peer.peerinfo import PeerInfo
from libp2p.security.insecure.transport import PLAINTEXT_PROTOCOL_ID, InsecureTransport
from multiaddr import Multiaddr
from peertrain.node.errors import ConnectError, DialBackedOff, PskMismatch
from peertrain.node.net.host import build_host, connect
from peertrain.node.net.identity import Identity
from peertrain.node.net.peers import PeerKeeper
from peertrain.testing import free_tcp_port, wait_until

LOOPBACK = [Multiaddr("/ip4/127.0.0.1/tcp/0")]
KEY_A = "a1" * 32
KEY_B = "b2" * 32


@contextlib.asynccontextmanager
async def running(*hosts):
    async with contextlib.AsyncExitStack() as stack:
        for host in hosts:
            await stack.enter_async_context(host.run(LOOPBACK))
        yield hosts


def info(host) -> PeerInfo:
    return PeerInfo(host.get_id(), host.get_addrs())


def plaintext_only_host():
    key_pair = create_new_key_pair()
    return new_host(key_pair=key_pair, sec_opt={PLAINTEXT_PROTOCOL_ID: InsecureTransport(key_pair)})


async def test_two_hosts_connect_and_see_each_other():
    async with running(build_host(Identity.generate()), build_host(Identity.generate())) as (a, b):
        await connect(a, info(b))
        assert b.get_id() in a.get_connected_peers()
        await wait_until(
            lambda: a.get_id() in b.get_connected_peers(), timeout=5, interval=0.01, what="b sees a"
        )


async def test_advertised_addresses_are_never_wildcards():
    host = build_host(Identity.generate())
    async with host.run([Multiaddr("/ip4/0.0.0.0/tcp/0")]):
        addrs = [str(a) for a in host.get_addrs()]
    assert addrs and not any("/0.0.0.0/" in a for a in addrs)
    assert all(a.endswith(f"/p2p/{host.get_id()}") for a in addrs)


async def test_advertised_addresses_follow_a_new_listener_at_once():
    # get_addrs is remembered for a second (identify and pubsub ask for it per message): the
    # listeners are its key, so one more listener shows on the next call
    host = build_host(Identity.generate())
    async with host.run(LOOPBACK):
        before = host.get_addrs()
        assert host.get_addrs() == before and len(before) == 1
        # (py-libp2p keys listeners by the address asked for: a second tcp/0 would replace it)
        await host.get_network().listen(Multiaddr(f"/ip4/127.0.0.1/tcp/{free_tcp_port()}"))
        after = host.get_addrs()
    assert len(after) == 2 and before[0] in after
    assert all(a.endswith(f"/p2p/{host.get_id()}") for a in map(str, after))


@pytest.mark.parametrize("direction", ["plaintext dials us", "we dial plaintext"])
async def test_a_plaintext_only_peer_cannot_connect(direction):
    ours, theirs = build_host(Identity.generate()), plaintext_only_host()
    async with running(ours, theirs):
        dialer, target = (theirs, ours) if direction == "plaintext dials us" else (ours, theirs)
        with trio.fail_after(15), pytest.raises(Exception):  # noqa: B017 - any refusal is right
            await connect(dialer, info(target)) if dialer is ours else await dialer.connect(
                info(target)
            )
        assert not ours.get_connected_peers() and not theirs.get_connected_peers()


async def test_same_psk_connects():
    async with running(
        build_host(Identity.generate(), psk=KEY_A), build_host(Identity.generate(), psk=KEY_A)
    ) as (a, b):
        await connect(a, info(b))
        assert b.get_id() in a.get_connected_peers()


async def test_wrong_psk_is_refused_quickly_with_a_clear_error():
    async with running(
        build_host(Identity.generate(), psk=KEY_A), build_host(Identity.generate(), psk=KEY_B)
    ) as (a, b):
        with trio.fail_after(3), pytest.raises(PskMismatch, match="pre-shared key mismatch"):
            await connect(a, info(b))
        assert not a.get_connected_peers() and not b.get_connected_peers()


async def test_a_dial_that_reaches_no_listener_says_so_without_blaming_a_key():
    port = free_tcp_port()  # nobody listens there
    nobody = Identity.generate()
    target = PeerInfo(nobody.peer_id, [Multiaddr(f"/ip4/127.0.0.1/tcp/{port}")])
    async with running(build_host(Identity.generate())) as (ours,):
        with trio.fail_after(30), pytest.raises(ConnectError) as refused:
            await connect(ours, target)
    assert "refused" in str(refused.value) and "pre-shared key" not in str(refused.value)
    assert "check that the peer runs and the address is its own" in str(refused.value)


async def test_a_peer_without_the_psk_is_refused_and_told_why(caplog):
    async with running(
        build_host(Identity.generate(), psk=KEY_A), build_host(Identity.generate())
    ) as (private, public):
        # "at once" is pinned by test_wrong_psk_is_refused_quickly_with_a_clear_error; here the
        # bound only catches a hang, with room for a loaded machine
        with trio.fail_after(10), pytest.raises(ConnectError, match="pre-shared key"):
            await connect(public, info(private))
        with trio.fail_after(10), pytest.raises(PskMismatch):
            await connect(private, info(public))
    assert any(
        "pre-shared key mismatch" in r.getMessage() for r in caplog.records
    )  # the listener's side


async def test_a_refused_address_dialled_again_is_not_blamed_on_a_key():
    """libp2p answers the next dial of an address that just failed from its negative cache, an
    error with no cause: it was read as "no secure session came of it: the peer may require a
    pre-shared key"."""
    port = free_tcp_port()  # nobody listens there
    target = PeerInfo(Identity.generate().peer_id, [Multiaddr(f"/ip4/127.0.0.1/tcp/{port}")])
    async with running(build_host(Identity.generate())) as (ours,):
        with trio.fail_after(30), pytest.raises(ConnectError, match="refused"):
            await connect(ours, target)
        with trio.fail_after(30), pytest.raises(DialBackedOff) as again:
            await connect(ours, target)
    assert "pre-shared key" not in str(again.value) and "failed moments ago" in str(again.value)


async def test_a_bootstrap_peer_that_keeps_failing_is_one_warning_and_its_cause_in_status(caplog):
    port = free_tcp_port()
    target = PeerInfo(Identity.generate().peer_id, [Multiaddr(f"/ip4/127.0.0.1/tcp/{port}")])
    async with running(build_host(Identity.generate())) as (ours,):
        keeper = PeerKeeper(ours, [target], interval=0.05, max_backoff=0.1)
        async with trio.open_nursery() as nursery:
            await nursery.start(keeper.run)
            await trio.sleep(1.5)  # a dozen redials, refused or backed off
            nursery.cancel_scope.cancel()
    told = [r.getMessage() for r in caplog.records if "could not connect" in r.getMessage()]
    assert len(told) == 1 and "refused" in told[0] and "pre-shared key" not in told[0]
    assert keeper.failures() == {target.peer_id.to_base58(): told[0].split(" (retrying")[0]}
