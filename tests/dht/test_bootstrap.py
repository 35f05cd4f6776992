"""Joining: a node that bootstraps through a peer is in that peer's table, and it in its own."""

from __future__ import annotations

from peertrain.dht import DhtConfig
from peertrain.dht.keyspace import peer_key

# identify never gets to say who serves (as when py-libp2p's identify fails on a fresh
# connection under load): only DHT requests and answers feed the tables
NO_IDENTIFY = DhtConfig(publish_peer_record=False, request_timeout=2.0, identify_wait=0.0)


async def test_a_bootstrap_peer_is_asked_even_when_inbound_joiners_are_nearer(dht_swarm):
    async with dht_swarm(6, config=NO_IDENTIFY) as swarm:
        nodes = swarm.nodes
        joiner = nodes[0]
        by_distance = sorted(
            range(1, 6), key=lambda i: peer_key(nodes[i].own) ^ joiner.table.own_key
        )
        nearest, far = by_distance[0], by_distance[-1]
        # the nearest peer joins through our joiner first: the joiner's table holds it
        await swarm.join_all(indices=[nearest], how="first")
        assert nodes[nearest].own in joiner.table
        # then the joiner bootstraps through a farther peer; its one-wide walk would start
        # from the nearer peer already in its table
        await joiner.bootstrap([swarm.info(far)])
        assert nodes[far].own in joiner.table
        assert joiner.own in nodes[far].table
