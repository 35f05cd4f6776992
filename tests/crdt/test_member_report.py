"""A member's progress report (crdt/member_report.py) rides its signed lease: bounded, written by
the member alone, replicated as part of its slot, and absent from the wire when not given."""

from __future__ import annotations

import math

import pytest
from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.peer.id import ID
from peertrain.crdt.errors import ForbiddenWrite
from peertrain.crdt.hlc import Stamp
from peertrain.crdt.lwwmap import LWWMap
from peertrain.crdt.member_report import MemberReport
from peertrain.crdt.records import MEMBER, PEER, MemberInfo
from peertrain.crdt.replicator import Replicator
from peertrain.crdt.rundoc import RunDoc
from peertrain.crdt.runstate import RunState
from peertrain.crdt.signed import seal_delta
from peertrain.protocol.errors import DecodeError
from peertrain.protocol.packing import pack, unpack
from peertrain.testing.crdt_network import new_run
from peertrain.testing.memory_router import MemoryRouter

NOW = 1_800_000_000_000
REPORT = MemberReport(
    round=7,
    checksum="3fa2c1d09b8e7a65",
    samples_per_s=412.5,
    device="cuda:0 NVIDIA H200",
    version="0.9.0",
    name="alice's GPU ü",
)


def _peer():
    key = create_new_key_pair()
    return key, ID.from_pubkey(key.public_key).to_base58()


def _record(**extra) -> MemberInfo:
    base = dict(role="diloco", addrs=("/ip4/1.2.3.4/tcp/1",), throughput=0.0)
    return MemberInfo(**base, lease_expiry_ms=NOW + 30_000, **extra)


def _membership(owner: str, writer: str, info: MemberInfo) -> RunDoc:
    members = LWWMap(PEER, MEMBER)
    members.set(owner, info, Stamp(NOW, 0, writer))
    return RunDoc.of(members=members)


@pytest.mark.parametrize(
    "extra",
    [
        {"report": REPORT},
        {"report": REPORT, "loss": 1.25},
        {"report": REPORT, "certificate": b"\x01" * 40},
    ],
    ids=["report", "with-loss", "with-certificate"],
)
def test_a_report_round_trips_through_the_member_record_wire_form(extra):
    record = _record(**extra)
    wire = unpack(pack(MEMBER.encode(record)), max_size=4096)
    assert MEMBER.decode(wire) == record
    assert pack(MEMBER.encode(MEMBER.decode(wire))) == pack(wire)  # canonical: one form


def test_a_record_without_a_report_keeps_its_old_encoding():
    """Members of older versions, and other modes, hash and sign the same bytes as before."""
    assert MEMBER.encode(_record()) == ["diloco", ["/ip4/1.2.3.4/tcp/1"], 0.0, NOW + 30_000]
    assert len(MEMBER.encode(_record(loss=2.0))) == 6


@pytest.mark.parametrize(
    "field, value",
    [
        ("name", "x" * 33),
        ("name", "evil\x1b[2Jname"),
        ("device", "d" * 49),
        ("version", "v\n1"),
        ("checksum", "NOT-HEX"),
        ("checksum", "a" * 65),
        ("samples_per_s", math.nan),
        ("samples_per_s", math.inf),
        ("samples_per_s", -1.0),
        ("round", -1),
    ],
)
def test_every_field_of_a_report_is_bounded_on_the_way_in(field, value):
    fields = {
        "round": 7,
        "checksum": "ab",
        "samples_per_s": 1.0,
        "device": "cpu",
        "version": "1",
        "name": "n",
    }
    with pytest.raises(ValueError):
        MemberReport(**{**fields, field: value})
    wire = MEMBER.encode(_record(report=REPORT))
    wire[6] = [*wire[6]]
    order = ["round", "checksum", "samples_per_s", "device", "version", "name"]
    wire[6][order.index(field)] = value
    with pytest.raises(DecodeError):
        MEMBER.decode(wire)


def test_a_nil_loss_is_accepted_only_where_a_report_follows():
    wire = MEMBER.encode(_record(report=REPORT))
    assert wire[5] is None and MEMBER.decode(wire).loss is None
    with pytest.raises(DecodeError):
        MEMBER.decode(wire[:6])  # six fields: the loss must be a number


def test_only_the_member_itself_writes_its_report_and_peers_replicate_it():
    creator, _ = _peer()
    run_id, _ = new_run(creator)
    (_, alice), (mallory_key, mallory) = _peer(), _peer()
    key, victim = _peer()
    replica = Replicator(
        state=RunState(run_id, wall_ms=lambda: NOW),
        key_pair=key,
        pubsub=MemoryRouter().endpoint(victim),
        exchange=MemoryRouter().endpoint(victim),
    )
    forged = _membership(alice, mallory, _record(report=REPORT))
    with pytest.raises(ForbiddenWrite):
        replica.state.apply_remote(mallory, forged)
    raw = seal_delta(mallory_key, mallory, run_id=run_id, seq=1, doc=forged).raw
    assert not replica.handle_gossip(mallory, raw)
    assert replica.state.members() == {}
    own = _membership(mallory, mallory, _record(report=REPORT))
    raw = seal_delta(mallory_key, mallory, run_id=run_id, seq=2, doc=own).raw
    assert replica.handle_gossip(mallory, raw)
    assert replica.state.members()[mallory].info.report == REPORT
