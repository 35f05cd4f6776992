"""Many DHT nodes in one process over real libp2p connections: find, survive, expire, resolve."""

from __future__ import annotations

import random

import trio
from peertrain.dht import DhtConfig, DhtMode, keep_announced, peer_record_key, stage_key
from peertrain.dht.records import now_ms
from peertrain.testing import wait_until

FAST = DhtConfig(publish_peer_record=False, request_timeout=2.0)
# the product's request timeout: 32 nodes share one process, and on a loaded machine a tighter
# one counts slow peers as failed
MANY = DhtConfig(publish_peer_record=False)


async def get_everywhere(nodes, key):
    """`get(key)` on every node, concurrently in small batches; {node index: result}."""
    results = {}

    async def one(index, node):
        results[index] = await node.get(key)

    for start in range(0, len(nodes), 8):
        async with trio.open_nursery() as nursery:
            for index in range(start, min(start + 8, len(nodes))):
                nursery.start_soon(one, index, nodes[index])
    return results


def held_by(nodes, key) -> int:
    return sum(1 for node in nodes if node.store.get(key, now=now_ms()))


async def test_32_nodes_find_what_any_node_stored_and_still_do_after_a_third_die(dht_swarm):
    async with dht_swarm(32, config=MANY, seed=3) as swarm:
        await swarm.join_all()
        nodes = swarm.nodes
        # a join whose first dial failed (a loaded machine) is retried by the node itself
        await wait_until(
            lambda: all(node.bootstrapped for node in nodes),
            timeout=30,
            interval=0.1,
            what="every node bootstrapped",
        )
        rng = random.Random(5)
        single = {stage_key("run", i): rng.randrange(32) for i in range(4)}
        for key, writer in single.items():
            await nodes[writer].put(key, {"by": writer}, ttl=120)
            # counted in the stores, not in the put's answer: on a loaded machine a replica's
            # "stored" may come after the request timeout, and the put then counts it failed
            await wait_until(
                lambda k=key: held_by(nodes, k) >= MANY.replicas // 2,
                timeout=10,
                what=f"{key} stored at half its replicas",
            )
        shared, writers = stage_key("run", 99), rng.sample(range(32), 4)
        for writer in writers:
            await nodes[writer].put(shared, {"by": writer}, ttl=120)

        def check(results, expected_writers):
            for index, found in results.items():
                assert {r.value["by"] for r in found.values()} == expected_writers, (index, found)

        for key, writer in single.items():
            check(await get_everywhere(nodes, key), {writer})
        check(await get_everywhere(nodes, shared), set(writers))

        doomed = rng.sample(range(32), 32 // 3)
        for index in doomed:
            await swarm.kill(index)
        survivors = swarm.live()
        dead = {nodes[d].own for d in doomed}
        await wait_until(
            lambda: not any(n.table.is_verified(peer) for n in survivors for peer in dead)
        )
        for key, writer in single.items():
            check(await get_everywhere(survivors, key), {writer})
        check(await get_everywhere(survivors, shared), set(writers))
        late = stage_key("run", 7)
        await survivors[0].put(late, {"by": "late"}, ttl=60)
        check(await get_everywhere(survivors, late), {"late"})


async def test_expired_entries_disappear_and_reannounced_ones_stay_until_their_writer_dies(
    dht_swarm,
):
    # a renewal every EVERY s leaves a put TTL - EVERY s to land before the last one lapses:
    # room for a walk over 10 nodes in one process on a loaded machine
    ttl, every = 2.0, 0.4
    async with dht_swarm(10, config=FAST) as swarm:
        await swarm.join_all()
        nodes = swarm.nodes
        brief, kept = stage_key("run", 1), stage_key("run", 2)
        await nodes[1].put(brief, {"x": 1}, ttl=ttl)
        assert len(await nodes[5].get(brief)) == 1
        async with trio.open_nursery() as nursery:
            await nursery.start(
                lambda task_status: keep_announced(
                    nodes[2],
                    kept,
                    lambda: {"alive": True},
                    ttl=ttl,
                    every=every,
                    task_status=task_status,
                )
            )
            await trio.sleep(2 * ttl)  # and the housekeeping's purge, every second
            assert await nodes[5].get(brief) == {}
            assert not any(n.store.get(brief, now=10**15) for n in nodes)  # purged, not just hidden
            assert len(await nodes[7].get(kept)) == 1  # outlived two of its ttls by renewal
            await swarm.kill(2)
            nursery.cancel_scope.cancel()
        await trio.sleep(ttl + 0.2)
        assert await nodes[7].get(kept) == {}


async def test_client_mode_nodes_read_and_write_but_nobody_routes_or_stores_through_them(dht_swarm):
    def config(index):
        return FAST if index < 8 else DhtConfig(mode=DhtMode.CLIENT, publish_peer_record=False)

    async with dht_swarm(10, config=config) as swarm:
        await swarm.join_all()
        servers, clients = swarm.nodes[:8], swarm.nodes[8:]
        await clients[0].put(stage_key("r", 5), {"from": "client"}, ttl=60)
        assert (await clients[1].get(stage_key("r", 5)))[clients[0].own.to_base58()].value == {
            "from": "client"
        }
        assert await servers[3].get(stage_key("r", 5))
        client_ids = {c.own for c in clients}
        assert not any(client_ids & set(s.table.peers()) for s in servers)
        assert all(len(c.table) > 0 and len(c.store) == 0 for c in clients)


def bare(addrs) -> set[str]:
    return {str(a).split("/p2p/")[0] for a in addrs}


async def test_a_bare_peer_id_resolves_through_its_signed_peer_record(dht_swarm):
    def config(index):
        return DhtConfig(mode=DhtMode.CLIENT, publish_peer_record=False) if index == 9 else FAST

    async with dht_swarm(10, config=config) as swarm:
        await swarm.join_all()
        target, seeker = swarm.nodes[9], swarm.nodes[8]
        relay = f"/ip4/127.0.0.1/tcp/9/p2p/{swarm.nodes[0].own}/p2p-circuit/p2p/{target.own}"
        target.extra_addrs = [relay]  # what a relay reservation would add; identify cannot carry it
        assert await target.publish_peer_record() >= 1
        record = (await seeker.get(peer_record_key(target.own)))[target.own.to_base58()]
        assert record.value["addrs"][0] == relay
        for peer in target.host.get_connected_peers():  # now only its record can lead to it
            await target.host.disconnect(peer)
        await wait_until(
            lambda: not any(target.own in n.host.get_connected_peers() for n in swarm.nodes[:9])
        )
        seeker.host.get_peerstore().clear_addrs(target.own)
        seeker.book.forget(target.own)
        assert seeker.book.dial_addrs(target.own) == []  # the seeker has no address for it
        found = await seeker.resolve(target.own)
        assert found.how == "record" and target.own in seeker.host.get_connected_peers()
        assert bare(found.info.addrs) & bare(target.host.get_addrs())


async def test_a_client_only_its_neighbour_knows_resolves_through_that_neighbour(dht_swarm):
    def config(index):
        return DhtConfig(mode=DhtMode.CLIENT, publish_peer_record=False) if index == 9 else FAST

    async with dht_swarm(10, config=config) as swarm:
        await swarm.join_all(indices=range(1, 9))
        hidden, neighbour, seeker = swarm.nodes[9], swarm.nodes[3], swarm.nodes[8]
        await hidden.host.connect(swarm.info(3))
        await wait_until(lambda: hidden.own in neighbour.host.get_connected_peers())
        assert not any(hidden.own in n.table for n in swarm.nodes)
        assert hidden.own not in seeker.host.get_connected_peers()
        found = await seeker.resolve(hidden.own, timeout=10)
        assert found.how == "lookup" and hidden.own in seeker.host.get_connected_peers()
        assert not any(n.store.get(peer_record_key(hidden.own), now=0) for n in swarm.nodes)
