"""Forged or foreign writes are refused, cost the sender a penalty, and change nothing."""

from __future__ import annotations

import dataclasses

import pytest
from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.peer.id import ID
from peertrain.crdt.counters import GCounter
from peertrain.crdt.errors import ClockDrift, ForbiddenWrite, WrongRun
from peertrain.crdt.hlc import Stamp
from peertrain.crdt.lwwmap import LWWMap
from peertrain.crdt.manifest import RunManifest, open_manifest, run_id_of, sign_manifest
from peertrain.crdt.records import MEMBER, PEER, CheckpointRef, MemberInfo
from peertrain.crdt.replicator import Penalty, Replicator
from peertrain.crdt.rundoc import RunDoc
from peertrain.crdt.runstate import RunState
from peertrain.crdt.signed import open_delta, seal_delta
from peertrain.crdt.sync import SyncReply, SyncRequest
from peertrain.protocol import envelope
from peertrain.protocol.conformance import check_decoder_on_mutations, check_message_type
from peertrain.protocol.envelope import seal
from peertrain.protocol.errors import BadSignature, ProtocolError
from peertrain.testing.crdt_network import new_run
from peertrain.testing.memory_router import MemoryRouter

NOW = 1_800_000_000_000


class Peer:
    def __init__(self) -> None:
        self.key = create_new_key_pair()
        self.id = ID.from_pubkey(self.key.public_key).to_base58()


@dataclasses.dataclass
class World:
    a: Peer  # created the run
    b: Peer
    run_id: str
    manifest: bytes
    clock: list[int]
    rep: Replicator  # the victim replica (not running: we hand it bytes directly)
    penalties: list[Penalty]


@pytest.fixture
def world() -> World:
    a, b, v = Peer(), Peer(), Peer()
    run_id, manifest = new_run(a.key)
    clock = [NOW]
    endpoint = MemoryRouter().endpoint(v.id)
    penalties: list[Penalty] = []
    rep = Replicator(
        state=RunState(run_id, wall_ms=lambda: clock[0]),
        key_pair=v.key,
        pubsub=endpoint,
        exchange=endpoint,
        on_penalty=penalties.append,
    )
    return World(a, b, run_id, manifest, clock, rep, penalties)


def member(lease: int = NOW + 60_000) -> MemberInfo:
    return MemberInfo(
        role="trainer", addrs=("/ip4/1.2.3.4/tcp/1",), throughput=1.0, lease_expiry_ms=lease
    )


def signed(peer: Peer, world, doc: RunDoc, seq: int = 1, run_id: str | None = None) -> bytes:
    return seal_delta(peer.key, peer.id, run_id=run_id or world.run_id, seq=seq, doc=doc).raw


def membership(owner: str, writer: str, lease: int = NOW + 60_000, wall: int = NOW) -> RunDoc:
    members = LWWMap(PEER, MEMBER)
    members.set(owner, member(lease), Stamp(wall, 0, writer))
    return RunDoc.of(members=members)


def test_own_writes_are_accepted(world):
    b = world.b
    assert world.rep.handle_gossip(b.id, signed(b, world, membership(b.id, b.id)))
    assert world.rep.handle_gossip(
        b.id, signed(b, world, RunDoc.of(progress=GCounter({b.id: 5})), 2)
    )
    assert world.rep.state.progress(b.id) == 5 and b.id in world.rep.state.members()
    assert world.penalties == []


@pytest.mark.parametrize(
    "forge",
    [
        pytest.param(lambda a, b: RunDoc.of(progress=GCounter({b.id: 100})), id="progress-slot"),
        pytest.param(lambda a, b: membership(b.id, b.id), id="member-record"),
        pytest.param(lambda a, b: membership(a.id, b.id), id="member-stamp-writer"),
        pytest.param(lambda a, b: membership(b.id, a.id, lease=0), id="expire-someone-else"),
    ],
)
def test_a_delta_writing_another_peers_slot_is_refused(world, forge):
    a, b = world.a, world.b
    before = world.rep.state.digest()
    doc = forge(a, b)
    with pytest.raises(ForbiddenWrite):
        world.rep.state.apply_remote(a.id, doc)
    assert not world.rep.handle_gossip(a.id, signed(a, world, doc))
    assert [p.peer for p in world.penalties] == [a.id]
    assert "writes slots of" in world.penalties[0].reason
    assert world.rep.state.digest() == before and world.rep.state.owners() == set()


def test_nobody_can_withdraw_another_peers_checkpoint(world):
    a, b = world.a, world.b
    state = world.rep.state
    provided = RunDoc()
    provided.checkpoints.add(b.id, _ref())
    assert world.rep.handle_gossip(b.id, signed(b, world, provided))
    attack = state.doc.copy().checkpoints.remove(_ref())  # a context covering b's dot
    assert not world.rep.handle_gossip(a.id, signed(a, world, RunDoc.of(checkpoints=attack)))
    assert state.doc.checkpoints.holders(_ref()) == {b.id}
    assert [p.peer for p in world.penalties] == [a.id]


def _ref():
    return CheckpointRef(round=3, content_hash=b"\x03" * 32)


def test_bad_signature_forged_sender_and_other_runs_are_refused(world):
    a, b = world.a, world.b
    good = signed(a, world, membership(a.id, a.id))
    env = open_delta(good, run_id=world.run_id)
    assert env.signer == a.id
    flipped = good[:-1] + bytes([good[-1] ^ 1])  # the signature is the last field
    raw_env = envelope._decode(good, max_size=1 << 20)  # its fields, no signature check
    as_b = dataclasses.replace(raw_env, sender=ID.from_base58(b.id).to_bytes()).to_bytes()
    other_run = signed(a, world, membership(a.id, a.id), run_id="f" * 64)
    for forged in (flipped, as_b, other_run):
        with pytest.raises(BadSignature):
            open_delta(forged, run_id=world.run_id)
        assert not world.rep.handle_gossip(b.id, forged)
    assert [p.peer for p in world.penalties] == [b.id] * 3  # the one who handed them over
    assert world.rep.state.owners() == set()


def test_stamps_from_the_far_future_are_refused(world):
    a = world.a
    doc = membership(a.id, a.id, wall=NOW + 3_600_000)
    with pytest.raises(ClockDrift):
        world.rep.state.apply_remote(a.id, doc)
    assert not world.rep.handle_gossip(a.id, signed(a, world, doc))
    assert not world.penalties and world.rep.state.owners() == set()  # a clock: nobody to blame


def test_forged_manifests_are_refused(world):
    a, b = world.a, world.b
    genuine = open_manifest(world.manifest, world.run_id)
    assert genuine.creator == a.id and genuine.run_id == world.run_id
    # 1. Different content under the genuine run ID (signed by the real creator, even).
    altered = dataclasses.replace(genuine, spec=b"lr=1e9")
    with pytest.raises(WrongRun):
        open_manifest(
            seal(
                a.key,
                domain="crdt/manifest",
                run=world.run_id,
                round=None,
                payload=altered.to_bytes(),
            ).to_bytes(),
            world.run_id,
        )
    # 2. A manifest naming B as creator, signed by A: its own run ID, but the wrong signer.
    claims_b = RunManifest(creator=b.id, created_ms=NOW, name="x", mode="diloco", spec=b"")
    with pytest.raises(ValueError):
        sign_manifest(a.key, claims_b)
    forged = seal(
        a.key, domain="crdt/manifest", run=claims_b.run_id, round=None, payload=claims_b.to_bytes()
    ).to_bytes()
    with pytest.raises(BadSignature):
        open_manifest(forged, run_id_of(claims_b.to_bytes()))
    # 3. Handed over by anti-entropy: refused, the responder penalised, nothing kept.
    request = SyncRequest(run=world.run_id, has_manifest=False, summary={})
    reply = request.reply(SyncReply, manifest=forged)
    world.rep._absorb(b.id, reply)
    assert world.rep.state.manifest is None
    assert [p.peer for p in world.penalties] == [b.id]
    world.rep._absorb(b.id, request.reply(SyncReply, manifest=world.manifest))
    assert world.rep.state.manifest == genuine


def test_duplicates_and_replays_are_harmless(world):
    b = world.b
    raw = signed(b, world, RunDoc.of(progress=GCounter({b.id: 5})))
    assert world.rep.handle_gossip(b.id, raw)
    digest = world.rep.state.digest()
    for _ in range(3):
        assert not world.rep.handle_gossip(b.id, raw)
    world.rep.intake._seen.clear()  # a replay older than the duplicate filter: merge is idempotent
    assert world.rep.handle_gossip(b.id, raw)
    assert world.rep.state.digest() == digest and world.penalties == []


def test_leases_expire_by_themselves_and_are_collected(world):
    b = world.b
    state = world.rep.state
    world.rep.handle_gossip(b.id, signed(b, world, membership(b.id, b.id, lease=NOW + 1000)))
    world.rep.handle_gossip(b.id, signed(b, world, RunDoc.of(progress=GCounter({b.id: 5})), 2))
    assert b.id in state.members() and b.id in state.summary()
    world.clock[0] = NOW + 2000
    assert b.id not in state.members() and state.summary() == {}
    assert state.collect() == []  # still within the grace period
    world.clock[0] = NOW + 1000 + state.limits.expiry_grace_ms + 1
    assert state.collect() == [b.id]
    assert state.owners() == set() and state.progress(b.id) == 0


def test_a_lease_counts_at_most_max_lease_after_its_stamp(world):
    b = world.b
    forever = membership(b.id, b.id, lease=NOW + 10**12)
    world.rep.handle_gossip(b.id, signed(b, world, forever))
    m = world.rep.state.member(b.id)
    assert m.expires_ms == NOW + world.rep.state.limits.max_lease_ms


def test_signed_delta_decoder_raises_only_protocol_errors(world):
    a = world.a
    doc = membership(a.id, a.id)
    doc.merge(RunDoc.of(progress=GCounter({a.id: 7})))
    raw = signed(a, world, doc)
    check_decoder_on_mutations(lambda b: open_delta(b, run_id=world.run_id), raw, mutations=300)
    with pytest.raises(ProtocolError):
        open_delta(raw + b"\x00", run_id=world.run_id)


def test_sync_messages_pass_the_protocol_conformance_check(world):
    request = SyncRequest(
        run=world.run_id, has_manifest=True, summary={world.a.id: b"\x01" * 16}, envelopes=(b"env",)
    )
    check_message_type(SyncRequest, request, mutations=100)
    reply = request.reply(
        SyncReply, manifest=b"m", envelopes=(b"e",), differing={world.b.id: b"\x02" * 16}, more=True
    )
    check_message_type(SyncReply, reply, mutations=100)
