"""Length-prefixed frames on libp2p streams, with hard size limits and per-read timeouts.

A frame is a 4-byte big-endian length followed by that many bytes. The length is checked
against the caller's hard maximum *before* anything is allocated, so a peer announcing a 4 GiB
frame costs us four bytes. Every read waits at most `idle_timeout` seconds for *progress* (one
chunk of any size), so a dead peer raises `PeerTimeout`; a peer that trickles bytes forever is
bounded by the caller's own deadline (a trio cancel scope around the whole exchange).

The stream is anything with `async read(n) -> bytes` (may return fewer than n; b"" or
`EOFError` at the end) and `async write(data)`: a libp2p `INetStream` satisfies it.

Keep draining. py-libp2p's Yamux fails a writer whose send window stays empty for 5 s
("Timed out waiting for window update after 5 seconds"), and the window only reopens when the
reader reads. A reader that stops reading for more than ~5 s in the middle of a transfer (to
decode, to wait on a full channel, to run torch on the event loop) kills the stream. So read a
whole transfer into its buffer first (`read_exactly_into`) and do slow work afterwards or in a
thread that does not block the reading task.
"""

from __future__ import annotations

import struct
from collections.abc import Awaitable, Callable
from typing import Protocol, cast, overload

import trio
from libp2p.exceptions import BaseLibp2pError
from libp2p.io.exceptions import IOException

from .errors import MessageTooLarge, PeerTimeout, StreamEnded
from .messages import M2, M3, M4, M, Message, decode, encode

HEADER = struct.Struct(">I")
MAX_FRAME_LIMIT = (1 << 32) - 1
DEFAULT_IDLE_TIMEOUT = 30.0
MIN_WRITE_RATE = 1e6  # bytes/s a peer must at least take before a write times out
_COALESCE_BELOW = 64 * 1024  # small frames go out as one write (one muxer frame), big ones unjoined


class ByteStream(Protocol):
    async def read(self, n: int | None = None) -> bytes: ...

    async def write(self, data: bytes) -> None: ...


# What a stream raises when the peer resets or the connection dies. py-libp2p's muxer errors
# (MuxedStreamError and kin) are not IOExceptions; a stream ending is the peer's doing, not ours.
_STREAM_FAILURES: tuple[type[BaseException], ...] = (
    IOException,
    BaseLibp2pError,
    trio.BrokenResourceError,
    trio.ClosedResourceError,
    ConnectionError,
)


def _readinto_of(stream: object) -> Callable[[memoryview], Awaitable[int]] | None:
    """The zero-copy `readinto` of our own muxed streams (node/transport), when present."""
    muxed = getattr(stream, "muxed_stream", stream)
    return getattr(muxed, "readinto", None)


async def _read_some(stream: ByteStream, n: int, *, idle_timeout: float, phase: str) -> bytes:
    with trio.move_on_after(idle_timeout):
        try:
            chunk = await stream.read(n)
        except EOFError:
            chunk = b""
        except _STREAM_FAILURES as exc:
            raise StreamEnded(f"stream failed during {phase}: {exc!r}") from None
        if not chunk:
            raise StreamEnded(f"stream ended during {phase}")
        return chunk
    raise PeerTimeout(f"no bytes for {idle_timeout:g} s during {phase}", phase=phase)


async def read_exactly_into(
    stream: ByteStream,
    buffer: memoryview,
    *,
    idle_timeout: float = DEFAULT_IDLE_TIMEOUT,
    phase: str = "read",
) -> None:
    """Fill `buffer` (a writable byte memoryview) completely from `stream`."""
    view = buffer.cast("B") if buffer.format != "B" or buffer.ndim != 1 else buffer
    filled, total = 0, len(view)
    readinto = _readinto_of(stream)
    if readinto is not None:
        while filled < total:
            with trio.move_on_after(idle_timeout):
                try:
                    got = await readinto(view[filled:])
                except EOFError:
                    got = 0
                except _STREAM_FAILURES as exc:
                    raise StreamEnded(f"stream failed during {phase}: {exc!r}") from None
                if not got:
                    raise StreamEnded(f"stream ended during {phase}")
                filled += got
                continue
            raise PeerTimeout(f"no bytes for {idle_timeout:g} s during {phase}", phase=phase)
        return
    while filled < total:
        chunk = await _read_some(stream, total - filled, idle_timeout=idle_timeout, phase=phase)
        if len(chunk) > total - filled:  # a misbehaving stream returned more than asked for
            raise StreamEnded(f"stream returned {len(chunk)} bytes, asked for {total - filled}")
        view[filled : filled + len(chunk)] = chunk
        filled += len(chunk)


async def read_exactly(
    stream: ByteStream, n: int, *, idle_timeout: float = DEFAULT_IDLE_TIMEOUT, phase: str = "read"
) -> bytes:
    """Read exactly `n` bytes (`n` must already be checked against a limit)."""
    first = await _read_some(stream, n, idle_timeout=idle_timeout, phase=phase) if n else b""
    if len(first) == n:
        return first  # the common case: no extra copy
    buffer = bytearray(n)
    buffer[: len(first)] = first
    await read_exactly_into(
        stream, memoryview(buffer)[len(first) :], idle_timeout=idle_timeout, phase=phase
    )
    return bytes(buffer)


async def read_frame_length(
    stream: ByteStream, *, max_size: int, idle_timeout: float = DEFAULT_IDLE_TIMEOUT
) -> int:
    """Read a frame header and check its length against `max_size`."""
    length: int
    (length,) = HEADER.unpack(
        await read_exactly(stream, HEADER.size, idle_timeout=idle_timeout, phase="frame-header")
    )
    if length > max_size:
        raise MessageTooLarge(f"peer announced a {length}-byte frame, limit {max_size}")
    return length


async def read_frame(
    stream: ByteStream, *, max_size: int, idle_timeout: float = DEFAULT_IDLE_TIMEOUT
) -> bytes:
    """Read one whole frame of at most `max_size` bytes."""
    length = await read_frame_length(stream, max_size=max_size, idle_timeout=idle_timeout)
    return await read_exactly(stream, length, idle_timeout=idle_timeout, phase="frame-body")


async def write_frame(
    stream: ByteStream,
    data: bytes | bytearray | memoryview,
    *,
    max_size: int,
    idle_timeout: float = DEFAULT_IDLE_TIMEOUT,
    min_rate: float = MIN_WRITE_RATE,
) -> None:
    """Write one frame; `max_size` is the same limit the reader applies.

    The write is given `idle_timeout + len(data) / min_rate` seconds: the data goes down in one
    `write` call (no slicing copies), so progress cannot be watched chunk by chunk.
    """
    if len(data) > max_size:
        raise MessageTooLarge(f"refusing to send a {len(data)}-byte frame, limit {max_size}")
    header = HEADER.pack(len(data))
    with trio.move_on_after(idle_timeout + len(data) / min_rate):
        try:
            if len(data) < _COALESCE_BELOW:
                await stream.write(header + bytes(data))
            else:
                await stream.write(header)
                # A stream's write takes any buffer (a memoryview of a 4 MiB tensor chunk goes
                # down without a copy), though ByteStream follows libp2p in saying bytes.
                await stream.write(cast(bytes, data))
        except _STREAM_FAILURES as exc:
            raise StreamEnded(f"stream failed while writing a frame: {exc!r}") from None
        return
    raise PeerTimeout(f"peer took {len(data)} bytes too slowly", phase="frame-write")


async def write_message(
    stream: ByteStream, msg: Message, *, idle_timeout: float = DEFAULT_IDLE_TIMEOUT
) -> None:
    """Encode `msg` and send it as one frame."""
    raw = encode(msg)
    await write_frame(stream, raw, max_size=type(msg).wire_max_size, idle_timeout=idle_timeout)


# As for `decode`: a tuple of expected types gives their union back, not their base class.
@overload
async def read_message(
    stream: ByteStream, expected: type[M] | tuple[type[M]], *, idle_timeout: float = ...
) -> M: ...
@overload
async def read_message(
    stream: ByteStream, expected: tuple[type[M], type[M2]], *, idle_timeout: float = ...
) -> M | M2: ...
@overload
async def read_message(
    stream: ByteStream, expected: tuple[type[M], type[M2], type[M3]], *, idle_timeout: float = ...
) -> M | M2 | M3: ...
@overload
async def read_message(
    stream: ByteStream,
    expected: tuple[type[M], type[M2], type[M3], type[M4]],
    *,
    idle_timeout: float = ...,
) -> M | M2 | M3 | M4: ...
@overload
async def read_message(
    stream: ByteStream, expected: tuple[type[M], ...], *, idle_timeout: float = ...
) -> M: ...
async def read_message(
    stream: ByteStream,
    expected: type[Message] | tuple[type[Message], ...],
    *,
    idle_timeout: float = DEFAULT_IDLE_TIMEOUT,
) -> Message:
    """Read one frame and decode it as one of the `expected` message types."""
    choices = expected if isinstance(expected, tuple) else (expected,)
    limit = max(cls.wire_max_size for cls in choices)
    raw = await read_frame(stream, max_size=limit, idle_timeout=idle_timeout)
    return decode(raw, expected)
