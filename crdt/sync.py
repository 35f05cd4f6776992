"""Anti-entropy messages: compare per-owner hashes, ship the signed envelopes that differ.

One exchange is push-pull. The initiator sends its `summary` (live member → slot hash) and
whether it holds the manifest. The responder merges any envelopes pushed along, then replies
with the signed envelopes it holds for every owner whose hash differs (the manifest too if
missing), up to a byte budget (`more` says it stopped early), plus `differing`: its own hashes
for owners both sides hold but disagree on. The initiator merges, and pushes back whatever still
differs (and the manifest, if the responder lacks it) in a second request. A joiner's summary is
empty, so it receives everything.

Revocations (invite runs, crdt/revocations.py) ride along: each side names the digest of its
set; where they differ the responder sends its whole set (it is small: ~400 bytes a revocation)
and the initiator, if the digests still differ, pushes its own back. A replica that joins or
restarts late thus learns every revocation, not an issuer's last few.
"""

from __future__ import annotations

import dataclasses
from typing import Annotated

from peertrain.protocol.ids import protocol_id
from peertrain.protocol.messages import Request, Response, message
from peertrain.protocol.schema import MaxLen

from .certificates import MAX_REVOCATION_BYTES
from .manifest import MAX_MANIFEST_ENVELOPE
from .runstate import OWNER_HASH_LEN
from .signed import MAX_DELTA_ENVELOPE

SYNC_PROTOCOL = protocol_id("crdt/sync", "1.0.0")
MAX_SUMMARY_OWNERS = 4096
MAX_SYNC_ENVELOPES = 1024
MAX_SYNC_REVOCATIONS = 2048  # per message: 2 MiB at most
MAX_SYNC_MESSAGE = 4 * 1024 * 1024

OwnerHash = Annotated[bytes, MaxLen(OWNER_HASH_LEN)]
Manifest = Annotated[bytes, MaxLen(MAX_MANIFEST_ENVELOPE)]
Envelopes = Annotated[
    tuple[Annotated[bytes, MaxLen(MAX_DELTA_ENVELOPE)], ...], MaxLen(MAX_SYNC_ENVELOPES)
]
Revocations = Annotated[
    tuple[Annotated[bytes, MaxLen(MAX_REVOCATION_BYTES)], ...], MaxLen(MAX_SYNC_REVOCATIONS)
]
Digest = Annotated[bytes, MaxLen(32)]


@message("crdt/sync", max_size=MAX_SYNC_MESSAGE)
class SyncRequest(Request):
    run: Annotated[str, MaxLen(128)]
    has_manifest: bool
    summary: Annotated[dict[str, OwnerHash], MaxLen(MAX_SUMMARY_OWNERS)]
    envelopes: Envelopes = ()
    manifest: Manifest | None = None  # pushed when the responder said it lacks it
    revocations_digest: Digest = b""  # of our revocation set (b"": none)
    revocations: Revocations = ()  # pushed when the responder's digest differed


@message("crdt/sync-reply", max_size=MAX_SYNC_MESSAGE)
class SyncReply(Response):
    manifest: Manifest | None = None
    has_manifest: bool = True
    envelopes: Envelopes = ()
    differing: Annotated[dict[str, OwnerHash], MaxLen(MAX_SUMMARY_OWNERS)] = dataclasses.field(
        default_factory=dict
    )
    more: bool = False
    revocations_digest: Digest = b""
    revocations: Revocations = ()  # our whole set, when the request's digest differed
