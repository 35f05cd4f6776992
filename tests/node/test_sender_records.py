"""Gossipsub's sender records are checked once per record, and every rule of the full check
still holds for bytes not seen before (node/services/sender_records.py)."""

from __future__ import annotations

import tracemalloc

from libp2p.peer.envelope import seal_record
from libp2p.peer.peer_record import PeerRecord
from libp2p.pubsub.pb.rpc_pb2 import RPC
from libp2p.pubsub.utils import maybe_consume_signed_record
from multiaddr import Multiaddr
from peertrain.node.net.host import build_host
from peertrain.node.net.identity import Identity
from peertrain.node.services.sender_records import SenderRecordMemo


def rpc_from(identity: Identity, port: int, *, seq: int | None = None) -> RPC:
    """An RPC carrying `identity`'s signed record of one address, as py-libp2p attaches it
    (`seq` None: py-libp2p's timestamp sequence)."""
    record = PeerRecord(identity.peer_id, [Multiaddr(f"/ip4/127.0.0.1/tcp/{port}")], seq)
    rpc = RPC()
    rpc.senderRecord = seal_record(record, identity.key_pair.private_key).marshal_envelope()
    return rpc


def test_the_same_record_again_is_not_checked_again():
    memo = SenderRecordMemo(maybe_consume_signed_record)
    receiver, sender = build_host(Identity.generate()), Identity.generate()
    rpc = rpc_from(sender, 4001)
    assert all(memo(rpc, receiver, sender.peer_id) for _ in range(50))
    assert memo.full_checks == 1
    assert receiver.get_peerstore().get_peer_record(sender.peer_id) is not None  # it was stored


def test_a_new_record_of_the_peer_is_checked_and_an_older_one_fails():
    memo = SenderRecordMemo(maybe_consume_signed_record)
    receiver, sender = build_host(Identity.generate()), Identity.generate()
    old, new = rpc_from(sender, 4001, seq=10), rpc_from(sender, 4002, seq=11)
    assert memo(old, receiver, sender.peer_id) and memo(new, receiver, sender.peer_id)
    assert memo.full_checks == 2
    assert not memo(old, receiver, sender.peer_id)  # a replay: the peerstore holds seq 11
    assert memo(new, receiver, sender.peer_id) and memo.full_checks == 3


def test_a_record_of_another_peer_or_with_a_bad_signature_fails_every_time():
    memo = SenderRecordMemo(maybe_consume_signed_record)
    receiver, sender, other = (Identity.generate() for _ in range(3))
    host = build_host(receiver)
    theirs = rpc_from(other, 4001)
    forged = RPC()
    forged.senderRecord = rpc_from(sender, 4001).senderRecord[:-4] + b"\x00\x01\x02\x03"
    for _ in range(3):
        assert not memo(theirs, host, sender.peer_id)  # forwarded is not signed
        assert not memo(forged, host, sender.peer_id)
    assert memo.full_checks == 6


def test_what_one_host_checked_does_not_count_for_another():
    memo = SenderRecordMemo(maybe_consume_signed_record)
    sender = Identity.generate()
    first, second = (build_host(Identity.generate()) for _ in range(2))
    rpc = rpc_from(sender, 4001)
    assert memo(rpc, first, sender.peer_id) and memo(rpc, second, sender.peer_id)
    assert memo.full_checks == 2  # each peerstore got its copy
    assert second.get_peerstore().get_peer_record(sender.peer_id) is not None


def test_an_rpc_without_a_record_passes_as_before():
    memo = SenderRecordMemo(maybe_consume_signed_record)
    assert memo(RPC(), build_host(Identity.generate()), Identity.generate().peer_id)
    assert memo.full_checks == 0


def test_what_is_remembered_per_peer_stays_small_however_big_the_record():
    # a fresh key may sign a record of any size up to the RPC limit; the peerstore keeps its own
    # copy (py-libp2p), but the memo must not hold a second one per peer: a digest does
    accept = lambda msg, host, peer_id: True  # noqa: E731 - the memo alone, whatever checks it
    memo = SenderRecordMemo(accept)
    host = build_host(Identity.generate())
    peers = [Identity.generate().peer_id for _ in range(100)]
    records = [RPC(senderRecord=bytes([i]) * (64 << 10)) for i in range(len(peers))]
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    for peer, rpc in zip(peers, records, strict=True):
        assert memo(rpc, host, peer) and memo(rpc, host, peer)
    kept = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    assert memo.full_checks == len(peers)  # each remembered after one check
    assert kept < 100 << 10, f"{kept} bytes kept for {len(peers)} peers of 64 KiB records"
