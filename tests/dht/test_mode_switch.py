"""A running DHT node switches between server and client mode (its reachability decides)."""

from __future__ import annotations

from peertrain.dht import DhtConfig, DhtMode, stage_key
from peertrain.testing import wait_until

FAST = DhtConfig(publish_peer_record=False, request_timeout=2.0)


async def test_a_server_turned_client_leaves_every_table_stores_nothing_and_can_return(dht_swarm):
    async with dht_swarm(8, config=FAST, seed=1) as swarm:
        await swarm.join_all(how="first")
        nodes, node = swarm.nodes, swarm.nodes[7]
        servers = nodes[:7]
        await wait_until(lambda: all(n.bootstrapped for n in nodes))
        for other in nodes[:7]:  # every server holds it as one, over a long-lived DHT stream
            await other.host.connect(swarm.info(7))
            assert await other.probe(node.own)
        assert all(n.table.is_verified(node.own) for n in nodes[:7])

        await node.set_mode(DhtMode.CLIENT)
        assert node.statistics().mode == "client"
        # no server counts it as one any more (a peer that only heard of it from others drops
        # it at its first failed request)
        await wait_until(lambda: not any(n.table.is_verified(node.own) for n in servers), timeout=5)
        assert not await nodes[0].probe(node.own)  # the open stream no longer answers either
        keys = [stage_key("run", i) for i in range(6)]
        for index, key in enumerate(keys):  # puts from everywhere: none lands on the client
            await nodes[index].put(key, {"i": index}, ttl=60)
        assert all(not node.store.get(key, now=0) for key in keys)
        assert not any(n.table.is_verified(node.own) for n in nodes[:7])
        # a client still reads and writes through the servers
        assert set(await node.get(keys[2])) == {nodes[2].own.to_base58()}
        assert await node.put(stage_key("run", 99), {"i": 99}, ttl=60) >= 1

        await node.set_mode(DhtMode.SERVER)
        assert node.statistics().mode == "server"
        # told by its Ping: every connected server holds it again
        await wait_until(lambda: all(n.table.is_verified(node.own) for n in servers), timeout=5)
        assert await nodes[0].probe(node.own)
        await node.put(stage_key("run", 100), {"i": 100}, ttl=60)
        assert node.store.get(stage_key("run", 100), now=0)  # a server among the nearest keeps it
