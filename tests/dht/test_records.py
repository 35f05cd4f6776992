"""Records: signed by their writer, bound to their key, expiring, sized and namespaced.

Each rule of `check_entry` is broken once on purpose and must be refused with its own reason.
"""

from __future__ import annotations

import dataclasses

import pytest
from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.crypto.secp256k1 import create_new_key_pair as create_secp_key_pair
from libp2p.peer.id import ID
from peertrain.dht.errors import RecordRejected, RejectReason
from peertrain.dht.namespaces import (
    Namespace,
    NamespaceRegistry,
    default_registry,
    peer_record_key,
    stage_key,
)
from peertrain.dht.records import SignatureCache, check_entry, now_ms, sign_entry, to_record
from peertrain.protocol.packing import pack

ALICE = create_new_key_pair()
BOB = create_new_key_pair()
ALICE_ID = ID.from_pubkey(ALICE.public_key)
REGISTRY = default_registry()


def check(entry, *, now=None):
    return check_entry(entry, REGISTRY, SignatureCache(), now=now if now is not None else now_ms())


def rejected(entry, reason: RejectReason, **kwargs) -> RecordRejected:
    with pytest.raises(RecordRejected) as info:
        check(entry, **kwargs)
    assert info.value.reason is reason, info.value
    return info.value


def test_a_signed_entry_verifies_and_reads_back():
    entry = sign_entry(ALICE, stage_key("run1", 3), {"tput": 812.5}, ttl=60)
    namespace, value = check(entry)
    record = to_record(entry, value)
    assert namespace.name == "stage" and value == {"tput": 812.5}
    assert record.writer == ALICE_ID.to_base58() and 59 < record.expires_at - record.issued_at <= 60


def test_a_changed_value_key_expiry_or_writer_breaks_the_signature():
    entry = sign_entry(ALICE, stage_key("run1", 3), {"tput": 1.0}, ttl=60)
    for change in (
        {"value": pack({"tput": 9e9})},
        {"key": stage_key("run1", 4)},
        {"expires_ms": entry.expires_ms + 1000},
        {"issued_ms": entry.issued_ms + 1},
        {"writer": ID.from_pubkey(BOB.public_key).to_bytes()},
        {"signature": bytes(64)},
    ):
        rejected(dataclasses.replace(entry, **change), RejectReason.BAD_SIGNATURE)


def test_only_the_peer_named_in_a_peer_key_may_write_it():
    addrs = {"addrs": ["/ip4/127.0.0.1/tcp/4001"]}
    check(sign_entry(ALICE, peer_record_key(ALICE_ID), addrs, ttl=60))
    error = rejected(
        sign_entry(BOB, peer_record_key(ALICE_ID), addrs, ttl=60), RejectReason.WRONG_WRITER
    )
    assert ALICE_ID.to_base58() in str(error)


def test_expired_entries_are_refused():
    entry = sign_entry(ALICE, stage_key("run1", 0), {}, ttl=1)
    rejected(entry, RejectReason.EXPIRED, now=entry.expires_ms)


def test_values_over_the_namespace_limit_and_ttls_over_its_maximum_are_refused():
    rejected(
        sign_entry(ALICE, stage_key("r", 0), {"blob": b"x" * 2000}, ttl=60), RejectReason.OVERSIZED
    )
    rejected(sign_entry(ALICE, stage_key("r", 0), {}, ttl=7 * 3600), RejectReason.OVERSIZED)
    rejected(
        sign_entry(ALICE, "/peertrain/r/stage/" + "9" * 300, {}, ttl=60), RejectReason.OVERSIZED
    )


@pytest.mark.parametrize(
    "key",
    [
        "/peertrain/r/nonsense",
        "/other/thing",
        "/peertrain/r/stage/01",
        "",
        "/peertrain/bad run/ckpt",
        "/peertrain/peer/not-base58!",
    ],
)
def test_keys_outside_every_namespace_are_refused(key):
    rejected(sign_entry(ALICE, key, {}, ttl=60), RejectReason.UNKNOWN_NAMESPACE)


def test_a_value_of_the_wrong_shape_is_malformed_even_when_signed():
    key = peer_record_key(ALICE_ID)
    for value in (
        {"addrs": []},
        {"addrs": ["not a multiaddr"]},
        {"addr": ["/ip4/1.2.3.4/tcp/1"]},
        [1, 2],
    ):
        rejected(sign_entry(ALICE, key, value, ttl=60), RejectReason.MALFORMED)


def test_entries_issued_in_the_future_are_refused():
    entry = sign_entry(ALICE, stage_key("r", 1), {}, ttl=60)
    rejected(entry, RejectReason.FUTURE, now=entry.issued_ms - 120_000)


def test_writers_without_an_embedded_ed25519_key_cannot_sign():
    with pytest.raises(ValueError):
        sign_entry(create_secp_key_pair(), stage_key("r", 1), {}, ttl=60)
    entry = sign_entry(ALICE, stage_key("r", 1), {}, ttl=60)
    secp_writer = ID.from_pubkey(create_secp_key_pair().public_key).to_bytes()
    rejected(dataclasses.replace(entry, writer=secp_writer), RejectReason.BAD_SIGNATURE)


def test_the_newer_entry_of_a_writer_wins_the_same_way_everywhere():
    old = sign_entry(ALICE, stage_key("r", 1), {"v": 1}, ttl=60)
    new = dataclasses.replace(
        sign_entry(ALICE, stage_key("r", 1), {"v": 2}, ttl=60), issued_ms=old.issued_ms + 1
    )
    assert new.newer_than(old) and not old.newer_than(new) and not old.newer_than(old)


def test_other_layers_register_their_own_namespaces():
    registry = NamespaceRegistry(
        [Namespace(name="expert", pattern="/peertrain/{run}/expert/{index}", max_ttl=60)]
    )
    entry = sign_entry(ALICE, "/peertrain/r/expert/7", {"x": 1}, ttl=30)
    namespace, _ = check_entry(entry, registry, SignatureCache(), now=now_ms())
    assert namespace.name == "expert"
    with pytest.raises(ValueError):
        registry.register(Namespace(name="expert", pattern="/x/{run}", max_ttl=1))
    with pytest.raises(ValueError):
        Namespace(name="bad", pattern="/x/{nope}", max_ttl=1)


def test_the_signature_cache_still_refuses_a_forgery_of_a_cached_entry():
    cache = SignatureCache(max_entries=2)
    entry = sign_entry(ALICE, stage_key("r", 1), {}, ttl=60)
    cache.verify(entry)
    cache.verify(entry)
    with pytest.raises(RecordRejected):
        cache.verify(dataclasses.replace(entry, value=pack({"forged": True})))
