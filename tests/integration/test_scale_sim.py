"""The scale simulation's invariants at a small size (benchmarks/scale_sim.py runs it at 1k-10k):
our real DHT finds what it stored over simulated links, a change reaches every replica, an
announcement every member, and simulated time runs far ahead of the CPU time it costs."""

from __future__ import annotations

import random
import statistics
import time

import trio
from peertrain.dht import peer_record_key
from peertrain.dht.keyspace import peer_key, record_key
from peertrain.testing.sim_dht import EPOCH, open_sim_dht
from peertrain.testing.sim_links import draw_access, rtt_between
from peertrain.testing.sim_scenarios import SIM_DHT_CONFIG, dht_scenario, gossip_scenario

N_NEAREST = 300


def test_link_model_gives_residential_round_trips_and_rates():
    rng = random.Random(1)
    nodes = [draw_access(rng) for _ in range(400)]
    rtts = [rtt_between(a, b) for a, b in zip(nodes, nodes[1:], strict=False)]
    assert 0.05 < statistics.median(rtts) < 0.3  # intercontinental mixes: tens to hundreds of ms
    assert min(rtts) > 0.005
    assert 2e6 < statistics.median(n.up for n in nodes) < 10e6  # bytes/s: tens of Mbit/s


async def test_dht_lookups_find_every_stored_record_in_simulated_time(autojump_clock):
    cpu, start = time.process_time(), trio.current_time()
    figures = await dht_scenario(
        48, seed=3, join_window=5.0, settle=10.0, records=8, gets=24, window=5.0, churn=False
    )
    simulated = trio.current_time() - start
    assert figures.found == 1.0
    assert all(g.hops >= 1 and g.requests >= 1 and g.seconds > 0 for g in figures.gets)
    assert statistics.mean(g.hops for g in figures.gets) < 4  # a few hops among 48 nodes
    assert figures.msgs_per_node_min > 0 and figures.table_mean > 5
    assert simulated >= 20.0  # join + settle + window, in simulated seconds
    assert simulated > 2 * (time.process_time() - cpu)  # CPU, not wall: load-proof


async def test_a_change_reaches_every_replica_and_an_announcement_every_member(autojump_clock):
    figures = await gossip_scenario(64, seed=2, window=5.0)
    assert figures.converged == 1.0 and 0 < figures.converge_max < 5.0
    assert figures.reach == 1.0 and figures.reach_all is not None and figures.reach_all < 5.0
    assert figures.reach_50 <= figures.reach_99 <= figures.reach_all
    assert figures.msgs_per_node_min > 0  # anti-entropy keeps talking after convergence


async def test_a_put_lands_at_the_nearest_peer_of_its_key_after_a_swarm_joined(autojump_clock):
    """Kademlia's promise, which a get relies on: the node nearest a key (by XOR) holds what was
    put under it. It fails when a joining node's walks are too narrow for its neighbours to learn
    of it: a put near it then stops at them (1k simulated nodes, self-lookups 3 wide: 12 of 64
    records missed their nearest peer)."""
    async with open_sim_dht(N_NEAREST, seed=5, config=SIM_DHT_CONFIG, loss=False) as sim:
        await sim.join_all(window=30.0)
        await trio.sleep(20.0)  # every node's wide walk
        writers = sim.rng.sample(sim.nodes, 24)
        async with trio.open_nursery() as nursery:
            for dht in writers:
                nursery.start_soon(dht.publish_peer_record)
        now_ms = int((EPOCH + trio.current_time()) * 1000)
        missed = []
        for dht in writers:
            key = peer_record_key(dht.own)
            nearest = min(sim.nodes, key=lambda d: peer_key(d.own) ^ record_key(key))
            if not nearest.store.get(key, now=now_ms):
                missed.append(key)
        assert not missed, f"{len(missed)} of {len(writers)} records are not at their nearest peer"
