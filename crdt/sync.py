"""Anti-entropy messages: compare per-owner hashes, ship the signed envelopes that differ.

One exchange is push-pull. The initiator sends its `summary` (live member → slot hash) and
whether it holds the manifest. The responder merges any envelopes pushed along, then replies
with the signed envelopes it holds for every owner whose hash differs (the manifest too if
missing), up to a byte budget (`more` says it stopped early), plus `differing`: its own hashes
for owners both sides hold but disagree on. The initiator merges, and pushes back whatever still
differs (and the manifest, if the responder lacks it) in a second request. A joiner's summary is
empty, so it receives everything.
"""

from __future__ import annotations

import dataclasses
from typing import Annotated

from peertrain.protocol.ids import protocol_id
from peertrain.protocol.messages import Request, Response, message
from peertrain.protocol.schema import MaxLen

from .manifest import MAX_MANIFEST_ENVELOPE
from .runstate import OWNER_HASH_LEN
from .signed import MAX_DELTA_ENVELOPE

SYNC_PROTOCOL = protocol_id("crdt/sync", "1.0.0")
MAX_SUMMARY_OWNERS = 4096
MAX_SYNC_ENVELOPES = 1024
MAX_SYNC_MESSAGE = 4 * 1024 * 1024

OwnerHash = Annotated[bytes, MaxLen(OWNER_HASH_LEN)]
Manifest = Annotated[bytes, MaxLen(MAX_MANIFEST_ENVELOPE)]
Envelopes = Annotated[
    tuple[Annotated[bytes, MaxLen(MAX_DELTA_ENVELOPE)], ...], MaxLen(MAX_SYNC_ENVELOPES)
]


@message("crdt/sync", max_size=MAX_SYNC_MESSAGE)
class SyncRequest(Request):
    run: Annotated[str, MaxLen(128)]
    has_manifest: bool
    summary: Annotated[dict[str, OwnerHash], MaxLen(MAX_SUMMARY_OWNERS)]
    envelopes: Envelopes = ()
    manifest: Manifest | None = None  # pushed when the responder said it lacks it


@message("crdt/sync-reply", max_size=MAX_SYNC_MESSAGE)
class SyncReply(Response):
    manifest: Manifest | None = None
    has_manifest: bool = True
    envelopes: Envelopes = ()
    differing: Annotated[dict[str, OwnerHash], MaxLen(MAX_SUMMARY_OWNERS)] = dataclasses.field(
        default_factory=dict
    )
    more: bool = False
