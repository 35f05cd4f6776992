"""Connected byte streams in memory, seen through libp2p's stream interface (protocol tests).

The protocol layer reads and writes libp2p streams (`read(n)`, `write(data)`, `close()`); trio's
memory stream pairs give the same semantics without a host, so codecs, framing and transfers
are tested against real partial reads and back-pressure (`lockstep=True`: no buffer at all).
"""

from __future__ import annotations

import trio
import trio.testing


class TrioByteStream:
    """A trio stream seen through libp2p's `read(n)` / `write(data)` interface."""

    def __init__(self, stream: trio.abc.Stream) -> None:
        self.stream = stream

    async def read(self, n: int | None = None) -> bytes:
        return await self.stream.receive_some(n)

    async def write(self, data: bytes) -> None:
        await self.stream.send_all(data)

    async def close(self) -> None:
        await self.stream.aclose()


def byte_stream_pair(*, lockstep: bool = False) -> tuple[TrioByteStream, TrioByteStream]:
    """Two connected in-memory streams; `lockstep=True` for no buffer between them."""
    pair = trio.testing.lockstep_stream_pair if lockstep else trio.testing.memory_stream_pair
    a, b = pair()
    return TrioByteStream(a), TrioByteStream(b)
