"""Signed deltas: a `RunDoc` delta sealed by the owner of every slot it writes.

Envelope (protocol/envelope.py): domain `crdt/delta`, run = run ID, round = the owner's delta
sequence number, payload = `[kind, RunDoc wire]` with kind 0 for a delta group and 1 for a
snapshot (the owner's whole slot). Sequence numbers strictly increase per owner and start from
the wall clock in ms, so they keep increasing across restarts: a snapshot with seq n contains
everything its owner wrote under seqs up to n. Peers keep and forward the envelopes exactly as
signed (`ProofStore`), which is what lets anyone relay another peer's state without being able
to alter it.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from libp2p.crypto.keys import KeyPair
from libp2p.peer.id import ID
from peertrain.protocol.envelope import open_envelope, seal
from peertrain.protocol.packing import pack, unpack

from .rundoc import RunDoc
from .wire import MAX_SEQ, read_int, read_list

DELTA_DOMAIN = "crdt/delta"
MAX_DELTA_PAYLOAD = 32 * 1024  # one owner's whole slot fits with room to spare
MAX_DELTA_ENVELOPE = MAX_DELTA_PAYLOAD + 1024
_ANY_SEQ = range(0, MAX_SEQ + 1)
_DELTA, _SNAPSHOT = 0, 1


@dataclass(frozen=True, slots=True, kw_only=True)
class SignedDelta:
    """A verified delta: who signed it, its sequence number, and the raw envelope to forward."""

    signer: str
    seq: int
    snapshot: bool
    doc: RunDoc
    raw: bytes


_NAMES: OrderedDict[bytes, str] = OrderedDict()  # peer ID bytes → base58: encoding costs ~50 µs
_MAX_NAMES = 4096


def _base58(sender: bytes) -> str:
    name = _NAMES.get(sender)
    if name is None:
        name = _NAMES[sender] = ID(sender).to_base58()
        if len(_NAMES) > _MAX_NAMES:
            _NAMES.popitem(last=False)
    return name


def seal_delta(
    key_pair: KeyPair, peer_id: str, *, run_id: str, seq: int, doc: RunDoc, snapshot: bool = False
) -> SignedDelta:
    payload = pack([_SNAPSHOT if snapshot else _DELTA, doc.to_wire()])
    if len(payload) > MAX_DELTA_PAYLOAD:
        raise ValueError(f"delta of {len(payload)} bytes exceeds {MAX_DELTA_PAYLOAD}")
    env = seal(key_pair, domain=DELTA_DOMAIN, run=run_id, round=seq, payload=payload)
    return SignedDelta(signer=peer_id, seq=seq, snapshot=snapshot, doc=doc, raw=env.to_bytes())


def open_delta(raw: bytes, *, run_id: str) -> SignedDelta:
    """Verify and decode untrusted bytes; raise only `ProtocolError` subclasses.

    Ownership (does the doc write only the signer's slots?) is `RunState`'s check, not this one.
    """
    env = open_envelope(
        raw,
        expected_domain=DELTA_DOMAIN,
        expected_run=run_id,
        expected_round=_ANY_SEQ,
        max_size=MAX_DELTA_ENVELOPE,
    )
    kind, doc = read_list(
        unpack(env.payload, max_size=MAX_DELTA_PAYLOAD, what="delta"), "delta", max_len=2, length=2
    )
    kind = read_int(kind, "delta kind", hi=_SNAPSHOT)
    assert env.round is not None
    return SignedDelta(
        signer=_base58(env.sender),
        seq=env.round,
        snapshot=kind == _SNAPSHOT,
        doc=RunDoc.from_wire(doc, max_owners=1),
        raw=raw,
    )
