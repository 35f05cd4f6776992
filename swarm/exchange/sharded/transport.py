"""The one seam between a sharded round and the network (testing/shard_network.py is its
in-memory implementation, with per-link bandwidth and latency for the scale benchmark).

Small signed messages are broadcast to the group (gossip in a node); payloads are served by key
and fetched point to point, and the fetcher checks them against a committed digest."""

from __future__ import annotations

from typing import Protocol

from ..errors import FetchFailed

__all__ = ["FetchFailed", "ShardTransport"]


class ShardTransport(Protocol):
    async def broadcast(self, raw: bytes) -> None:
        """Send a sealed envelope to every member of the group (delivered to `Board.receive`)."""
        ...

    def serve(self, key: bytes, payload: bytes) -> None:
        """Make `payload` fetchable by `key` from us until the round ends."""
        ...

    async def fetch(self, peer: str, key: bytes) -> bytes:
        """`peer`'s payload served under `key`; raises `FetchFailed` when it has none."""
        ...
