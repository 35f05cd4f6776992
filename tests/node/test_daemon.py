"""In-process daemons on loopback: they mesh, report status, and warn about copied identities."""

from __future__ import annotations

import logging

from peertrain.node.api.control import call
from peertrain.node.daemon import DaemonStatus
from peertrain.testing import open_test_swarm, wait_until


async def test_nodes_joining_one_bootstrap_peer_find_each_other():
    async with open_test_swarm(4) as nodes:
        await wait_until(lambda: all(len(n.status()["peers"]) == 3 for n in nodes), timeout=10)
        ids = {n.status()["peer_id"] for n in nodes}
        for node in nodes:
            assert set(node.status()["peers"]) == ids - {node.status()["peer_id"]}


async def test_status_over_the_control_socket_has_the_documented_keys():
    async with open_test_swarm(2) as (a, b):
        await wait_until(lambda: len(a.status()["peers"]) == 1)
        status = await call(a.config.control_socket, "status")
        assert status.keys() == DaemonStatus.__required_keys__  # what the CLI and tests read
        assert status["run"] is None and status["peers"] == [b.status()["peer_id"]]
        assert not any("0.0.0.0" in addr for addr in status["addrs"])


async def test_a_peer_reporting_our_id_elsewhere_raises_a_loud_warning(caplog):
    caplog.set_level(logging.CRITICAL)
    async with open_test_swarm(2) as (a, b):
        await wait_until(lambda: len(a.status()["peers"]) == 1)
        from peertrain.node.services.peer_exchange import KnownPeer

        clone = KnownPeer(peer_id=a.status()["peer_id"], addrs=("/ip4/127.0.0.1/tcp/9",))
        await a.peer_exchange._dial_new(b.host.get_id(), (clone,))
    assert a.peer_exchange.duplicate_sightings == 1
    assert any(
        "ANOTHER NODE IS USING THIS NODE'S IDENTITY" in r.getMessage() for r in caplog.records
    )


async def test_resolving_a_peer_reports_the_same_route_as_status_remembers():
    # The lookup and the peer record are dialed at once; when both connect in the same
    # scheduler batch (here: already connected), only the winner may be remembered.
    async with open_test_swarm(3) as nodes:
        await wait_until(lambda: all(len(n.status()["peers"]) == 2 for n in nodes), timeout=10)
        await wait_until(lambda: nodes[2].dht.dht.bootstrapped, timeout=10)
        target = nodes[1].status()["peer_id"]
        for _ in range(20):
            found = await nodes[2].dht.resolve_peer(target, timeout=8.0)
            remembered = nodes[2].status()["dht"]["resolved"][target]
            assert remembered["how"] == found["how"]


async def test_peer_exchange_skips_connected_peers_that_do_not_answer():
    # Dial-back probes and other non-peertrain peers are connected too; asking one of them
    # must not end the exchange (the next one is asked), or meshing waits out a backoff.
    from contextlib import AsyncExitStack

    from libp2p.peer.peerinfo import PeerInfo
    from multiaddr import Multiaddr
    from peertrain.node.net.host import build_host
    from peertrain.node.net.identity import Identity
    from peertrain.node.net.penalties import PeerScoreboard
    from peertrain.node.services.peer_exchange import PeerExchange

    listen = [Multiaddr("/ip4/127.0.0.1/tcp/0")]
    async with open_test_swarm(2) as (b, c), AsyncExitStack() as stack:
        await wait_until(lambda: len(b.status()["peers"]) == 1)
        hosts = [build_host(Identity.generate(), dial_timeout=3.0) for _ in range(3)]
        for host in hosts:
            await stack.enter_async_context(host.run(listen))
        asker, mute = hosts[0], hosts[1:]  # `mute` hosts serve no peer exchange
        for other in [*mute, b.host]:
            await asker.connect(PeerInfo(other.get_id(), other.get_addrs()))
        exchange = PeerExchange(asker, PeerScoreboard())
        assert await exchange.exchange_once() == 1
        assert c.host.get_id() in asker.get_connected_peers()
