"""The receiving side of a Yamux connection: one reader task parses every frame it is given.

The reader parses without awaiting. Over our own Noise session it pulls the sealed messages
itself and decrypts one that holds only DATA body bytes of a stream whose reader waits in
`readinto` straight into that reader's buffer; otherwise DATA bodies are handed to their stream
as pieces of the decrypted plaintext, not copied. A peer that sends beyond the window we
granted, opens a stream of our parity, or breaks the framing raises YamuxProtocolError: it gets
GO_AWAY(protocol error) and loses the connection. Kept apart from yamux.py (the connection, its
sending side and teardown) so each reads alone; `YamuxConnection` inherits this as a mixin,
since both sides share the stream table."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import trio
from libp2p.io.exceptions import IOException
from libp2p.peer.id import ID

from .errors import NoiseError, YamuxProtocolError
from .noise_receive import SealedReader
from .yamux_stream import Buffer, YamuxStream
from .yamux_wire import (
    ACK,
    DATA,
    FIN,
    GO_AWAY,
    GO_AWAY_PROTOCOL_ERROR,
    HEADER,
    PING,
    RST,
    SYN,
    VERSION,
    WINDOW_UPDATE,
    header,
)  # fmt: skip

if TYPE_CHECKING:
    from .yamux_wire import YamuxConfig

log = logging.getLogger(__name__)

CLOSE_TIMEOUT = 2.0
MAX_QUEUED_PONGS = 64


class FrameReceiver:
    """Reader task and frame parser of `YamuxConnection` (which sets up every attribute)."""

    config: YamuxConfig
    peer_id: ID
    secured_conn: object
    _streams: dict[int, YamuxStream]
    _accept_send: trio.MemorySendChannel[YamuxStream]
    _initiator: bool
    _closing: bool
    _shut_down: bool
    _remote_go_away: bool
    _pongs: int
    _control: list[bytes]
    _read_chunks: Callable[[], Awaitable[list[Buffer]]]
    _sealed: SealedReader | None  # our Noise session's reader, pulled message by message
    _bytes_in_place: int
    # parser state: a header split across chunks, and the body of the current DATA frame
    _partial_header: bytearray
    _body_left: int
    _body_stream: YamuxStream | None
    _body_flags: int
    _body_stream_id: int

    # the sending side and teardown, in YamuxConnection
    _queue_control: Callable[..., None]
    _forget_if_done: Callable[[YamuxStream], None]
    _flush_quietly: Callable[[], Awaitable[None]]
    _shutdown: Callable[[], Awaitable[None]]

    async def _read_one(self) -> list[Buffer]:
        data = await self.secured_conn.read(None)  # type: ignore[attr-defined]
        return [data] if data else []

    async def _read_loop(self) -> None:
        try:
            if self._sealed is not None:
                await self._pull_messages(self._sealed)
            else:
                while chunks := await self._read_chunks():
                    for chunk in chunks:
                        self._feed(chunk)
        except YamuxProtocolError as exc:
            log.warning("yamux %s: %s; closing the connection", self.peer_id, exc)
            with trio.move_on_after(CLOSE_TIMEOUT):
                self._control.append(header(GO_AWAY, 0, 0, GO_AWAY_PROTOCOL_ERROR))
                await self._flush_quietly()
        except NoiseError as exc:
            log.warning("yamux %s: %s; closing the connection", self.peer_id, exc)
        except (
            IOException,
            OSError,
            trio.BrokenResourceError,
            trio.ClosedResourceError,
            EOFError,
        ) as exc:
            log.debug("yamux %s: connection ended: %r", self.peer_id, exc)
        await self._shutdown()

    async def _pull_messages(self, sealed: SealedReader) -> None:
        """Our Noise session: a message that holds only DATA body bytes of a stream whose reader
        waits in `readinto` is decrypted straight into that reader's buffer; the rest is parsed
        from decrypted copies, as for any other secure connection."""
        for chunk in self.secured_conn.take_pending():  # type: ignore[attr-defined]
            self._feed(chunk)
        while await sealed.receive():
            while (size := sealed.next_size()) is not None:
                target = self._placement(size)
                if target is None:
                    if plain := sealed.open(size):
                        self._feed(plain)
                    continue
                sealed.open(size, target)
                self._bytes_in_place += size
                self._body_left -= size
                self._body_stream.placed(size)  # type: ignore[union-attr]
                if not self._body_left:
                    self._apply_flags(self._body_stream_id, self._body_flags)

    def _placement(self, size: int) -> memoryview | None:
        """Where the next `size` plaintext bytes go when they are all body of a waiting reader."""
        if not size or self._body_left < size or self._body_stream is None:
            return None
        return self._body_stream.destination(size)

    def _feed(self, chunk: Buffer) -> None:
        """Parse every frame (or part of one) in `chunk`; never awaits."""
        size, pos = len(chunk), 0
        while pos < size:
            if self._body_left:
                take = min(self._body_left, size - pos)
                stream = self._body_stream
                if stream is not None:
                    stream.deliver(chunk if take == size else memoryview(chunk)[pos : pos + take])
                pos += take
                self._body_left -= take
                if not self._body_left:
                    self._apply_flags(self._body_stream_id, self._body_flags)
                continue
            if self._partial_header or size - pos < HEADER.size:
                need = HEADER.size - len(self._partial_header)
                self._partial_header += chunk[pos : pos + need]
                pos += min(need, size - pos)
                if len(self._partial_header) < HEADER.size:
                    return
                fields = HEADER.unpack(self._partial_header)
                self._partial_header.clear()
            else:
                fields = HEADER.unpack_from(chunk, pos)
                pos += HEADER.size
            self._on_frame(*fields)

    def _on_frame(
        self, version: int, frame_type: int, flags: int, stream_id: int, length: int
    ) -> None:
        if version != VERSION:
            raise YamuxProtocolError(f"unknown Yamux version {version}")
        if frame_type == DATA or frame_type == WINDOW_UPDATE:
            stream = self._accept_syn(stream_id) if flags & SYN else self._streams.get(stream_id)
            if frame_type == WINDOW_UPDATE:
                if stream is not None and length:
                    stream.add_send_window(length)
                self._apply_flags(stream_id, flags)
                return
            if stream is not None:
                if not stream.reserve_receive(length):
                    raise YamuxProtocolError(
                        f"stream {stream_id} sent a {length}-byte frame beyond its window"
                    )
                if stream.remote_fin or stream.reset_locally:
                    stream = None  # nothing may arrive after FIN; a reset stream discards
            if length:
                self._body_left, self._body_stream = length, stream
                self._body_stream_id, self._body_flags = stream_id, flags
            else:
                self._apply_flags(stream_id, flags)
        elif frame_type == PING:
            if flags & SYN and self._pongs < MAX_QUEUED_PONGS:
                self._pongs += 1
                self._queue_control(header(PING, ACK, 0, length), peer_caused=True)
        elif frame_type == GO_AWAY:
            self._remote_go_away = True
            log.debug("yamux %s: peer is going away (code %d)", self.peer_id, length)
        else:
            raise YamuxProtocolError(f"unknown Yamux frame type {frame_type}")

    def _apply_flags(self, stream_id: int, flags: int) -> None:
        if not flags & (FIN | RST):
            return
        stream = self._streams.get(stream_id)
        if stream is None:
            return
        if flags & RST:
            stream.on_remote_reset()
        elif flags & FIN:
            stream.on_remote_fin()
        self._forget_if_done(stream)

    def _accept_syn(self, stream_id: int) -> YamuxStream | None:
        if stream_id == 0 or stream_id % 2 == (1 if self._initiator else 0):
            raise YamuxProtocolError(f"peer opened stream {stream_id}, an ID of our parity")
        if stream_id in self._streams:
            raise YamuxProtocolError(f"peer opened stream {stream_id} twice")
        refuse = self._closing or self._shut_down or len(self._streams) >= self.config.max_streams
        stream = YamuxStream(self, stream_id, is_initiator=False)
        if not refuse:
            try:
                self._accept_send.send_nowait(stream)
            except trio.WouldBlock:
                refuse = True
        if refuse:
            log.debug("yamux %s: refusing stream %d (limits or closing)", self.peer_id, stream_id)
            self._queue_control(header(WINDOW_UPDATE, RST, stream_id, 0), peer_caused=True)
            return None
        self._streams[stream_id] = stream
        self._queue_control(header(WINDOW_UPDATE, ACK, stream_id, 0), peer_caused=True)
        return stream
