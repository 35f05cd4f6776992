"""Frames: round trips, limits checked before allocation, idle timeouts, EOF and resets."""

from __future__ import annotations

import struct

import pytest
import trio
import trio.lowlevel
from hypothesis import given, settings
from hypothesis import strategies as st
from libp2p.network.stream.exceptions import StreamReset
from peertrain.protocol.errors import MessageTooLarge, PeerTimeout, ProtocolError, StreamEnded
from peertrain.protocol.framing import (
    read_exactly_into,
    read_frame,
    read_message,
    write_frame,
    write_message,
)
from peertrain.protocol.messages import ErrorResponse, Ping, Pong


@pytest.mark.parametrize("size", [0, 1, 1000, 300_000])
async def test_frames_round_trip(size, stream_pair):
    a, b = stream_pair()
    payload = bytes(range(256)) * (size // 256) + b"x" * (size % 256)
    await write_frame(a, payload, max_size=size)
    await write_frame(a, b"next", max_size=size + 4)
    assert await read_frame(b, max_size=size) == payload
    assert await read_frame(b, max_size=4) == b"next"


async def test_reading_into_a_preallocated_buffer_across_many_small_chunks(stream_pair):
    a, b = stream_pair()
    data = bytes(range(256)) * 40
    buffer = bytearray(len(data))

    async def trickle():
        for i in range(0, len(data), 77):
            await a.write(data[i : i + 77])
            await trio.lowlevel.checkpoint()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(trickle)
        await read_exactly_into(b, memoryview(buffer))
    assert buffer == data


async def test_announced_length_over_the_limit_is_refused_before_reading_the_body(stream_pair):
    a, b = stream_pair()
    await a.write(struct.pack(">I", 2**32 - 1))  # claims 4 GiB, sends nothing more
    with pytest.raises(MessageTooLarge, match="4294967295"):
        await read_frame(b, max_size=1 << 20)


async def test_writer_refuses_frames_over_the_limit(stream_pair):
    a, _ = stream_pair()
    with pytest.raises(MessageTooLarge):
        await write_frame(a, b"x" * 11, max_size=10)


async def test_silent_peer_times_out_with_its_phase(autojump_clock, stream_pair):
    a, b = stream_pair()
    await a.write(struct.pack(">I", 10) + b"abc")
    with pytest.raises(PeerTimeout) as info:
        await read_frame(b, max_size=100, idle_timeout=5)
    assert info.value.phase == "frame-body"
    with pytest.raises(PeerTimeout) as info:
        await read_frame(b, max_size=100, idle_timeout=5)
    assert info.value.phase == "frame-header"


async def test_peer_that_does_not_read_times_out_the_writer(autojump_clock, stream_pair):
    a, _ = stream_pair(lockstep=True)
    with pytest.raises(PeerTimeout) as info:
        await write_frame(a, b"x" * 100, max_size=100, idle_timeout=2)
    assert info.value.phase == "frame-write"


async def test_eof_in_the_middle_of_a_frame_is_stream_ended(stream_pair):
    a, b = stream_pair()
    await a.write(struct.pack(">I", 10) + b"abc")
    await a.stream.aclose()
    with pytest.raises(StreamEnded, match="frame-body"):
        await read_frame(b, max_size=100)


class ResetStream:
    async def read(self, n: int | None = None) -> bytes:
        raise StreamReset("reset by peer")

    async def write(self, data: bytes) -> None:
        raise StreamReset("reset by peer")


async def test_libp2p_reset_is_stream_ended():
    with pytest.raises(StreamEnded):
        await read_frame(ResetStream(), max_size=10)
    with pytest.raises(StreamEnded):
        await write_frame(ResetStream(), b"x", max_size=10)


async def test_messages_over_frames(stream_pair):
    a, b = stream_pair()
    ping = Ping()
    await write_message(a, ping)
    got = await read_message(b, Ping)
    await write_message(b, got.reply(Pong))
    assert (await read_message(a, (Pong, ErrorResponse))).request_id == ping.request_id


class ScriptedStream:
    """Replays fixed chunks, then EOF: what a hostile peer's bytes look like to the reader."""

    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = list(chunks)

    async def read(self, n: int | None = None) -> bytes:
        if not self.chunks:
            return b""
        chunk = self.chunks.pop(0)
        if n is not None and len(chunk) > n:
            chunk, rest = chunk[:n], chunk[n:]
            self.chunks.insert(0, rest)
        return chunk


@settings(max_examples=300, deadline=None)
@given(st.lists(st.binary(min_size=1, max_size=40), max_size=6))
def test_random_stream_bytes_raise_only_protocol_errors(chunks):
    async def main():
        stream = ScriptedStream(chunks)
        try:
            while True:
                await read_message(stream, (Ping, Pong, ErrorResponse))
        except ProtocolError:
            pass

    trio.run(main)
