"""Memory stays bounded: a flood from one peer, many owners, and big state all hit hard caps."""

from __future__ import annotations

import random
import tracemalloc

import pytest
import trio
from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.peer.id import ID
from peertrain.crdt.errors import StateFull
from peertrain.crdt.orset import AWORSet
from peertrain.crdt.replicator import Replicator, ReplicatorConfig
from peertrain.crdt.rundoc import CHECKPOINT_WINDOW, RunDoc
from peertrain.crdt.runstate import RunState, StateLimits
from peertrain.crdt.signed import seal_delta
from peertrain.crdt.wire import int_codec
from peertrain.crdt.writer import RunWriter
from peertrain.testing import wait_until
from peertrain.testing.crdt_network import new_run, open_memory_swarm
from peertrain.testing.memory_router import MemoryRouter


def _peer():
    key = create_new_key_pair()
    return key, ID.from_pubkey(key.public_key).to_base58()


def test_a_windowed_or_set_holds_at_most_window_dots_per_writer_in_any_delivery_order():
    source, deltas = AWORSet(int_codec(), window=8), []
    for i in range(1000):
        deltas.append(source.add("w", i))
        if i % 3 == 0:
            deltas.append(source.remove(i - 1))
    random.Random(1).shuffle(deltas)
    replica = AWORSet(int_codec(), window=8)
    for delta in deltas[::2] + deltas:  # half of them twice
        replica.merge(delta)
        assert replica.entry_count() <= 8 and replica.context.cloud_size() <= 8
    assert replica == source and source.elements() <= set(range(992, 1000))


class Flooder:
    """A peer writing its own slots as fast as it can: valid, signed, relentless."""

    def __init__(self, run_id: str) -> None:
        self.key, self.id = _peer()
        self.state = RunState(run_id)
        self.out: list[bytes] = []
        self.seq = 0
        self.writer = RunWriter(self.state, self.id, on_delta=self._sign)

    def _sign(self, delta: RunDoc) -> None:
        self.seq += 1
        self.out.append(
            seal_delta(self.key, self.id, run_id=self.state.run_id, seq=self.seq, doc=delta).raw
        )

    def write(self, i: int) -> None:
        if i % 3 == 0:
            self.writer.add_progress(1)
        elif i % 3 == 1:
            self.writer.provide_checkpoint(i, i.to_bytes(32, "big"))
        else:
            self.writer.announce(role=f"r{i}", addrs=[f"/ip4/10.0.0.1/tcp/{i}"], lease_ms=60_000)


def test_a_flood_of_valid_deltas_from_one_peer_does_not_grow_memory():
    creator_key, _ = _peer()
    run_id, _ = new_run(creator_key)
    flooder = Flooder(run_id)
    for i in range(3000):
        flooder.write(i)
    key, me = _peer()
    endpoint = MemoryRouter().endpoint(me)
    config = ReplicatorConfig(seen_cache=512, max_proof_deltas=8)
    rep = Replicator(
        state=RunState(run_id), key_pair=key, pubsub=endpoint, exchange=endpoint, config=config
    )
    flood = flooder.out
    random.Random(2).shuffle(flood)  # reordered, so dot clouds and gaps are exercised too

    def deliver(batch):
        for raw in batch:  # fresh bytes objects, as the network would hand them over
            rep.handle_gossip(flooder.id, bytes(bytearray(raw)))

    tracemalloc.start()
    try:
        deliver(flood[:1500])  # warm up: caches and tables reach their caps
        before = tracemalloc.get_traced_memory()[0]
        deliver(flood[1500:] + flood[-100:])  # 1500 new deltas, then recent duplicates
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    stats = rep.statistics()
    assert stats.applied == 3000 and stats.duplicates == 100 and stats.rejected == 0
    assert rep.state.doc == flooder.state.doc  # everything merged, nothing lost
    assert stats.state.checkpoint_entries <= CHECKPOINT_WINDOW
    assert stats.state.dot_cloud <= CHECKPOINT_WINDOW
    assert stats.proofs.envelopes <= 1 + config.max_proof_deltas
    assert len(rep.intake._seen) <= 512 and len(rep.intake._prechecked) <= 256
    # Keeping each delta (~500 B as bytes alone) would grow this by > 700 kB.
    assert grown < 200 * 1024, f"memory grew by {grown} bytes over 1500 more deltas"


def test_owner_count_is_capped_and_expired_owners_make_room():
    creator_key, _ = _peer()
    run_id, _ = new_run(creator_key)
    clock = [1_800_000_000_000]
    limits = StateLimits(max_owners=3, expiry_grace_ms=1000)
    state = RunState(run_id, limits=limits, wall_ms=lambda: clock[0])
    writers = []
    for _ in range(4):
        _, peer = _peer()
        source = RunState(run_id, wall_ms=lambda: clock[0])
        w = RunWriter(source, peer)
        writers.append((peer, w.announce(role="t", addrs=[], lease_ms=1000)))
    for peer, delta in writers[:3]:
        state.apply_remote(peer, delta)
    with pytest.raises(StateFull):
        state.apply_remote(*writers[3])
    clock[0] += 1000 + 1000 + 1  # leases over and the grace period too
    state.apply_remote(*writers[3])  # the full table collects the expired before refusing
    assert state.owners() == {writers[3][0]}


async def test_inboxes_are_bounded_and_overflow_is_counted():
    router = MemoryRouter(queue_size=16)
    sender, receiver = router.endpoint("a"), router.endpoint("b")
    inbox = await receiver.subscribe("t")
    async with trio.open_nursery() as nursery:
        await nursery.start(router.run)
        for i in range(500):
            await sender.publish("t", i.to_bytes(4, "big"))
        await trio.sleep(0.05)
        assert inbox.statistics().current_buffer_used == 16
        assert router.stats.overflowed == 500 - 16
        nursery.cancel_scope.cancel()


async def test_budget_limited_sync_replies_still_bring_a_joiner_everything():
    config = ReplicatorConfig(sync_interval=60, max_sync_reply_bytes=2048)
    async with open_memory_swarm(12, config=config) as (router, nodes):
        for node in nodes:
            for r in range(10):
                node.replicator.writer.provide_checkpoint(r, bytes([r]) * 32)
        # the joiner must end equal to nodes[0], so let the swarm settle first (slow when loaded)
        await wait_until(lambda: len({n.state.digest() for n in nodes}) == 1, timeout=30)
        key, peer = _peer()
        endpoint = router.endpoint(peer)
        joiner = Replicator(
            state=RunState(nodes[0].state.run_id),
            key_pair=key,
            pubsub=endpoint,
            exchange=endpoint,
            config=config,
        )
        first = await joiner.sync_with(nodes[0].peer_id)
        assert first.more and len(b"".join(first.envelopes)) <= 2048
        assert await joiner.bootstrap([nodes[0].peer_id])
        assert joiner.state.summary() == nodes[0].state.summary()
