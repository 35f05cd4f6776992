"""One Yamux stream: a receive buffer of decrypted pieces, two flow-control windows, half-close.

Receiving: a reader waiting in `readinto` lends the stream its buffer, and the connection's
reader decrypts DATA bodies straight into it; otherwise it appends pieces (whole Noise
plaintexts when the peer is one of us, so usually no copy) and wakes the reader. `read(n)` hands
back up to `n` bytes, joining pieces only when it must. Consumed bytes are credited back to the
peer with a WINDOW_UPDATE once half the window is used; when the reader has drained everything
at that moment, the window (not the reader) is what limits the stream, so the window doubles, up
to `YamuxConfig.max_window`. A stream that is read slowly never grows its window, which bounds
what a peer can make us buffer.

Sending: a write waits for send window (without a time limit: a reader that pauses for
minutes does not kill the stream, unlike py-libp2p's 5 s), then goes out as frames of at most
`YamuxConfig.max_frame` bytes.

Outcomes use libp2p's exceptions, which `NetStream` translates: `MuxedStreamEOF` after the
peer's FIN and the buffer is drained, `MuxedStreamReset` after a reset (either side) or when
the connection died before FIN, `MuxedStreamClosed` for writes after our own close.
"""

from __future__ import annotations

from collections import deque
from types import TracebackType
from typing import TYPE_CHECKING, Protocol

import trio
from libp2p.abc import IMuxedStream
from libp2p.stream_muxer.exceptions import MuxedStreamClosed, MuxedStreamEOF, MuxedStreamReset

from .yamux_wire import INITIAL_WINDOW

if TYPE_CHECKING:
    from .yamux_wire import YamuxConfig

Buffer = bytes | bytearray | memoryview


class StreamOwner(Protocol):
    """What a stream asks of its connection (yamux.py's `YamuxConnection`)."""

    config: YamuxConfig

    def queue_window_update(self, stream_id: int, delta: int) -> None: ...

    async def send_data(self, stream: YamuxStream, payload: memoryview) -> None: ...

    async def send_fin(self, stream: YamuxStream) -> None: ...

    async def send_reset(self, stream: YamuxStream) -> None: ...

    def get_remote_address(self) -> tuple[str, int] | None: ...


class YamuxStream(IMuxedStream):
    def __init__(self, conn: StreamOwner, stream_id: int, *, is_initiator: bool) -> None:
        self.muxed_conn = conn
        self.stream_id = stream_id
        self.is_initiator = is_initiator
        self._conn = conn
        # receiving
        self._pieces: deque[Buffer] = deque()
        self._buffered = 0
        self._recv_window = INITIAL_WINDOW  # bytes the peer may still send
        self._window_size = (
            INITIAL_WINDOW  # what we grant per round; grows while the reader starves
        )
        self._unacked = 0  # consumed, not yet credited back
        self._target: memoryview | None = None  # a waiting readinto's buffer, filled directly
        self._placed = 0  # bytes of it filled
        self._readable = trio.lowlevel.ParkingLot()
        # sending
        self._send_window = INITIAL_WINDOW
        self._writable = trio.lowlevel.ParkingLot()
        self._write_lock = trio.Lock()
        # state
        self.remote_fin = False
        self.local_fin = False
        self.reset_by_peer = False
        self.reset_locally = False
        self.connection_lost = False

    # ------------------------------------------------------------------ reading

    async def read(self, n: int | None = -1) -> bytes:
        """Up to `n` bytes (everything buffered when n is None or negative), waiting for some."""
        if n == 0:
            return b""
        while not self._buffered:
            self._raise_if_unreadable()
            await self._readable.park()
        data = self._take(self._buffered if n is None or n < 0 else min(n, self._buffered))
        self._credit(len(data))
        return data

    async def readinto(self, buffer: memoryview | bytearray) -> int:
        """Fill a prefix of `buffer` with what is buffered (waiting for some); return its length.

        No copy when nothing is buffered yet: the buffer waits with the stream and our Noise
        session decrypts this stream's DATA bodies straight into it (`destination`). Otherwise
        the buffered pieces are copied in, one copy fewer than `read()`. Ends like `read()`:
        `MuxedStreamEOF` after the peer's FIN once everything is read, `MuxedStreamReset` after
        a reset. Bytes past the returned length are unspecified (a message that failed
        authentication may have been decrypted there before the connection was closed).
        """
        target = memoryview(buffer)
        if target.format != "B" or target.ndim != 1:
            target = target.cast("B")
        if not len(target):
            return 0
        if not self._buffered and (placed := await self._receive_into(target)):
            self._credit(placed)
            return placed
        pieces, filled, limit = self._pieces, 0, min(len(target), self._buffered)
        while filled < limit:
            piece = pieces.popleft()
            size = min(len(piece), limit - filled)
            if size < len(piece):
                view = memoryview(piece)
                pieces.appendleft(view[size:])
                piece = view[:size]
            target[filled : filled + size] = piece
            filled += size
        self._buffered -= filled
        self._credit(filled)
        return filled

    async def _receive_into(self, target: memoryview) -> int:
        """Wait with `target` posted until bytes are placed in it (their count) or buffered (0)."""
        if self._target is not None:  # a second reader would take the first one's bytes
            raise trio.BusyResourceError(f"another task is reading stream {self.stream_id}")
        self._target, self._placed = target, 0
        try:
            while not self._placed and not self._buffered:
                self._raise_if_unreadable()
                await self._readable.park()
        except BaseException:
            if self._placed:  # placed, but this call cannot report them: keep them, in order
                self._pieces.appendleft(bytes(target[: self._placed]))
                self._buffered += self._placed
            raise
        finally:
            placed, self._target, self._placed = self._placed, None, 0
        return placed

    def _raise_if_unreadable(self) -> None:
        if self.reset_by_peer or self.reset_locally:
            raise MuxedStreamReset(f"stream {self.stream_id} was reset")
        if self.remote_fin:
            raise MuxedStreamEOF(f"stream {self.stream_id} ended")
        if self.connection_lost:
            raise MuxedStreamReset(
                f"connection of stream {self.stream_id} closed before the stream ended"
            )

    def _take(self, limit: int) -> bytes:
        """`limit` bytes off the front, joined into one object when they span pieces.

        Handing out one 64 KiB piece per call would save this copy but cost a trip through
        trio's scheduler per piece (NetStream.read takes a lock): measured, it halved a bulk
        transfer. `readinto` is the copy-free way.
        """
        pieces = self._pieces
        first = pieces[0]
        self._buffered -= limit
        if len(first) == limit:
            pieces.popleft()
            return first if isinstance(first, bytes) else bytes(first)
        if len(first) > limit:
            view = memoryview(first)
            pieces[0] = view[limit:]
            return bytes(view[:limit])
        parts, got = [], 0
        while got < limit:
            piece = pieces[0]
            if got + len(piece) <= limit:
                parts.append(pieces.popleft())
                got += len(piece)
            else:
                view = memoryview(piece)
                parts.append(view[: limit - got])
                pieces[0] = view[limit - got :]
                got = limit
        return b"".join(parts)

    def _credit(self, consumed: int) -> None:
        self._unacked += consumed
        if self._unacked < self._window_size // 2 or self.remote_fin or self.reset_by_peer:
            return
        if not self._buffered and self._window_size < self._conn.config.max_window:
            grow = min(self._window_size, self._conn.config.max_window - self._window_size)
            self._window_size += grow
            self._unacked += grow
        delta, self._unacked = self._unacked, 0
        self._recv_window += delta
        self._conn.queue_window_update(self.stream_id, delta)

    # called by the connection's reader (synchronously)

    def deliver(self, piece: Buffer) -> None:
        # readers park only while nothing is buffered or placed: wake them on the first byte
        # only (waking per piece cost ~8% of a bulk receiver's CPU, profiled)
        if not self._buffered and not self._placed:
            self._readable.unpark_all()
        self._pieces.append(piece)
        self._buffered += len(piece)

    def destination(self, size: int) -> memoryview | None:
        """The next `size` bytes of a waiting `readinto`'s buffer, if they fit and nothing is
        buffered ahead of them."""
        target = self._target
        if target is None or self._pieces or len(target) - self._placed < size:
            return None
        return target[self._placed : self._placed + size]

    def placed(self, size: int) -> None:
        """`size` bytes were decrypted into `destination(size)`."""
        if not self._placed and not self._buffered:  # see deliver()
            self._readable.unpark_all()
        self._placed += size

    def reserve_receive(self, length: int) -> bool:
        """Account for a DATA frame of `length`; False if it exceeds what we granted."""
        if length > self._recv_window:
            return False
        self._recv_window -= length
        return True

    def add_send_window(self, increment: int) -> None:
        self._send_window += increment
        self._writable.unpark_all()

    def on_remote_fin(self) -> None:
        self.remote_fin = True
        self._readable.unpark_all()

    def on_remote_reset(self) -> None:
        self.reset_by_peer = True
        self._pieces.clear()
        self._buffered = 0
        self._wake_all()

    def on_connection_lost(self) -> None:
        self.connection_lost = True
        self._wake_all()

    def _wake_all(self) -> None:
        self._readable.unpark_all()
        self._writable.unpark_all()

    # ------------------------------------------------------------------ writing

    async def write(self, data: Buffer) -> None:
        view = memoryview(data)
        if view.format != "B" or view.ndim != 1:
            view = view.cast("B")
        total, sent = len(view), 0
        async with self._write_lock:  # one write's frames are not interleaved with another's
            while sent < total:
                self._raise_if_unwritable()
                if not self._send_window:
                    await self._writable.park()
                    continue
                size = min(self._send_window, total - sent, self._conn.config.max_frame)
                self._send_window -= size
                try:
                    await self._conn.send_data(self, view[sent : sent + size])
                except BaseException:
                    self._send_window += size  # not sent (send_data is all or nothing)
                    raise
                sent += size

    def _raise_if_unwritable(self) -> None:
        if self.reset_by_peer or self.reset_locally:
            raise MuxedStreamReset(f"stream {self.stream_id} was reset")
        if self.local_fin:
            raise MuxedStreamClosed(f"stream {self.stream_id} is closed for writing")
        if self.connection_lost:
            raise MuxedStreamReset(f"connection of stream {self.stream_id} is closed")

    # ------------------------------------------------------------------ closing

    async def close(self) -> None:
        """Half-close: send FIN; reading stays possible until the peer's FIN."""
        if self.local_fin or self.reset_by_peer or self.reset_locally or self.connection_lost:
            return
        self.local_fin = True
        self._writable.unpark_all()
        await self._conn.send_fin(self)

    async def close_write(self) -> None:
        await self.close()

    async def reset(self) -> None:
        if self.reset_by_peer or self.reset_locally or self.connection_lost:
            return
        self.reset_locally = True
        self._pieces.clear()
        self._buffered = 0
        self._wake_all()
        await self._conn.send_reset(self)

    @property
    def done(self) -> bool:
        """Nothing more can happen on the wire for this stream."""
        return (
            self.reset_by_peer
            or self.reset_locally
            or self.connection_lost
            or (self.local_fin and self.remote_fin)
        )

    def set_deadline(self, ttl: int) -> None:
        raise NotImplementedError("Yamux streams have no deadlines; use a trio cancel scope")

    def get_remote_address(self) -> tuple[str, int] | None:
        return self._conn.get_remote_address()

    async def __aenter__(self) -> YamuxStream:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()
