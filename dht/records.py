"""Signed, expiring record entries: the only thing the DHT stores or returns.

An entry is one writer's value under one key:

    key, writer (peer ID bytes), value (msgpack bytes), issued_ms, expires_ms, signature

The signature is the writer's Ed25519 signature over a context string and all other fields,
so an entry cannot be moved to another key, re-dated or re-attributed. The public key is not
sent: an Ed25519 peer ID embeds it (identity multihash), so the writer field *is* the key and a
record can never claim one writer and be signed by another. Peers with other key types cannot
write (the same stance as protocol/envelope.py: constant-cost verification only).

Validation (`check_entry`) runs on every entry that arrives, in order of cost: namespace,
sizes, expiry, writer rules, signature, and last the value's own shape. Verified signatures
are remembered in a bounded LRU, so re-reading the same entries costs a hash, not a verify.
"""

from __future__ import annotations

import hashlib
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any

from libp2p.crypto.keys import KeyPair, KeyType
from libp2p.peer.id import ID
from peertrain.protocol.errors import DecodeError, MessageTooLarge
from peertrain.protocol.messages import Message, message
from peertrain.protocol.packing import pack, unpack
from peertrain.protocol.schema import IntRange, MaxLen

from .errors import RecordRejected, RejectReason
from .namespaces import MAX_KEY_LEN, MAX_VALUE_SIZE, Namespace, NamespaceRegistry

_CONTEXT = "peertrain-dht-entry/1"
CLOCK_SKEW_MS = 30_000  # how far ahead of ours a writer's clock may be
MAX_ENTRY_SIZE = MAX_VALUE_SIZE + MAX_KEY_LEN + 256
Millis = Annotated[int, IntRange(0, 2**63 - 1)]


@message("dht/entry", max_size=MAX_ENTRY_SIZE)
class SignedEntry(Message):
    key: Annotated[str, MaxLen(MAX_KEY_LEN)]
    writer: Annotated[bytes, MaxLen(64)]
    value: Annotated[bytes, MaxLen(MAX_VALUE_SIZE)]
    issued_ms: Millis
    expires_ms: Millis
    signature: Annotated[bytes, MaxLen(64)]

    def newer_than(self, other: SignedEntry) -> bool:
        """The merge order of two entries of one writer: later issue wins, then later expiry.

        The signature breaks the last tie so that every replica picks the same entry.
        """
        return (self.issued_ms, self.expires_ms, self.signature) > (
            other.issued_ms,
            other.expires_ms,
            other.signature,
        )

    @property
    def size(self) -> int:
        return len(self.key) + len(self.writer) + len(self.value) + 96


@dataclass(frozen=True, kw_only=True, slots=True)
class Record:
    """One writer's verified, unexpired value under a key, as returned to callers."""

    key: str
    writer: str  # base58 peer ID
    value: Any
    issued_at: float  # unix seconds
    expires_at: float


def now_ms(clock: Callable[[], float] = time.time) -> int:
    return int(clock() * 1000)


def _signed_bytes(key: str, writer: bytes, value: bytes, issued_ms: int, expires_ms: int) -> bytes:
    return pack([_CONTEXT, key, writer, value, issued_ms, expires_ms])


def sign_entry(
    key_pair: KeyPair, key: str, value: Any, *, ttl: float, clock: Callable[[], float] = time.time
) -> SignedEntry:
    """Pack `value` with msgpack and sign it as our entry under `key` for `ttl` seconds."""
    if key_pair.public_key.get_type() != KeyType.Ed25519:
        raise ValueError("DHT records are signed with Ed25519 identity keys only")
    if ttl <= 0:
        raise ValueError("ttl must be positive: every record expires")
    writer = ID.from_pubkey(key_pair.public_key).to_bytes()
    raw = pack(value)
    issued = now_ms(clock)
    expires = issued + max(1, int(ttl * 1000))
    signature = key_pair.private_key.sign(_signed_bytes(key, writer, raw, issued, expires))
    return SignedEntry(
        key=key, writer=writer, value=raw, issued_ms=issued, expires_ms=expires, signature=signature
    )


class SignatureCache:
    """Remembers which (entry, signature) pairs verified, LRU-bounded."""

    def __init__(self, max_entries: int = 16_384) -> None:
        self._seen: OrderedDict[bytes, None] = OrderedDict()
        self._max = max_entries

    def verify(self, entry: SignedEntry) -> None:
        signed = _signed_bytes(
            entry.key, entry.writer, entry.value, entry.issued_ms, entry.expires_ms
        )
        token = hashlib.blake2b(signed + entry.signature, digest_size=16).digest()
        if token in self._seen:
            self._seen.move_to_end(token)
            return
        key = ID(entry.writer).extract_public_key()
        if key is None or key.get_type() != KeyType.Ed25519:
            raise RecordRejected(RejectReason.BAD_SIGNATURE, "writer is not an Ed25519 peer ID")
        if len(entry.signature) != 64 or not key.verify(signed, entry.signature):
            raise RecordRejected(RejectReason.BAD_SIGNATURE, "signature does not verify")
        self._seen[token] = None
        if len(self._seen) > self._max:
            self._seen.popitem(last=False)


def _writer_text(writer: bytes) -> str:
    try:
        return ID(writer).to_base58()
    except Exception:  # noqa: BLE001 - bytes from the network, any failure: translated
        raise RecordRejected(RejectReason.MALFORMED, "writer is not a peer ID") from None


def check_entry(
    entry: SignedEntry,
    registry: NamespaceRegistry,
    signatures: SignatureCache,
    *,
    now: int,
) -> tuple[Namespace, Any]:
    """Validate an entry from the network; return its namespace and unpacked value.

    Raises `RecordRejected` naming the first rule it broke.
    """
    match = registry.match(entry.key)
    ns = match.namespace
    if len(entry.value) > ns.max_value_size:
        raise RecordRejected(
            RejectReason.OVERSIZED,
            f"{len(entry.value)}-byte value, {ns.name} allows {ns.max_value_size}",
        )
    if entry.expires_ms <= now:
        raise RecordRejected(
            RejectReason.EXPIRED, f"expired {(now - entry.expires_ms) / 1000:.1f} s ago"
        )
    if entry.expires_ms <= entry.issued_ms:
        raise RecordRejected(RejectReason.MALFORMED, "expires before it was issued")
    if entry.issued_ms > now + CLOCK_SKEW_MS:
        ahead = (entry.issued_ms - now) / 1000
        raise RecordRejected(RejectReason.FUTURE, f"issued {ahead:.1f} s in our future")
    if entry.expires_ms - max(now, entry.issued_ms) > ns.max_ttl * 1000 + CLOCK_SKEW_MS:
        raise RecordRejected(RejectReason.OVERSIZED, f"ttl over {ns.name}'s {ns.max_ttl:.0f} s")
    writer = _writer_text(entry.writer)
    if match.owner is not None and writer != match.owner:
        raise RecordRejected(RejectReason.WRONG_WRITER, f"{writer} wrote under {match.owner}'s key")
    signatures.verify(entry)
    try:
        value = unpack(entry.value, max_size=ns.max_value_size, what="record value")
        if ns.check_value is not None:
            ns.check_value(value)
    except (DecodeError, MessageTooLarge, ValueError, TypeError) as exc:
        raise RecordRejected(RejectReason.MALFORMED, f"value: {exc}") from None
    return ns, value


def to_record(entry: SignedEntry, value: Any) -> Record:
    return Record(
        key=entry.key,
        writer=ID(entry.writer).to_base58(),
        value=value,
        issued_at=entry.issued_ms / 1000,
        expires_at=entry.expires_ms / 1000,
    )
