"""Every CRDT type passes the same conformance property test (`crdt.conformance.check_crdt`)."""

from __future__ import annotations

import pytest
from hypothesis import strategies as st
from peertrain.crdt.conformance import CRDTSpec, check_crdt
from peertrain.crdt.counters import GCounter, PNCounter
from peertrain.crdt.hlc import Stamp
from peertrain.crdt.lww import LWWRegister
from peertrain.crdt.lwwmap import LWWMap
from peertrain.crdt.orset import AWORSet
from peertrain.crdt.records import BanVote, CheckpointRef, MemberInfo
from peertrain.crdt.rundoc import RunDoc
from peertrain.crdt.wire import int_codec, str_codec

INT = int_codec()
KEY = str_codec(max_len=8)
small = st.integers(0, 4)


def _register_op():
    # Few distinct stamps, so a writer reusing a stamp with another value is exercised too.
    return st.builds(
        lambda value, wall, counter: lambda s, r: s.set(value, Stamp(wall, counter, r)),
        small,
        small,
        st.integers(0, 2),
    )


def _counter_op(name: str):
    return st.builds(lambda n: lambda s, r: getattr(s, name)(r, n), st.integers(0, 3))


def _orset_op():
    add = st.builds(lambda e: lambda s, r: s.add(r, e), small)
    remove = st.builds(lambda e: lambda s, r: s.remove(e), small)
    remove_own = st.builds(lambda e: lambda s, r: s.remove(e, replica=r), small)
    return st.one_of(add, add, remove, remove_own)


def _map_op():
    set_ = st.builds(
        lambda k, v, w, c: lambda s, r: s.set(k, v, Stamp(w, c, r)),
        st.sampled_from("abc"),
        small,
        small,
        st.integers(0, 2),
    )
    delete = st.builds(
        lambda k, w, c: lambda s, r: s.delete(k, Stamp(w, c, r)),
        st.sampled_from("abc"),
        small,
        st.integers(0, 2),
    )
    return st.one_of(set_, set_, delete)


def _rundoc_op():
    def member(role, wall, counter):
        info = MemberInfo(
            role=role,
            addrs=(f"/ip4/10.0.0.{wall}/tcp/4001",),
            throughput=wall / 2,
            lease_expiry_ms=wall + 10,
        )
        return lambda d, r: RunDoc.of(members=d.members.set(r, info, Stamp(wall, counter, r)))

    ref = st.builds(
        CheckpointRef, round=small, content_hash=st.sampled_from([b"\x01" * 32, b"\x02" * 32])
    )
    vote = st.builds(BanVote, peer=st.sampled_from(["r0", "r9"]), evidence=st.just(b"proof"))
    return st.one_of(
        st.builds(member, st.sampled_from(["trainer", "stage:1"]), small, st.integers(0, 2)),
        st.builds(lambda n: lambda d, r: RunDoc.of(progress=d.progress.increment(r, n)), small),
        st.builds(lambda c: lambda d, r: RunDoc.of(checkpoints=d.checkpoints.add(r, c)), ref),
        st.builds(
            lambda c: lambda d, r: RunDoc.of(checkpoints=d.checkpoints.remove(c, replica=r)), ref
        ),
        st.builds(lambda v: lambda d, r: RunDoc.of(bans=d.bans.add(r, v)), vote),
        st.builds(lambda v: lambda d, r: RunDoc.of(bans=d.bans.remove(v, replica=r)), vote),
    )


SPECS = [
    CRDTSpec(
        name="LWWRegister",
        empty=lambda: LWWRegister(INT),
        operation=_register_op(),
        decode=lambda w: LWWRegister.from_wire(w, INT),
    ),
    CRDTSpec(
        name="GCounter",
        empty=GCounter,
        operation=_counter_op("increment"),
        decode=lambda w: GCounter.from_wire(w, max_replicas=8),
    ),
    CRDTSpec(
        name="PNCounter",
        empty=PNCounter,
        operation=st.one_of(_counter_op("increment"), _counter_op("decrement")),
        decode=lambda w: PNCounter.from_wire(w, max_replicas=8),
    ),
    CRDTSpec(
        name="AWORSet",
        empty=lambda: AWORSet(INT),
        operation=_orset_op(),
        decode=lambda w: AWORSet.from_wire(w, INT, max_entries=256, max_replicas=8),
    ),
    CRDTSpec(
        name="AWORSet(window=3)",
        empty=lambda: AWORSet(INT, window=3),
        operation=_orset_op(),
        decode=lambda w: AWORSet.from_wire(w, INT, window=3, max_entries=256, max_replicas=8),
    ),
    CRDTSpec(
        name="LWWMap",
        empty=lambda: LWWMap(KEY, INT),
        operation=_map_op(),
        decode=lambda w: LWWMap.from_wire(w, KEY, INT, max_entries=16),
    ),
    CRDTSpec(
        name="RunDoc",
        empty=RunDoc,
        operation=_rundoc_op(),
        decode=lambda w: RunDoc.from_wire(w, max_owners=8),
    ),
]


@pytest.mark.parametrize("spec", SPECS, ids=[s.name for s in SPECS])
def test_crdt_laws(spec):
    check_crdt(spec)
