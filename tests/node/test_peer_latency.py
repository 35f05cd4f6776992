"""Ping round trips to connected peers (`peer_latency_ms` in status, the dashboard's peer graph):
real libp2p hosts on loopback."""

from __future__ import annotations

from peertrain.testing import open_test_swarm, wait_until


async def test_each_connected_peer_gets_a_round_trip_time_and_only_connected_peers_do():
    async with open_test_swarm(3) as nodes:
        await wait_until(lambda: all(len(n.status()["peers"]) == 2 for n in nodes), timeout=20)
        await wait_until(lambda: len(nodes[0].status()["peer_latency_ms"]) == 2, timeout=20)
        status = nodes[0].status()
        assert set(status["peer_latency_ms"]) == set(status["peers"])
        assert all(0 < ms < 5000 for ms in status["peer_latency_ms"].values())
        await nodes[0].host.disconnect(nodes[2].host.get_id())
        await nodes[0].latency.sweep()  # a disconnected peer's figure goes (it may come back)
        connected = {p.to_base58() for p in nodes[0].host.get_connected_peers()}
        assert set(nodes[0].status()["peer_latency_ms"]) <= connected
