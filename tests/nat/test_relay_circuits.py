"""Circuit relay v2 on loopback, real hosts: concurrent circuits to one peer stay independent.

py-libp2p 0.8.1's relay keeps a circuit's streams in a table keyed by peer, and a circuit that
ends closes what that table holds: another circuit to the same destination (a redial after a
reset, another source). `PacedRelay` closes each circuit's own streams; here the end of one
circuit must leave the other carrying data.
"""

from __future__ import annotations

from contextlib import AsyncExitStack

import trio
from libp2p.host.ping import ID as PING
from libp2p.host.ping import perform_ping_roundtrip
from libp2p.peer.peerinfo import PeerInfo
from libp2p.relay.circuit_v2.config import RelayConfig
from libp2p.relay.circuit_v2.protocol import PROTOCOL_ID as HOP
from libp2p.relay.circuit_v2.transport import CircuitV2Transport
from libp2p.tools.anyio_service import background_trio_service
from multiaddr import Multiaddr
from peertrain.node.nat.relays import HopLimits, PacedRelay, RacingDialer, connection_kind
from peertrain.node.net.host import build_host
from peertrain.node.net.identity import Identity
from peertrain.testing import wait_until


class Node:
    """A host with the relay protocol (hop off), a circuit transport and a dialer."""

    async def start(self, stack: AsyncExitStack, *, hop: bool = False) -> Node:
        self.host = build_host(Identity.generate(), dial_timeout=5.0)
        await stack.enter_async_context(self.host.run([Multiaddr("/ip4/127.0.0.1/tcp/0")]))
        self.relay = PacedRelay(self.host, limits=HopLimits(bandwidth=0))
        await stack.enter_async_context(background_trio_service(self.relay))
        if hop:
            self.relay.enable_hop()
        self.transport = CircuitV2Transport(self.host, self.relay, RelayConfig())
        self.dialer = RacingDialer(self.host, self.transport, timeout=5.0)
        return self

    def info(self) -> PeerInfo:
        return PeerInfo(self.host.get_id(), self.host.get_addrs())


async def ping(node: Node, peer) -> None:
    with trio.fail_after(5):
        stream = await node.host.new_stream(peer, [PING])
        try:
            await perform_ping_roundtrip(stream)
        finally:
            await stream.reset()


async def test_the_end_of_one_circuit_leaves_another_to_the_same_peer_working():
    async with trio.open_nursery() as nursery:  # the reservation refresher runs in it
        async with AsyncExitStack() as stack:
            relay = await Node().start(stack, hop=True)
            target, first, second = [await Node().start(stack) for _ in range(3)]
            await target.host.connect(relay.info())
            stream = await target.host.new_stream(relay.host.get_id(), [HOP])
            assert await target.transport.reserve(stream, relay.host.get_id(), nursery)
            port = relay.host.get_addrs()[0].value_for_protocol("tcp")
            circuit = Multiaddr(
                f"/ip4/127.0.0.1/tcp/{port}/p2p/{relay.host.get_id()}/p2p-circuit/p2p/{target.host.get_id()}"
            )
            peer = target.host.get_id()
            for source in (first, second):  # the second circuit is the one the relay stored last
                await source.dialer.dial_circuit(circuit)
                assert connection_kind(source.host, peer) == "relayed"
                await ping(source, peer)

            # the target ends the first circuit: at the relay, that circuit's target-side
            # direction ends first (upstream then closed the streams stored for the target:
            # the second circuit's)
            for conn in list(target.host.get_network().get_connections(first.host.get_id())):
                await conn.close()
            await trio.sleep(2.0)  # upstream's hop handler lingers 0.5 s after a circuit; margin
            assert connection_kind(second.host, peer) == "relayed"
            await ping(second, peer)  # still carries data
            # and the circuit that ended is closed on the source's side too (upstream left it
            # open: it closed the other circuit's streams instead)
            await wait_until(lambda: not first.host.get_network().get_connections(peer))
        nursery.cancel_scope.cancel()
