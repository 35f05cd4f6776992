"""The one seam between a sharded round and the network (testing/shard_network.py is its
in-memory implementation, with per-link bandwidth and latency for the scale benchmark).

Small signed messages are broadcast to the group (gossip in a node); payloads are served under
their content address and fetched point to point, checked against the address on arrival."""

from __future__ import annotations

from typing import Protocol

from ..codec import Payload
from ..errors import FetchFailed

__all__ = ["FetchFailed", "ShardTransport"]


class ShardTransport(Protocol):
    async def broadcast(self, raw: bytes) -> None:
        """Send a sealed envelope to every member of the group (delivered to `Board.receive`)."""
        ...

    async def serve(self, payload: bytes) -> bytes:
        """Make `payload` fetchable from us until the round ends; its content address (a hash
        that binds its bytes, so a commitment to the address is a commitment to the bytes)."""
        ...

    async def fetch(self, peer: str, key: bytes, nbytes: int) -> Payload:
        """The `nbytes` payload `peer` serves under `key`, checked against `key`, and served by
        us too from then on (an owner holds its inputs for a dispute without hashing them
        again); raises `FetchFailed` when it has none or sends other bytes."""
        ...
