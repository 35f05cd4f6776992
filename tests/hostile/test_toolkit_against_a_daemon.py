"""The whole toolkit against one node: it stays up, answers status, and its honest peer keeps its
connection and a clean score."""

from __future__ import annotations

import json

import trio
from peertrain.node.api.control import call
from peertrain.testing import open_test_swarm, wait_until
from peertrain.testing.attacks import Attacker, control_junk


def _protocols(node) -> list[str]:
    return sorted(str(p) for p in node.host.get_mux().handlers if p)


async def test_every_attack_of_the_toolkit_leaves_the_node_serving_and_the_honest_peer_clean():
    async with open_test_swarm(2) as (victim, honest):
        await wait_until(lambda: len(victim.status()["peers"]) == 1, timeout=10)
        honest_id = honest.identity.peer_id.to_base58()
        addr = f"{victim.addrs()[0]}"
        protocols = _protocols(victim)
        assert "/meshsub/1.1.0" in protocols and "/peertrain/dht/1.0.0" in protocols
        async with Attacker.open(seed=1) as attacker:
            victim_id = await attacker.connect(addr)
            await attacker.garbage_streams(victim_id, protocols, seconds=8)
            await attacker.huge_length_prefixes(victim_id, protocols, seconds=4)
            await attacker.stream_flood(victim_id, "/peertrain/dht/1.0.0", streams=64, seconds=3)
            await attacker.slowloris(victim_id, protocols[0], streams=8, seconds=3)
        async with Attacker.open(seed=2) as sybils:
            await sybils.connection_flood(addr, identities=12, seconds=4)
        status = await call(victim.config.control_socket, "status", timeout=5)
        assert honest_id in status["peers"]
        assert victim.scoreboard.score(honest_id) == 0


async def test_control_socket_junk_gets_errors_and_the_daemon_goes_on():
    async with open_test_swarm(1) as (node,):
        for line in control_junk():
            stream = await trio.open_unix_socket(str(node.config.control_socket))
            async with stream:
                await stream.send_all(line)
                reply = json.loads(await stream.receive_some(1 << 16) or b"{}")
            assert "error" in reply, line[:60]
        assert (await call(node.config.control_socket, "status"))["peer_id"]
