"""Dials run to their end whoever gave up on them, and callers share one dial per peer."""

from __future__ import annotations

import functools
import logging
import socket

import pytest
import trio
from libp2p.peer.peerinfo import PeerInfo
from multiaddr import Multiaddr
from peertrain.dht import DhtConfig
from peertrain.dht.dialer import Dialer
from peertrain.dht.errors import DialFailed
from peertrain.testing import wait_until

QUIET = DhtConfig(publish_peer_record=False)


async def test_a_caller_cancelled_mid_dial_leaves_the_dial_to_finish(dht_swarm, caplog):
    """A lookup that has its answer cancels its queries: their dials used to die mid-handshake
    ("fail to upgrade mux" on the peer, its identify stream timing out) and be dialled again."""
    caplog.set_level(logging.ERROR, logger="libp2p")
    async with dht_swarm(2, config=QUIET) as swarm:
        a, b = swarm.nodes
        with trio.CancelScope() as scope:
            scope.cancel()  # the caller is gone before the first handshake byte
            await a.dialer.connect(swarm.info(1))
        assert scope.cancelled_caught
        await wait_until(lambda: a.dialer.connected(b.own), timeout=10, what="the dial finished")
        assert a.dialer.dialled == 1 and a.dialer.failed == 0
        await trio.sleep(0.2)  # an aborted upgrade would log on b's side by now
        assert not [r for r in caplog.records if "upgrade" in r.getMessage()]


async def test_concurrent_callers_share_one_dial(dht_swarm):
    async with dht_swarm(2, config=QUIET) as swarm:
        a, b = swarm.nodes
        async with trio.open_nursery() as nursery:
            for _ in range(5):
                nursery.start_soon(a.dialer.connect, swarm.info(1))
        assert a.dialer.connected(b.own)
        assert a.dialer.dialled == 1
        assert len(a.host.get_network().get_connections(b.own)) == 1


async def test_a_failed_dial_is_told_to_every_caller_once(dht_swarm):
    async with dht_swarm(2, config=QUIET) as swarm:
        a = swarm.nodes[0]
        with socket.socket() as probe:  # a loopback port nobody listens on
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        closed = PeerInfo(swarm.nodes[1].own, [Multiaddr(f"/ip4/127.0.0.1/tcp/{port}")])
        errors = []

        async def ask() -> None:
            try:
                await a.dialer.connect(closed)
            except DialFailed as exc:
                errors.append(exc)

        async with trio.open_nursery() as nursery:
            for _ in range(3):
                nursery.start_soon(ask)
        assert len(errors) == 3 and a.dialer.dialled == 1 and a.dialer.failed == 1
        assert "could not connect" in str(errors[0])


async def test_a_dialer_whose_node_is_not_running_refuses_at_once(dht_swarm):
    async with dht_swarm(2, config=QUIET) as swarm:
        idle = Dialer(
            swarm.nodes[0].host, swarm.nodes[0].book.dial_addrs
        )  # never attached to a nursery
        with pytest.raises(DialFailed, match="not running"):
            await idle.connect(swarm.info(1))


async def test_an_address_that_never_answers_does_not_hold_up_the_next(dht_swarm):
    """A NATed peer's LAN address drops the SYN silently; py-libp2p's dial took only the first
    TCP address and waited out the whole timeout on it (a join stalled 6 s per such dial)."""
    async with dht_swarm(2, config=QUIET) as swarm, trio.open_nursery() as nursery:
        silent = (
            await nursery.start(
                functools.partial(trio.serve_tcp, _say_nothing, 0, host="127.0.0.1")
            )
        )[0]
        port = silent.socket.getsockname()[1]
        a, b = swarm.nodes
        real = swarm.info(1)
        addrs = [Multiaddr(f"/ip4/127.0.0.1/tcp/{port}"), *real.addrs]
        started = trio.current_time()
        await a.dialer.connect(PeerInfo(b.own, addrs))
        assert a.dialer.connected(b.own)
        assert trio.current_time() - started < a.dialer.timeout / 2
        nursery.cancel_scope.cancel()


async def _say_nothing(stream: trio.SocketStream) -> None:
    await trio.sleep_forever()
