"""Messages of a round a member has not started yet wait in a bounded buffer. A lease is free in
an open run, so one leased stranger must not fill it first: each sender has a small share, and
the round's counted members always find room."""

from __future__ import annotations

from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.peer.id import ID
from peertrain.protocol.envelope import seal
from peertrain.protocol.messages import encode
from peertrain.swarm.aggregation import build_aggregator
from peertrain.swarm.diloco.group.sharded_updates import ShardedUpdates
from peertrain.swarm.exchange.codec import ProtocolCodec
from peertrain.swarm.exchange.sharded.board import DOMAIN
from peertrain.swarm.exchange.sharded.messages import NonceReveal


def peer(key) -> str:
    return ID.from_pubkey(key.public_key).to_base58()


def message(key, round_: int, n: int) -> bytes:
    body = encode(NonceReveal(attempt=0, nonce=n.to_bytes(32, "big")))
    return seal(key, domain=DOMAIN, run="run", round=round_, payload=body).to_bytes()


def sharded_updates(me, **fields) -> ShardedUpdates:
    return ShardedUpdates(
        run_id="run",
        me=peer(me),
        key_pair=me,
        transport=None,
        rule=build_aggregator("mean"),
        codec=ProtocolCodec("int8"),
        numel=1000,
        leased=lambda p: True,  # anyone may hold a lease in an open run
        on_penalty=None,
        **fields,
    )


async def test_a_leased_stranger_cannot_fill_the_buffer_of_the_next_round_before_a_member():
    me, stranger, member = (create_new_key_pair() for _ in range(3))
    updates = sharded_updates(me, counted=lambda p: p == peer(member))
    for n in range(5000):
        updates.receive(peer(stranger), message(stranger, 1, n))
    assert 1 not in updates._opened  # a stranger's early message moves no commit deadline
    assert updates.receive(peer(member), message(member, 1, 0)) is True
    assert 1 in updates._opened  # a member's does: the round's wait counts from it
    pending = updates._pending[1]
    assert pending[peer(member)] == [message(member, 1, 0)]
    assert len(pending[peer(stranger)]) <= 64  # one sender's share, whoever it is


async def test_a_member_restarted_at_a_later_round_keeps_that_rounds_early_messages():
    """A member restarted from its checkpoint of round 3 has exchanged no round since: the
    others' commitments of round 3, which come before its own, wait for it all the same (they
    were dropped, it decided alone, and every member of a 25M run disputed every shard)."""
    me, member = create_new_key_pair(), create_new_key_pair()
    at = {"round": 3}
    updates = sharded_updates(me, counted=lambda p: True, at_round=lambda: at["round"])
    for round_ in (2, 3, 5, 6):
        updates.receive(peer(member), message(member, round_, 0))
    assert sorted(updates._pending) == [3, 5]  # its round and the next two, none before
    at["round"] = 9  # adopted the group's state of round 9 meanwhile
    updates.receive(peer(member), message(member, 9, 0))
    assert 9 in updates._pending
