"""A stranger's garbage on any protocol the node speaks costs the stranger, never the node.

py-libp2p ends its whole service tree when an upstream handler raises (docs/libp2p-notes.md: a
malformed gossipsub frame raises protobuf's DecodeError out of `continuously_read_stream`).
Every inbound stream therefore passes one shield (node/net/inbound_shield.py).
"""

from __future__ import annotations

import pytest
import trio
from libp2p.peer.peerinfo import PeerInfo
from peertrain.node.api.control import call
from peertrain.node.net.host import build_host, connect
from peertrain.node.net.identity import Identity
from peertrain.testing import open_test_swarm, wait_until

UPSTREAM = ["/meshsub/1.1.0", "/ipfs/id/1.0.0", "/ipfs/ping/1.0.0", "/peertrain/dht/1.0.0"]
# a varint length of 9 then bytes that are no protobuf (field 0, wire type 7), and a
# huge varint length prefix that promises more than any frame may hold
GARBAGE = [b"\x09" + b"\xff" * 9, b"\xff\xff\xff\xff\x0f" + b"\x00" * 64]


async def _throw(attacker, victim, protocol: str, payload: bytes) -> None:
    with trio.move_on_after(3):
        try:
            stream = await attacker.new_stream(victim.host.get_id(), [protocol])
            await stream.write(payload)
            await trio.sleep(0.3)  # let the victim read it
            await stream.reset()
        except Exception:  # noqa: BLE001 - the victim may reset us first: that is its right
            pass


@pytest.mark.parametrize("protocol", UPSTREAM)
async def test_garbage_on_an_upstream_protocol_leaves_the_node_up(protocol):
    async with open_test_swarm(2) as (victim, friend):
        await wait_until(lambda: len(victim.status()["peers"]) == 1, timeout=10)
        attacker = build_host(Identity.generate())
        async with attacker.run([]):  # dial only
            info = PeerInfo(victim.host.get_id(), victim.host.get_addrs())
            await connect(attacker, info)
            for payload in GARBAGE:
                await _throw(attacker, victim, protocol, payload)
            status = await call(victim.config.control_socket, "status", timeout=5)
            assert friend.identity.peer_id.to_base58() in status["peers"]
            assert victim.scoreboard.score(friend.identity.peer_id.to_base58()) == 0
            if protocol.startswith("/meshsub"):  # identify and ping drop junk without raising
                assert victim.scoreboard.score(attacker.get_id().to_base58()) > 0
