"""Signed envelopes: who said what, for which run and round.

Everything a peer asserts about itself (DHT records, CRDT deltas, outer updates) travels sealed
in an `Envelope` signed with the sender's libp2p identity key. Before anything inside is used,
`open_envelope` checks, in order of cost:

1. size and shape of the untrusted bytes (`MessageTooLarge`, `DecodeError`);
2. the target: domain, run and round are the ones the caller expects (`BadSignature`), so an
   envelope cannot be re-targeted to another run, round or kind of message;
3. the public key is an Ed25519 key that hashes to the claimed sender peer ID (`BadSignature`);
4. the signature covers context + domain + run + round + sender + blake3(payload) (`BadSignature`).

The signature covers a 32-byte blake3 digest of the payload rather than the payload itself, so
signing a 100 MB outer update costs one blake3 pass (GB/s) and never copies the payload into a
signing buffer; blake3 is collision resistant, so this binds the payload just as tightly.

Only Ed25519 keys are accepted: verification is cheap and constant-cost (an RSA key from a
stranger could make us burn CPU), and Ed25519 signatures as checked by libsodium are not
malleable, so the signature identifies the signed message and `ReplayGuard` can key on it.

`ReplayGuard` remembers the last N envelopes it admitted and rejects a second sighting. It is a
bounded LRU: an envelope older than the window could pass it again, which is why every envelope
also carries its run and round, and receivers refuse rounds they are not in.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Container
from dataclasses import dataclass

import blake3
from libp2p.crypto.ed25519 import Ed25519PublicKey
from libp2p.crypto.keys import KeyPair, KeyType, PublicKey
from libp2p.crypto.pb import crypto_pb2
from libp2p.peer.id import ID

from .errors import BadSignature, DecodeError, ProtocolError, ReplayedEnvelope
from .packing import pack, unpack

ENVELOPE_VERSION = 1
_SIGNING_CONTEXT = "peertrain-envelope/1"
MAX_DOMAIN_LEN = 64
MAX_RUN_LEN = 128
_MAX_KEY_LEN = 64  # a serialized Ed25519 public key is 36 bytes
_SIGNATURE_LEN = 64  # Ed25519
_THREADED_HASH_FROM = 1 << 20  # below this, blake3's thread pool costs more than it saves


@dataclass(frozen=True, kw_only=True, slots=True)
class Envelope:
    """A payload with its signer and target. Only `open_envelope` yields verified ones."""

    domain: str
    run: str
    round: int | None
    sender: bytes
    public_key: bytes
    payload: bytes
    signature: bytes

    @property
    def peer_id(self) -> ID:
        return ID(self.sender)

    @property
    def replay_key(self) -> bytes:
        """Identifies the signed message (Ed25519 signatures are deterministic, non-malleable)."""
        return blake3.blake3(self.signature).digest(length=16)

    def to_bytes(self) -> bytes:
        return pack(
            [
                ENVELOPE_VERSION,
                self.domain,
                self.run,
                self.round,
                self.sender,
                self.public_key,
                self.payload,
                self.signature,
            ]
        )


def _signed_message(
    *, domain: str, run: str, round: int | None, sender: bytes, payload: bytes
) -> bytes:
    threads = blake3.blake3.AUTO if len(payload) >= _THREADED_HASH_FROM else 1
    digest = blake3.blake3(payload, max_threads=threads).digest()
    return pack([_SIGNING_CONTEXT, domain, run, round, sender, digest])


def _check_target_fields(domain: str, run: str, round: int | None) -> None:
    if not domain or len(domain) > MAX_DOMAIN_LEN:
        raise ValueError(f"domain must be 1..{MAX_DOMAIN_LEN} characters, got {domain!r}")
    if len(run) > MAX_RUN_LEN:
        raise ValueError(f"run must be at most {MAX_RUN_LEN} characters")
    if round is not None and (type(round) is not int or round < 0):
        raise ValueError(f"round must be a non-negative int or None, got {round!r}")


def seal(
    key_pair: KeyPair, *, domain: str, run: str, round: int | None, payload: bytes
) -> Envelope:
    """Sign `payload` for (domain, run, round) with our identity key. `.to_bytes()` to send."""
    _check_target_fields(domain, run, round)
    if key_pair.public_key.get_type() != KeyType.Ed25519:
        raise ValueError("envelopes are signed with Ed25519 identity keys only")
    payload = bytes(payload)
    sender = ID.from_pubkey(key_pair.public_key).to_bytes()
    message = _signed_message(domain=domain, run=run, round=round, sender=sender, payload=payload)
    return Envelope(
        domain=domain,
        run=run,
        round=round,
        sender=sender,
        public_key=key_pair.public_key.serialize(),
        payload=payload,
        signature=key_pair.private_key.sign(message),
    )


def claimed_domain(raw: bytes, *, max_size: int) -> str | None:
    """The domain an envelope claims, without verifying anything (a router's peek: which
    validator gets it); None for what is no envelope of at most `max_size` bytes."""
    try:
        fields = unpack(raw, max_size=max_size, what="envelope")
    except ProtocolError:
        return None
    if not isinstance(fields, list) or len(fields) < 2 or not isinstance(fields[1], str):
        return None
    return fields[1]


def _decode(raw: bytes, *, max_size: int) -> Envelope:
    fields = unpack(raw, max_size=max_size, what="envelope")
    if not isinstance(fields, list) or len(fields) != 8:
        raise DecodeError("envelope must be a msgpack array of 8 fields")
    version, domain, run, round_, sender, public_key, payload, signature = fields
    if version != ENVELOPE_VERSION or type(version) is not int:
        raise DecodeError(f"unknown envelope version {version!r}")
    if type(domain) is not str or not 0 < len(domain) <= MAX_DOMAIN_LEN:
        raise DecodeError("envelope domain must be a short non-empty string")
    if type(run) is not str or len(run) > MAX_RUN_LEN:
        raise DecodeError("envelope run must be a short string")
    if round_ is not None and (type(round_) is not int or round_ < 0):
        raise DecodeError("envelope round must be a non-negative int or nil")
    for name, value in (("sender", sender), ("public key", public_key), ("payload", payload)):
        if type(value) is not bytes:
            raise DecodeError(f"envelope {name} must be bytes")
    if type(signature) is not bytes or len(signature) != _SIGNATURE_LEN:
        raise DecodeError(f"envelope signature must be {_SIGNATURE_LEN} bytes")
    return Envelope(
        domain=domain,
        run=run,
        round=round_,
        sender=sender,
        public_key=public_key,
        payload=payload,
        signature=signature,
    )


def _load_ed25519_key(serialized: bytes) -> PublicKey:
    if len(serialized) > _MAX_KEY_LEN:
        raise BadSignature("envelope public key is too long for an Ed25519 key")
    try:
        proto = crypto_pb2.PublicKey.FromString(serialized)
        if proto.key_type != KeyType.Ed25519.value:
            raise BadSignature(f"envelope key type {proto.key_type} is not Ed25519")
        key = Ed25519PublicKey.from_bytes(proto.data)
    except BadSignature:
        raise
    except Exception as exc:  # noqa: BLE001 - protobuf / PyNaCl parse untrusted bytes; any failure is theirs: translated
        raise BadSignature(f"envelope public key does not parse: {exc}") from None
    if key.serialize() != serialized:
        raise BadSignature("envelope public key is not in canonical form")
    return key


def _check_target(
    env: Envelope,
    expected_domain: str,
    expected_run: str,
    expected_round: int | None | Container[int],
) -> None:
    if env.domain != expected_domain:
        raise BadSignature(f"envelope is for domain {env.domain!r}, expected {expected_domain!r}")
    if env.run != expected_run:
        raise BadSignature(f"envelope is for run {env.run!r}, expected {expected_run!r}")
    if expected_round is None or isinstance(expected_round, int):
        round_ok = env.round == expected_round
    else:
        round_ok = env.round is not None and env.round in expected_round
    if not round_ok:
        raise BadSignature(f"envelope is for round {env.round!r}, expected {expected_round!r}")


def open_envelope(
    raw: bytes,
    *,
    expected_domain: str,
    expected_run: str,
    expected_round: int | None | Container[int] = None,
    expected_sender: bytes | None = None,
    max_size: int,
) -> Envelope:
    """Decode and verify untrusted envelope bytes; raise only `ProtocolError` subclasses.

    `expected_round` is an int, None (the envelope must carry no round), or a container of
    acceptable rounds (e.g. `range(r - 1, r + 2)`). `expected_sender` pins the signer's peer ID.
    """
    env = _decode(raw, max_size=max_size)
    _check_target(env, expected_domain, expected_run, expected_round)
    if expected_sender is not None and env.sender != expected_sender:
        raise BadSignature("envelope was signed by another peer than expected")
    key = _load_ed25519_key(env.public_key)
    if ID.from_pubkey(key).to_bytes() != env.sender:
        raise BadSignature("envelope public key does not match the claimed sender peer ID")
    message = _signed_message(
        domain=env.domain, run=env.run, round=env.round, sender=env.sender, payload=env.payload
    )
    if not key.verify(message, env.signature):
        raise BadSignature("envelope signature does not verify")
    return env


@dataclass(frozen=True, kw_only=True, slots=True)
class ReplayGuardStatistics:
    entries: int
    max_entries: int
    admitted: int
    rejected: int


class ReplayGuard:
    """Admits each verified envelope once, remembering the last `max_entries` (LRU)."""

    def __init__(self, *, max_entries: int = 65_536) -> None:
        if max_entries < 1:
            raise ValueError("max_entries must be positive")
        self._max_entries = max_entries
        self._seen: OrderedDict[bytes, None] = OrderedDict()
        self._admitted = 0
        self._rejected = 0

    def admit(self, envelope: Envelope) -> None:
        """Remember `envelope`; raise `ReplayedEnvelope` if it was admitted before."""
        key = envelope.replay_key
        if key in self._seen:
            self._seen.move_to_end(key)
            self._rejected += 1
            raise ReplayedEnvelope(
                f"envelope from {envelope.peer_id} for {envelope.domain}/{envelope.run}/"
                f"{envelope.round} was already seen"
            )
        self._seen[key] = None
        if len(self._seen) > self._max_entries:
            self._seen.popitem(last=False)
        self._admitted += 1

    def __contains__(self, envelope: Envelope) -> bool:
        return envelope.replay_key in self._seen

    def __len__(self) -> int:
        return len(self._seen)

    def statistics(self) -> ReplayGuardStatistics:
        return ReplayGuardStatistics(
            entries=len(self._seen),
            max_entries=self._max_entries,
            admitted=self._admitted,
            rejected=self._rejected,
        )
