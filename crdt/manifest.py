"""The run manifest: written once by the run's creator, signed, and named by its own hash.

The manifest says what a run is (name, mode, and an opaque `spec`: the model, hyperparameters
and dataset as the training layer encodes them, canonically). Its run ID is the SHA-256 of its
canonical bytes, so the ID commits to the content: nobody, the creator included, can present a
different manifest under an existing run ID, and a manifest signed by anyone but the `creator`
it names is refused. That makes the manifest a write-once register whose only possible value is
known in advance: replicas "merge" it by accepting the first copy that verifies.

Envelope: domain `crdt/manifest`, run = run ID, no round, payload = canonical manifest bytes.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from libp2p.crypto.keys import KeyPair
from libp2p.peer.id import ID
from peertrain.protocol.envelope import open_envelope, seal
from peertrain.protocol.errors import BadSignature
from peertrain.protocol.packing import pack, unpack

from .errors import WrongRun
from .records import read_peer
from .wire import MAX_SEQ, read_bytes, read_int, read_list, read_str

MANIFEST_DOMAIN = "crdt/manifest"
MANIFEST_VERSION = 1
MAX_SPEC_BYTES = 64 * 1024
MAX_MANIFEST_BYTES = MAX_SPEC_BYTES + 1024
MAX_MANIFEST_ENVELOPE = MAX_MANIFEST_BYTES + 1024


@dataclass(frozen=True, slots=True, kw_only=True)
class RunManifest:
    """What a run is. `spec` is opaque here: canonical bytes from the training layer."""

    creator: str
    created_ms: int
    name: str
    mode: str
    spec: bytes

    def to_bytes(self) -> bytes:
        return pack(
            [MANIFEST_VERSION, self.creator, self.created_ms, self.name, self.mode, self.spec]
        )

    @property
    def run_id(self) -> str:
        return run_id_of(self.to_bytes())

    @classmethod
    def from_bytes(cls, raw: bytes) -> RunManifest:
        fields = read_list(
            unpack(raw, max_size=MAX_MANIFEST_BYTES, what="manifest"),
            "manifest",
            max_len=6,
            length=6,
        )
        version, creator, created_ms, name, mode, spec = fields
        read_int(version, "manifest version", lo=MANIFEST_VERSION, hi=MANIFEST_VERSION)
        manifest = cls(
            creator=read_peer(creator, "manifest creator"),
            created_ms=read_int(created_ms, "manifest creation time", hi=MAX_SEQ),
            name=read_str(name, "run name", max_len=128),
            mode=read_str(mode, "run mode", max_len=32),
            spec=read_bytes(spec, "run spec", max_len=MAX_SPEC_BYTES),
        )
        return manifest


def run_id_of(manifest_bytes: bytes) -> str:
    return hashlib.sha256(manifest_bytes).hexdigest()


def sign_manifest(key_pair: KeyPair, manifest: RunManifest) -> bytes:
    """The signed manifest envelope; ValueError unless `key_pair` is the creator's."""
    if ID.from_pubkey(key_pair.public_key).to_base58() != manifest.creator:
        raise ValueError("only the manifest's creator may sign it")
    raw = manifest.to_bytes()
    return seal(
        key_pair, domain=MANIFEST_DOMAIN, run=run_id_of(raw), round=None, payload=raw
    ).to_bytes()


def open_manifest(raw_envelope: bytes, run_id: str) -> RunManifest:
    """Verify a manifest envelope for `run_id`; raise `ProtocolError` (incl. `WrongRun`) if not."""
    env = open_envelope(
        raw_envelope,
        expected_domain=MANIFEST_DOMAIN,
        expected_run=run_id,
        max_size=MAX_MANIFEST_ENVELOPE,
    )
    if run_id_of(env.payload) != run_id:
        raise WrongRun("manifest does not hash to the run ID it claims")
    manifest = RunManifest.from_bytes(env.payload)
    if manifest.to_bytes() != env.payload:
        raise WrongRun("manifest bytes are not canonical")
    if env.peer_id.to_base58() != manifest.creator:
        raise BadSignature("manifest is signed by someone other than its creator")
    return manifest
