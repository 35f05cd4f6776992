"""Our Noise + Yamux data path (node/transport): correct bytes, bounded buffers, libp2p interop.

Every test runs real libp2p hosts on loopback in this process. "ours" is the host a peertrain
node builds (`build_host`); "stock" is py-libp2p 0.8.1's own Noise + Yamux, the wire format
we must keep speaking. No timing assertions here: speed lives in benchmarks/stream.py.
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import AsyncIterator

import pytest
import trio
import trio.testing
from libp2p.abc import IHost
from libp2p.network.stream.exceptions import StreamEOF, StreamReset
from libp2p.peer.peerinfo import PeerInfo
from libp2p.stream_muxer.exceptions import MuxedStreamReset
from libp2p.stream_muxer.yamux.yamux import Yamux as StockYamux
from peertrain.node.net.transport import (
    NoiseSession,
    YamuxConfig,
    YamuxConnection,
)
from peertrain.node.net.transport.yamux_stream import YamuxStream
from peertrain.node.net.transport.yamux_wire import INITIAL_WINDOW
from peertrain.protocol.framing import read_exactly_into
from peertrain.testing import wait_until
from peertrain.testing.loopback_hosts import connected_pair, muxed, our_host, stock_host

ECHO = "/peertrain/test-echo/1.0.0"
SINK = "/peertrain/test-sink/1.0.0"


@contextlib.asynccontextmanager
async def connected(listener: IHost, dialer: IHost) -> AsyncIterator[tuple[IHost, IHost]]:
    async with connected_pair(listener, dialer):
        listener.set_stream_handler(ECHO, echo_handler)
        yield listener, dialer


async def echo_handler(stream) -> None:
    """Read to EOF in reads of random sizes, then send everything back and close."""
    rng = random.Random(len(str(stream)))
    received = bytearray()
    while True:
        try:
            chunk = await stream.read(rng.choice([1, 7, 4096, 65536, 1 << 20]))
        except StreamEOF:
            break
        if not chunk:
            break
        received += chunk
    await stream.write(bytes(received))
    await stream.close()


async def echo(dialer: IHost, listener: IHost, payload: bytes) -> bytes:
    stream = await dialer.new_stream(listener.get_id(), [ECHO])
    for offset in range(0, len(payload), 3 << 20):  # several writes, one of them partial
        await stream.write(payload[offset : offset + (3 << 20)])
    await stream.close()
    back = bytearray()
    while True:
        try:
            chunk = await stream.read(1 << 20)
        except StreamEOF:
            break
        if not chunk:
            break
        back += chunk
    return bytes(back)


# ---------------------------------------------------------------- ours <-> ours


async def test_build_host_uses_our_noise_and_yamux():
    async with connected(our_host(), our_host()) as (listener, dialer):
        conn = muxed(dialer, listener.get_id())
        assert isinstance(conn, YamuxConnection)
        assert isinstance(conn.secured_conn, NoiseSession)
        stream = await dialer.new_stream(listener.get_id(), [ECHO])
        assert isinstance(stream.muxed_stream, YamuxStream)
        await stream.reset()


SIZES = [1, 11, 12, 13, 65518, 65519, 65520, 65536 + 13, 262144, 262145, (1 << 20) + 7, 5_000_003]


async def test_odd_sized_payloads_round_trip_intact():
    rng = random.Random(1)
    async with connected(our_host(), our_host()) as (listener, dialer):
        for size in SIZES:
            payload = rng.randbytes(size)
            assert await echo(dialer, listener, payload) == payload, size


async def test_many_concurrent_streams_keep_their_bytes_apart():
    rng = random.Random(2)
    payloads = [rng.randbytes(rng.randrange(1, 300_000)) for _ in range(48)]
    results: dict[int, bytes] = {}
    async with connected(our_host(), our_host()) as (listener, dialer):

        async def one(index: int) -> None:
            results[index] = await echo(dialer, listener, payloads[index])

        async with trio.open_nursery() as nursery:
            for index in range(len(payloads)):
                nursery.start_soon(one, index)
    assert all(results[i] == payloads[i] for i in range(len(payloads)))


async def test_readinto_fills_a_buffer_straight_from_the_stream():
    payload = random.Random(6).randbytes(3_000_001)
    got = bytearray(len(payload))
    done = trio.Event()

    async def fill(stream) -> None:
        view, filled = memoryview(got), 0
        while filled < len(view):
            step = random.Random(filled).choice([1, 100, 70_000, 1 << 20])
            filled += await stream.muxed_stream.readinto(view[filled : filled + step])
        done.set()

    async with connected(our_host(), our_host()) as (listener, dialer):
        listener.set_stream_handler(SINK, fill)
        stream = await dialer.new_stream(listener.get_id(), [SINK])
        await stream.write(payload)
        with trio.fail_after(30):
            await done.wait()
    assert got == payload


async def test_closed_streams_are_forgotten():
    async with connected(our_host(), our_host()) as (listener, dialer):
        for index in range(60):
            assert await echo(dialer, listener, bytes([index]) * 100) == bytes([index]) * 100
        await wait_until(lambda: not muxed(dialer, listener.get_id()).statistics().streams)
        assert muxed(listener, dialer.get_id()).statistics().streams == 0


async def test_private_network_host_moves_data_through_the_psk_layer():
    psk = "ab" * 32
    payload = random.Random(3).randbytes(2_000_001)
    async with connected(our_host(psk), our_host(psk)) as (listener, dialer):
        assert await echo(dialer, listener, payload) == payload


# ---------------------------------------------------------------- interop with py-libp2p


@pytest.mark.parametrize("we_dial", [True, False], ids=["ours-dials-stock", "stock-dials-ours"])
async def test_interop_with_a_stock_py_libp2p_host(we_dial):
    rng = random.Random(4)
    ours, stock = our_host(), stock_host()
    dialer, listener = (ours, stock) if we_dial else (stock, ours)
    async with connected(listener, dialer):
        assert type(muxed(ours, stock.get_id())) is YamuxConnection
        assert type(muxed(stock, ours.get_id())) is StockYamux
        for size in (1, 65536 + 13, 3_000_017):
            payload = rng.randbytes(size)
            assert await echo(dialer, listener, payload) == payload, size


# ---------------------------------------------------------------- flow control and resets


async def test_a_reader_that_pauses_longer_than_5_s_keeps_its_stream(mock_clock):
    # py-libp2p's writer resets a stream whose window stays shut for 5 s; ours waits.
    # The clock runs at real speed and jumps over the pause once everything is idle.
    mock_clock.rate = 1.0
    mock_clock.autojump_threshold = 0.5
    payload = random.Random(5).randbytes(8 << 20)
    got = bytearray(len(payload))
    done = trio.Event()

    async def slow_reader(stream) -> None:
        view = memoryview(got)
        await read_exactly_into(stream, view[:1])
        await trio.sleep(7.0)  # the writer is stuck on a shut window all this time
        await read_exactly_into(stream, view[1:])
        done.set()

    async with connected(our_host(), our_host()) as (listener, dialer):
        listener.set_stream_handler(SINK, slow_reader)
        stream = await dialer.new_stream(listener.get_id(), [SINK])
        start = trio.current_time()
        await stream.write(payload)
        with trio.fail_after(60):
            await done.wait()
        assert trio.current_time() - start >= 7.0
    assert bytes(got) == payload


async def test_an_unread_stream_buffers_no_more_than_its_initial_window():
    accepted: list = []

    async def never_reads(stream) -> None:
        accepted.append(stream)
        await hold(stream)

    async with connected(our_host(), our_host()) as (listener, dialer):
        listener.set_stream_handler(SINK, never_reads)
        stream = await dialer.new_stream(listener.get_id(), [SINK])
        async with trio.open_nursery() as nursery:
            nursery.start_soon(stream.write, bytes(32 << 20))
            full = INITIAL_WINDOW - 65536
            await wait_until(lambda: accepted and accepted[0].muxed_stream._buffered >= full)
            await trio.sleep(0.3)  # give it every chance to overrun
            assert accepted[0].muxed_stream._buffered <= INITIAL_WINDOW
            nursery.cancel_scope.cancel()


async def test_a_reset_reaches_the_reader_and_the_writer():
    started, ended = trio.Event(), trio.Event()
    outcome: list[type[BaseException]] = []

    async def reader(stream) -> None:
        started.set()
        try:
            while True:
                await stream.read(65536)
        except (StreamReset, StreamEOF) as exc:
            outcome.append(type(exc))
        ended.set()

    async with connected(our_host(), our_host()) as (listener, dialer):
        listener.set_stream_handler(SINK, reader)
        stream = await dialer.new_stream(listener.get_id(), [SINK])
        await stream.write(b"x" * 1000)
        await started.wait()
        await stream.reset()
        with trio.fail_after(5):
            await ended.wait()
        assert outcome == [StreamReset]
        with pytest.raises(StreamReset):
            await stream.write(b"more")


async def test_a_cancelled_write_leaves_stream_and_connection_consistent():
    # A write cut short by its caller's timeout sends a prefix of its data, never half a frame,
    # and the connection stays usable. KNOWN ISSUE (about 1 run in 7 here): the cut stream is
    # sometimes reset instead of staying writable; then the connection must still work and what
    # arrived must still be a clean prefix. Tracked in the closing note of the founding session.
    payload = random.Random(7).randbytes(24 << 20)
    marker = b"--then this, whole--"
    received = bytearray()
    done = trio.Event()

    async def collect(stream) -> None:
        with contextlib.suppress(StreamEOF, StreamReset):
            while True:
                received.extend(await stream.read(1 << 20))
        done.set()

    async with connected(our_host(), our_host()) as (listener, dialer):
        listener.set_stream_handler(SINK, collect)
        stream = await dialer.new_stream(listener.get_id(), [SINK])
        with trio.move_on_after(0.02):
            await stream.write(payload)
        assert await echo(dialer, listener, b"other stream") == b"other stream"
        try:
            await stream.write(marker)
            await stream.close()
            was_reset = False
        except StreamReset:
            was_reset = True
            await stream.reset()
        with trio.fail_after(30):
            await done.wait()
        assert await echo(dialer, listener, b"still connected") == b"still connected"
    if was_reset:
        assert payload.startswith(bytes(received))
    else:
        assert received.endswith(marker)
        assert payload.startswith(received[: -len(marker)])


async def hold(stream) -> None:
    await trio.sleep_forever()


async def test_a_peer_that_ignores_our_window_loses_the_connection():
    async with connected(our_host(), our_host()) as (listener, dialer):
        listener.set_stream_handler(SINK, hold)
        stream = await dialer.new_stream(listener.get_id(), [SINK])
        conn = muxed(dialer, listener.get_id())
        # what a misbehaving peer does: one DATA frame larger than the window it was granted
        # (the victim may hang up before all of it is sent)
        with contextlib.suppress(MuxedStreamReset):
            await conn.send_data(stream.muxed_stream, memoryview(bytes(INITIAL_WINDOW + 1)))
        with trio.fail_after(10):
            await conn.event_closed.wait()
        with pytest.raises((StreamReset, StreamEOF)):
            await stream.read(1)


def test_config_refuses_frames_other_implementations_reject():
    with pytest.raises(ValueError, match="rust-libp2p"):
        YamuxConfig(max_frame=(1 << 20) + 1)
    with pytest.raises(ValueError, match="initial"):
        YamuxConfig(max_window=INITIAL_WINDOW - 1)


async def test_a_cancelled_close_still_closes_the_connection():
    # A caller that bounds its hang-up (a dial-back probe gives it a second) may cancel the
    # close while the GoAway is being written; the socket must close anyway, or the peer keeps
    # listing us as connected.
    async with connected(our_host(), our_host()) as (listener, dialer):
        await dialer.connect(PeerInfo(listener.get_id(), listener.get_addrs()))
        (conn,) = dialer.get_network().get_connections(listener.get_id())
        with trio.CancelScope() as scope:
            scope.cancel()
            await conn.close()
        await wait_until(lambda: not listener.get_network().get_connections(dialer.get_id()))
