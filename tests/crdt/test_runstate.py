"""RunState views, the local writer, hybrid clocks, and a restart that forgot its own state."""

from __future__ import annotations

import pytest
from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.peer.id import ID
from peertrain.crdt.errors import ClockDrift
from peertrain.crdt.hlc import HybridClock, Stamp
from peertrain.crdt.replicator import Replicator
from peertrain.crdt.runstate import RunState
from peertrain.crdt.writer import RunWriter
from peertrain.testing.crdt_network import new_run
from peertrain.testing.memory_router import MemoryRouter

NOW = 1_800_000_000_000


class Clock:
    def __init__(self) -> None:
        self.ms = NOW

    def __call__(self) -> int:
        return self.ms


def _id() -> str:
    return ID.from_pubkey(create_new_key_pair().public_key).to_base58()


@pytest.fixture
def run():
    clock = Clock()
    run_id, _ = new_run(create_new_key_pair())
    shared = RunState(run_id, wall_ms=clock)  # everyone's writes land here, as after replication

    def writer(peer: str | None = None) -> RunWriter:
        return RunWriter(shared, peer or _id())

    return clock, shared, writer


def test_hybrid_clock_never_runs_backwards_and_refuses_far_future_stamps():
    wall = Clock()
    clock = HybridClock("me", wall_ms=wall, max_drift_ms=1000)
    a = clock.now()
    wall.ms -= 5000  # the wall clock steps back
    b = clock.now()
    assert b > a and b.wall_ms == a.wall_ms and b.counter == a.counter + 1
    clock.observe(Stamp(wall.ms + 900, 7, "them"))  # ahead, within the drift
    assert clock.now() > Stamp(wall.ms + 900, 7, "them")
    with pytest.raises(ClockDrift):
        clock.observe(Stamp(wall.ms + 5000, 0, "liar"))


def test_leaving_ends_the_lease_and_the_member_drops_out(run):
    clock, state, writer = run
    a, b = writer(), writer()
    a.announce(role="trainer", addrs=["/ip4/10.0.0.1/tcp/1/p2p/x/p2p-circuit"], lease_ms=10_000)
    b.announce(role="stage:1", addrs=[], throughput=3.5, lease_ms=10_000)
    assert set(state.members()) == {a.peer_id, b.peer_id}
    assert state.members()[a.peer_id].info.relay_addrs == ("/ip4/10.0.0.1/tcp/1/p2p/x/p2p-circuit",)
    clock.ms += 1
    a.leave()
    assert set(state.members()) == {b.peer_id}
    clock.ms += 10_000
    assert state.members() == {} and state.summary() == {}


def test_checkpoint_views_list_live_providers_and_withdrawals_are_own_only(run):
    clock, state, writer = run
    a, b, c = writer(), writer(), writer()
    for w in (a, b, c):
        w.announce(role="trainer", addrs=[], lease_ms=10_000)
    h1, h2 = b"\x01" * 32, b"\x02" * 32
    a.provide_checkpoint(4, h1)
    b.provide_checkpoint(4, h1)
    c.provide_checkpoint(4, h2)
    a.provide_checkpoint(3, h1)
    assert state.checkpoints()[4] == {h1: {a.peer_id, b.peer_id}, h2: {c.peer_id}}
    ref, providers = state.latest_checkpoint()
    assert (ref.round, ref.content_hash, providers) == (4, h1, {a.peer_id, b.peer_id})
    b.withdraw_checkpoint(4, h1)
    assert state.checkpoints()[4][h1] == {a.peer_id}
    clock.ms += 1
    a.leave()  # a's announcements stay in the document but no longer count
    assert state.checkpoints() == {4: {h2: {c.peer_id}}}


def test_a_ban_needs_votes_from_more_than_half_of_the_live_members(run):
    _, state, writer = run
    ws = [writer() for _ in range(5)]
    for w in ws:
        w.announce(role="trainer", addrs=[], lease_ms=10_000)
    accused = ws[4].peer_id
    ws[4].vote_ban(accused, b"self")  # a peer's vote about itself does not count
    ws[0].vote_ban(accused, b"evidence-hash")
    ws[1].vote_ban(accused, b"evidence-hash")
    assert state.banned() == set()
    ws[2].vote_ban(accused, b"other-evidence")
    assert state.banned() == {accused}
    assert state.ban_votes()[accused][ws[2].peer_id] == b"other-evidence"
    ws[2].withdraw_ban(accused)
    assert state.banned() == set()


async def test_a_restarted_peer_that_writes_before_syncing_is_still_seen():
    key = create_new_key_pair()
    me = ID.from_pubkey(key.public_key).to_base58()
    run_id, _ = new_run(key)
    router, clock = MemoryRouter(), Clock()

    def replicator(peer_key) -> Replicator:
        endpoint = router.endpoint(ID.from_pubkey(peer_key.public_key).to_base58())
        state = RunState(run_id, wall_ms=clock)
        return Replicator(state=state, key_pair=peer_key, pubsub=endpoint, exchange=endpoint)

    before = replicator(key)
    for r in range(5):
        before.writer.provide_checkpoint(r, bytes([r]) * 32)
    peer = replicator(create_new_key_pair())
    peer.handle_gossip(me, before.own_snapshot().raw)
    assert len(peer.state.doc.checkpoints) == 5
    clock.ms += 2000
    after = replicator(key)  # the same key two seconds later, remembering nothing
    after.writer.provide_checkpoint(9, b"\x09" * 32)
    assert peer.handle_gossip(me, after.own_snapshot().raw)
    assert {ref.round for ref in peer.state.doc.checkpoints.elements()} == {9}
    assert peer.state.doc.checkpoints == after.state.doc.checkpoints


def test_the_gossip_validator_checks_without_applying():
    key, other = create_new_key_pair(), create_new_key_pair()
    run_id, _ = new_run(key)
    source = Replicator(state=RunState(run_id), key_pair=key, pubsub=None, exchange=None)
    source.writer.add_progress(3)
    raw = source.own_snapshot().raw
    target = Replicator(state=RunState(run_id), key_pair=other, pubsub=None, exchange=None)
    assert target.validate_gossip("x", raw)
    assert target.state.owners() == set()
    assert not target.validate_gossip("x", raw[:-1] + bytes([raw[-1] ^ 1]))
    assert target.handle_gossip("x", raw) and target.state.total_progress() == 3
