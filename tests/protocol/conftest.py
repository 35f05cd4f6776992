"""Byte streams for protocol tests: real trio streams behind libp2p's read/write interface."""

from __future__ import annotations

import pytest
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


@pytest.fixture
def stream_pair():
    """`a, b = stream_pair()`: two connected in-memory streams; `lockstep=True` for no buffer."""

    def make(*, lockstep: bool = False) -> tuple[TrioByteStream, TrioByteStream]:
        pair = trio.testing.lockstep_stream_pair if lockstep else trio.testing.memory_stream_pair
        a, b = pair()
        return TrioByteStream(a), TrioByteStream(b)

    return make
