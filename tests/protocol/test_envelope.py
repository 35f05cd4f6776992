"""Signed envelopes: genuine ones open; forged, tampered, replayed and re-targeted ones do not."""

from __future__ import annotations

import dataclasses

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.crypto.secp256k1 import create_new_key_pair as create_secp_key_pair
from libp2p.peer.id import ID
from peertrain.protocol.envelope import Envelope, ReplayGuard, open_envelope, seal
from peertrain.protocol.errors import (
    BadSignature,
    DecodeError,
    MessageTooLarge,
    ProtocolError,
    ReplayedEnvelope,
)

ALICE = create_new_key_pair(b"a" * 32)
MALLORY = create_new_key_pair(b"m" * 32)
TARGET = dict(expected_domain="crdt-delta", expected_run="run-1", expected_round=7)
MAX = 4096


def _sealed(payload: bytes = b"delta", **overrides) -> Envelope:
    fields = dict(domain="crdt-delta", run="run-1", round=7, payload=payload) | overrides
    return seal(ALICE, **fields)


def _open(raw: bytes, **overrides) -> Envelope:
    return open_envelope(raw, **(TARGET | {"max_size": MAX} | overrides))


def test_genuine_envelope_opens_and_names_its_signer():
    env = _open(_sealed().to_bytes())
    assert env.payload == b"delta"
    assert env.peer_id == ID.from_pubkey(ALICE.public_key)
    assert _open(_sealed().to_bytes(), expected_sender=env.sender) == env


def test_round_may_be_absent_or_one_of_a_window():
    raw = _sealed(round=None, domain="dht-record").to_bytes()
    assert _open(raw, expected_domain="dht-record", expected_round=None).round is None
    assert _open(_sealed().to_bytes(), expected_round=range(6, 9)).round == 7
    with pytest.raises(BadSignature, match="round"):
        _open(_sealed().to_bytes(), expected_round=range(8, 10))
    with pytest.raises(BadSignature, match="round"):
        _open(raw, expected_domain="dht-record", expected_round=range(0, 10))


@pytest.mark.parametrize(
    "target, reason",
    [
        (dict(expected_run="run-2"), "run"),
        (dict(expected_round=8), "round"),
        (dict(expected_round=None), "round"),
        (dict(expected_domain="outer-update"), "domain"),
    ],
)
def test_retargeted_envelope_is_rejected_with_a_reason(target, reason):
    with pytest.raises(BadSignature, match=reason):
        _open(_sealed().to_bytes(), **target)


def _rewrite(env: Envelope, **changes) -> bytes:
    return dataclasses.replace(env, **changes).to_bytes()


@pytest.mark.parametrize(
    "changes",
    [
        dict(run="run-2"),  # re-targeted AND relabelled: the signature no longer covers it
        dict(round=8),
        dict(domain="outer-update"),
        dict(payload=b"delta!"),
    ],
)
def test_tampered_fields_break_the_signature(changes):
    raw = _rewrite(_sealed(), **changes)
    target = {f"expected_{k}": v for k, v in changes.items() if k != "payload"}
    with pytest.raises(BadSignature, match="signature does not verify"):
        _open(raw, **target)


def test_forged_signer_is_rejected():
    genuine = _sealed()
    mallory = seal(MALLORY, domain="crdt-delta", run="run-1", round=7, payload=b"evil")
    # Mallory signs with her key but claims to be Alice.
    with pytest.raises(BadSignature, match="does not match the claimed sender"):
        _open(_rewrite(mallory, sender=genuine.sender))
    # Mallory presents Alice's key but signs herself.
    with pytest.raises(BadSignature, match="signature does not verify"):
        _open(_rewrite(mallory, sender=genuine.sender, public_key=genuine.public_key))
    with pytest.raises(BadSignature, match="another peer"):
        _open(mallory.to_bytes(), expected_sender=genuine.sender)


def test_non_ed25519_and_garbage_keys_are_rejected():
    secp = create_secp_key_pair()
    env = _sealed()
    secp_sender = ID.from_pubkey(secp.public_key).to_bytes()
    raw = _rewrite(env, public_key=secp.public_key.serialize(), sender=secp_sender)
    with pytest.raises(BadSignature):
        _open(raw)
    with pytest.raises(BadSignature):
        _open(_rewrite(env, public_key=b"\x08\x01\x12\x20" + b"\x00" * 31))
    with pytest.raises(ValueError):
        seal(secp, domain="d", run="r", round=None, payload=b"")


def test_replayed_envelope_is_rejected_and_guard_stays_bounded():
    guard = ReplayGuard(max_entries=3)
    first = _open(_sealed().to_bytes())
    guard.admit(first)
    with pytest.raises(ReplayedEnvelope):
        guard.admit(_open(_sealed().to_bytes()))  # same content re-sent = a replay
    for i in range(5):
        guard.admit(_open(_sealed(payload=b"p%d" % i).to_bytes()))
    assert len(guard) == 3
    assert first not in guard  # evicted: the round/run check is what covers old envelopes
    stats = guard.statistics()
    assert (stats.admitted, stats.rejected, stats.entries) == (6, 1, 3)


def test_size_limit_is_checked_before_decoding():
    raw = _sealed(payload=b"x" * MAX).to_bytes()
    with pytest.raises(MessageTooLarge):
        _open(raw)


def test_wrong_shapes_are_decode_errors():
    env = _sealed()
    good = msgpack.unpackb(env.to_bytes())
    for index, bad in [(0, 2), (1, 5), (3, -1), (3, True), (4, "s"), (6, "p"), (7, b"short")]:
        fields = list(good)
        fields[index] = bad
        with pytest.raises(DecodeError):
            _open(msgpack.packb(fields, use_bin_type=True))
    with pytest.raises(DecodeError):
        _open(msgpack.packb(good[:-1], use_bin_type=True))


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300))
def test_random_bytes_raise_only_protocol_errors(raw):
    with pytest.raises(ProtocolError):
        _open(raw)


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_mutated_envelopes_raise_only_protocol_errors(data):
    raw = bytearray(_sealed().to_bytes())
    for _ in range(data.draw(st.integers(1, 4))):
        pos = data.draw(st.integers(0, len(raw) - 1))
        raw[pos] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(raw)))
    try:
        env = _open(bytes(raw[:cut]))
    except ProtocolError:
        return
    assert env == _sealed()  # only a no-op mutation may pass
