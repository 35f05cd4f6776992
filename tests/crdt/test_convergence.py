"""Replicas converge through a lossy, duplicating, reordering network, and joiners catch up."""

from __future__ import annotations

import math
import random

import trio
from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.peer.id import ID
from peertrain.crdt.replicator import Replicator, ReplicatorConfig
from peertrain.crdt.runstate import RunState
from peertrain.testing import wait_until
from peertrain.testing.crdt_network import converged, new_run, open_memory_swarm
from peertrain.testing.memory_router import Faults, MemoryRouter

LOSSY = Faults(drop=0.2, duplicate=0.1, delay=0.02, reorder=0.2, reorder_delay=0.05)
FAST_SYNC = ReplicatorConfig(sync_interval=0.5)


async def _random_updates(nodes, rng: random.Random, *, rounds: int) -> dict[str, int]:
    """Half the nodes write at random each round, concurrently; returns each node's progress."""
    written = {n.peer_id: 0 for n in nodes}
    for r in range(rounds):
        for node in rng.sample(nodes, k=len(nodes) // 2):
            w = node.replicator.writer
            action = rng.randrange(4)
            if action == 0:
                amount = rng.randint(1, 5)
                w.add_progress(amount)
                written[node.peer_id] += amount
            elif action == 1:
                w.provide_checkpoint(r, bytes([r % 256]) * 32)
            elif action == 2:
                w.announce(
                    role=rng.choice(["trainer", "stage:0", "stage:1"]),
                    addrs=[f"/ip4/10.0.0.{r % 250}/tcp/4001"],
                    throughput=float(r),
                    lease_ms=60_000,
                )
            else:
                w.withdraw_checkpoint(r - 1, bytes([(r - 1) % 256]) * 32)
        await trio.sleep(rng.uniform(0, 0.03))
    return written


async def test_sixteen_nodes_converge_within_five_seconds_through_a_lossy_router():
    rng = random.Random(5)
    async with open_memory_swarm(16, faults=LOSSY, seed=5, config=FAST_SYNC) as (router, nodes):
        written = await _random_updates(nodes, rng, rounds=30)
        with trio.fail_after(5):
            await wait_until(lambda: converged(nodes), timeout=math.inf, interval=0.01)
        assert router.stats.dropped > 0 and router.stats.duplicated > 0  # faults did happen
        for node in nodes:
            state = node.state
            assert len(state.members()) == 16
            assert {p: state.progress(p) for p in written} == written
            assert state.doc == nodes[0].state.doc  # identical documents, not just digests


async def test_a_single_change_reaches_everyone_and_digests_track_it():
    async with open_memory_swarm(8, faults=LOSSY, seed=9, config=FAST_SYNC) as (_, nodes):
        with trio.fail_after(5):
            await wait_until(lambda: converged(nodes), timeout=math.inf, interval=0.01)
        before = nodes[0].state.digest()
        nodes[3].replicator.writer.provide_checkpoint(7, b"\x07" * 32)
        assert nodes[3].state.digest() != before
        with trio.fail_after(5):
            await wait_until(lambda: converged(nodes), timeout=math.inf, interval=0.01)
        ref, providers = nodes[5].state.latest_checkpoint()
        assert ref.round == 7 and providers == {nodes[3].peer_id}


async def test_a_joiner_bootstraps_the_full_state_with_the_manifest():
    async with open_memory_swarm(6, seed=3, config=FAST_SYNC) as (router, nodes):
        for i, node in enumerate(nodes):
            node.replicator.writer.add_progress(10 + i)
            node.replicator.writer.provide_checkpoint(1, b"\x01" * 32)
        with trio.fail_after(5):
            await wait_until(lambda: converged(nodes), timeout=math.inf, interval=0.01)
        # A peer that missed all gossip: only anti-entropy can teach it, in one bootstrap.
        key = create_new_key_pair()
        endpoint = router.endpoint(ID.from_pubkey(key.public_key).to_base58())
        joiner = Replicator(
            state=RunState(nodes[0].state.run_id),
            key_pair=key,
            pubsub=endpoint,
            exchange=endpoint,
            config=ReplicatorConfig(sync_interval=60),
        )
        assert await joiner.bootstrap([nodes[4].peer_id])
        assert joiner.state.manifest == nodes[0].state.manifest
        assert joiner.state.total_progress() == sum(10 + i for i in range(6))
        assert joiner.state.checkpoints()[1][b"\x01" * 32] == {n.peer_id for n in nodes}
        assert joiner.state.digest() == nodes[4].state.digest()


async def test_the_manifest_travels_both_ways_in_one_exchange():
    async with open_memory_swarm(1, seed=4, config=FAST_SYNC) as (router, nodes):
        holder = nodes[0].replicator
        newcomers = []
        for _ in range(2):
            key = create_new_key_pair()
            endpoint = router.endpoint(ID.from_pubkey(key.public_key).to_base58())
            rep = Replicator(
                state=RunState(holder.state.run_id),
                key_pair=key,
                pubsub=endpoint,
                exchange=endpoint,
                config=ReplicatorConfig(sync_interval=60),
            )
            endpoint.serve(rep.handle_sync)
            newcomers.append(rep)
        pulled, pushed_to = newcomers
        await pulled.sync_with(holder.peer_id)  # pull: the reply carries it
        await holder.sync_with(pushed_to.peer_id)  # push: the responder said it lacks it
        for rep in newcomers:
            assert rep.state.manifest == holder.state.manifest
            assert rep.state.digest() == holder.state.digest()


class _BrokenExchange:
    """A transport whose streams fail with its own (non-peertrain) error type."""

    def peers(self):
        return ["somebody"]

    async def request(self, peer, request):
        raise ConnectionResetError("stream reset by the network")


async def test_transport_failures_do_not_stop_replication():
    key = create_new_key_pair()
    endpoint = MemoryRouter().endpoint(ID.from_pubkey(key.public_key).to_base58())
    state = RunState(new_run(key)[0])
    rep = Replicator(state=state, key_pair=key, pubsub=endpoint, exchange=_BrokenExchange())
    assert await rep.sync_with("somebody") is None
    assert not await rep.bootstrap()
    assert rep.statistics().sync_failures == 2
