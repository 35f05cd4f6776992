"""Receiving without copies: Noise messages opened straight into a waiting reader's buffer.

`SealedReader` is driven over a real socket pair with hand-sealed Noise messages (well-formed,
split at odd places, and malformed); the Yamux side runs between real libp2p hosts on loopback,
ours and py-libp2p's stock one, whose messages do not line up with Yamux frames.
"""

from __future__ import annotations

import random
import struct

import pytest
import trio
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305
from peertrain.node.net.transport import NoiseError
from peertrain.node.net.transport.noise_receive import SealedReader
from peertrain.protocol.framing import read_exactly_into
from peertrain.testing import wait_until
from peertrain.testing.loopback_hosts import connected_pair, muxed, our_host, stock_host

KEY = bytes(range(32))
SINK = "/peertrain/test-sink/1.0.0"
_NONCE = struct.Struct("<4xQ")


def seal(plaintexts: list[bytes], first_nonce: int = 0) -> bytes:
    """Noise transport messages as the wire carries them: 2-byte length, then the ciphertext."""
    cipher, out = ChaCha20Poly1305(KEY), bytearray()
    for index, plain in enumerate(plaintexts):
        sealed = cipher.encrypt(_NONCE.pack(first_nonce + index), plain, None)
        out += struct.pack(">H", len(sealed)) + sealed
    return bytes(out)


def reader_pair() -> tuple[SealedReader, trio.socket.SocketType]:
    ours, theirs = trio.socket.socketpair()
    return SealedReader(None, ours, KEY, 0), theirs  # type: ignore[arg-type]


async def send_cut(sock: trio.socket.SocketType, wire: bytes, pieces: list[int]) -> None:
    """Send `wire` cut at the sizes in `pieces` (cycled), then close."""
    offset, index = 0, 0
    while offset < len(wire):
        end = min(len(wire), offset + pieces[index % len(pieces)])
        while offset < end:  # a socket send may take only part
            offset += await sock.send(wire[offset:end])
        index += 1
    sock.close()


async def feed(wire: bytes, pieces: list[int]) -> SealedReader:
    """A reader whose peer has sent all of `wire` (small: it must fit the socket buffer)."""
    reader, theirs = reader_pair()
    await send_cut(theirs, wire, pieces)
    return reader


async def read_all(reader: SealedReader, *, into: bool) -> list[bytes]:
    out = []
    while await reader.receive():
        while (size := reader.next_size()) is not None:
            if into:
                target = memoryview(bytearray(size + 4))[2 : 2 + size]
                assert reader.open(size, target) is target
                out.append(bytes(target))
            else:
                out.append(bytes(reader.open(size)))
    return out


async def received(wire: bytes, pieces: list[int], *, into: bool) -> list[bytes]:
    """Every plaintext a reader opens while its peer sends `wire` cut at `pieces`."""
    reader, theirs = reader_pair()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(send_cut, theirs, wire, pieces)
        return await read_all(reader, into=into)


@pytest.mark.parametrize("into", [False, True], ids=["new-object", "into-buffer"])
async def test_messages_split_anywhere_open_intact_in_order(into):
    rng = random.Random(1)
    plaintexts = [rng.randbytes(rng.choice([0, 1, 13, 4000, 65519])) for _ in range(40)]
    assert await received(seal(plaintexts), [1, 2, 3, 700, 65537, 5000], into=into) == plaintexts


async def test_open_all_skips_empty_messages():
    reader = await feed(seal([b"a", b"", b"bc"]), [1000])
    assert await reader.receive()
    assert [bytes(p) for p in reader.open_all()] == [b"a", b"bc"]
    assert not await reader.receive()


async def test_a_tampered_message_fails_authentication():
    wire = bytearray(seal([b"first", b"second message"]))
    wire[-3] ^= 0x40
    reader = await feed(bytes(wire), [len(wire)])
    assert await reader.receive()
    assert bytes(reader.open(reader.next_size())) == b"first"  # type: ignore[arg-type]
    size = reader.next_size()
    with pytest.raises(NoiseError, match="authentication"):
        reader.open(size, memoryview(bytearray(size)))  # type: ignore[arg-type]


async def test_a_replayed_message_fails_authentication():
    message = seal([b"once"])
    reader = await feed(message + message, [100])
    assert await reader.receive()
    reader.open(reader.next_size())  # type: ignore[arg-type]
    with pytest.raises(NoiseError, match="authentication"):
        reader.open(reader.next_size())  # type: ignore[arg-type]


async def test_a_message_shorter_than_its_tag_is_refused():
    reader = await feed(struct.pack(">H", 15) + bytes(15), [17])
    with pytest.raises(NoiseError, match="shorter than its tag"):
        await reader.receive()


async def test_the_connection_closing_mid_message_is_an_error_and_a_clean_end_is_not():
    wire = seal([b"whole", b"cut short"])
    reader = await feed(wire[:-5], [7])
    assert await reader.receive()
    reader.open(reader.next_size())  # type: ignore[arg-type]
    with pytest.raises(NoiseError, match="middle of a Noise message"):
        await reader.receive()
    clean = await feed(seal([b"whole"]), [3])
    assert await read_all(clean, into=False) == [b"whole"]
    assert not await clean.receive()


async def test_a_full_buffer_of_partial_messages_is_compacted_not_overrun():
    # 40 maximal messages (~2.6 MB) arrive faster than they are opened: the 1 MiB buffer must
    # slide the partial one at its end to the front, again and again, and lose nothing.
    plaintexts = [random.Random(i).randbytes(65519) for i in range(40)]
    assert await received(seal(plaintexts), [300_001], into=True) == plaintexts


# ---------------------------------------------------------------- through Yamux, real hosts


async def test_a_bulk_transfer_lands_in_the_readers_buffer_without_copies():
    payload = random.Random(2).randbytes((8 << 20) + 12345)
    got = bytearray(len(payload))
    done = trio.Event()

    async def sink(stream) -> None:
        await read_exactly_into(stream, memoryview(got))
        done.set()

    async with connected_pair(our_host(), our_host()) as (listener, dialer):
        listener.set_stream_handler(SINK, sink)
        stream = await dialer.new_stream(listener.get_id(), [SINK])
        await stream.write(payload)
        with trio.fail_after(30):
            await done.wait()
        in_place = muxed(listener, dialer.get_id()).statistics().bytes_in_place
    assert got == payload
    assert in_place >= len(payload) * 0.9  # all but pieces that came before the reader waited


@pytest.mark.parametrize("stock_sends", [True, False], ids=["stock-to-ours", "ours-to-stock"])
async def test_a_stock_peers_messages_that_straddle_frames_land_intact(stock_sends):
    # py-libp2p's Yamux sends 64 KiB bodies glued to their headers, and its Noise cuts that at
    # 65 519 bytes: every message mixes a body's end with the next header. None fits the
    # in-place path; all must take the parsing path and still arrive in order.
    payload = random.Random(3).randbytes(3_000_017)
    got = bytearray(len(payload))
    done = trio.Event()

    async def sink(stream) -> None:
        await read_exactly_into(stream, memoryview(got))
        done.set()

    sender, receiver = (stock_host(), our_host()) if stock_sends else (our_host(), stock_host())
    async with connected_pair(receiver, sender):
        receiver.set_stream_handler(SINK, sink)
        stream = await sender.new_stream(receiver.get_id(), [SINK])
        await stream.write(payload)
        with trio.fail_after(30):
            await done.wait()
    assert got == payload


async def test_bytes_placed_for_a_reader_that_is_cancelled_are_kept_in_order():
    # The connection's reader may decrypt into a waiting buffer just as that reader's caller
    # gives up: those bytes were never reported, so they must come back on the next read.
    async with connected_pair(our_host(), our_host()) as (listener, dialer):
        accepted: list = []

        async def keep(stream) -> None:
            accepted.append(stream)
            await trio.sleep_forever()

        listener.set_stream_handler(SINK, keep)
        sender = await dialer.new_stream(listener.get_id(), [SINK])
        await sender.write(b"x")
        await wait_until(lambda: accepted)
        stream = accepted[0].muxed_stream
        assert await stream.readinto(bytearray(1)) == 1
        target = bytearray(100)
        async with trio.open_nursery() as nursery:
            scope = trio.CancelScope()

            async def wait_in_readinto() -> None:
                with scope:
                    await stream.readinto(target)

            nursery.start_soon(wait_in_readinto)
            await trio.testing.wait_all_tasks_blocked()
            scope.cancel()  # delivered first; then bytes land before the reader runs again
            stream.destination(5)[:] = b"early"  # what the connection's reader does
            stream.placed(5)
        await sender.write(b" then later")
        back = bytearray(16)
        with trio.fail_after(10):
            filled = 0
            while filled < len(back):
                filled += await stream.readinto(memoryview(back)[filled:])
        assert bytes(back) == b"early then later"


async def test_a_second_reader_waiting_on_the_same_stream_is_refused():
    async with connected_pair(our_host(), our_host()) as (listener, dialer):
        accepted: list = []

        async def keep(stream) -> None:
            accepted.append(stream)
            await trio.sleep_forever()

        listener.set_stream_handler(SINK, keep)
        sender = await dialer.new_stream(listener.get_id(), [SINK])
        await sender.write(b"x")
        await wait_until(lambda: accepted)
        stream = accepted[0].muxed_stream
        assert await stream.readinto(bytearray(1)) == 1
        async with trio.open_nursery() as nursery:
            nursery.start_soon(stream.readinto, bytearray(10))
            await trio.testing.wait_all_tasks_blocked()
            with pytest.raises(trio.BusyResourceError):
                await stream.readinto(bytearray(10))
            nursery.cancel_scope.cancel()
