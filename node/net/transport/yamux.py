"""Yamux (`/yamux/1.0.0`) muxer built for bulk transfer, wire-compatible with libp2p's.

Where py-libp2p 0.8.1's Yamux loses its time (profiled with benchmarks/stream.py --profile):
- a writer whose send window is empty polls it every 10 ms (`trio.sleep(0.01)`), so a 256 KiB
  window caps a stream near 25 MB/s whenever the reader is not instantly fast, and it gives
  up after 5 s, resetting the stream of a reader that paused;
- every frame is at most 64 KiB, concatenated to its header, which the Noise layer then cuts
  into two messages (65 519 + 17 bytes), each its own socket write;
- the reader task reads every header and body with its own awaited exact read, takes a lock
  per frame, and copies each body into a bytearray.

Here the reader task (yamux_receive.py) takes everything the secure session has decrypted
(`read_chunks`) and parses all frames in it without awaiting; DATA bodies are handed to their
stream as pieces, not copied. Writers wait on a parking lot woken by WINDOW_UPDATE, send
frames of up to `max_frame` bytes with their header in one batched secure write, and carry
pending control frames (window updates, ACKs, RSTs, pong) along. A separate task flushes
control frames when no writer is busy, so a reading task never waits on the socket.

Bounds: a stream's receive window grows only while its reader keeps up, to `max_window`;
inbound streams beyond `max_streams` or an accept backlog beyond `accept_backlog` are reset;
queued control frames are capped. A peer that sends beyond the window we granted, or breaks
the framing, gets GO_AWAY(protocol error) and loses the connection.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import trio
from libp2p.abc import IMuxedConn, IMuxedStream, ISecureConn
from libp2p.io.exceptions import IOException
from libp2p.peer.id import ID
from libp2p.stream_muxer.exceptions import (
    MuxedConnUnavailable,
    MuxedStreamClosed,
    MuxedStreamError,
    MuxedStreamReset,
)
from multiaddr import Multiaddr

from .errors import YamuxProtocolError
from .noise_receive import SealedReader
from .yamux_receive import CLOSE_TIMEOUT, FrameReceiver
from .yamux_stream import Buffer, YamuxStream
from .yamux_wire import (
    DATA,
    FIN,
    GO_AWAY,
    GO_AWAY_NORMAL,
    MAX_STREAM_ID,
    PROTOCOL_ID,
    RST,
    SYN,
    WINDOW_UPDATE,
    YamuxConfig,
    header,
)  # fmt: skip

__all__ = ["PROTOCOL_ID", "YamuxConfig", "YamuxConnection", "YamuxStatistics"]

log = logging.getLogger(__name__)

MAX_QUEUED_CONTROL = 4096  # frames; a peer that makes us queue more is flooding us


@dataclass(frozen=True, slots=True, kw_only=True)
class YamuxStatistics:
    streams: int  # open on this connection (either direction, until both ends are done)
    queued_control: int  # frames waiting for the next write
    bytes_in_place: int  # DATA bytes decrypted straight into a reader's buffer, ever


class YamuxConnection(FrameReceiver, IMuxedConn):
    """A muxed connection; the upgrader builds it as `YamuxConnection(secured_conn, peer_id)`."""

    config = YamuxConfig()

    def __init__(
        self,
        secured_conn: ISecureConn,
        peer_id: ID,
        is_initiator: bool | None = None,
        on_close: Callable[[], Awaitable[Any]] | None = None,
    ) -> None:
        self.secured_conn = secured_conn
        self.peer_id = peer_id
        self.on_close = on_close
        self._initiator = secured_conn.is_initiator if is_initiator is None else is_initiator
        self._next_id = 1 if self._initiator else 2
        self._streams: dict[int, YamuxStream] = {}
        self._accept_send, self._accept_receive = trio.open_memory_channel[YamuxStream](
            self.config.accept_backlog
        )
        self.event_started = trio.Event()
        self.event_closed = trio.Event()
        self._nursery: trio.Nursery | None = None
        self._write_lock = trio.Lock()
        self._control: list[bytes] = []
        self._window_updates: dict[int, int] = {}
        self._pongs = 0
        self._control_ready = trio.Event()
        self._closing = False
        self._remote_go_away = False
        self._shut_down = False
        # frame parser state
        self._partial_header = bytearray()
        self._body_left = 0
        self._body_stream: YamuxStream | None = None
        self._body_flags = 0
        self._body_stream_id = 0
        batched = getattr(secured_conn, "write_parts", None)
        self._write_parts: Callable[[list[Buffer]], Awaitable[None]] = batched or self._write_joined
        self._read_chunks: Callable[[], Awaitable[list[Buffer]]] = (
            getattr(secured_conn, "read_chunks", None) or self._read_one
        )
        reader = getattr(secured_conn, "reader", None)
        self._sealed = reader if isinstance(reader, SealedReader) else None
        self._bytes_in_place = 0

    # ------------------------------------------------------------------ IMuxedConn

    @property
    def is_initiator(self) -> bool:
        return self._initiator

    @property
    def is_established(self) -> bool:
        return self.event_started.is_set() and not self._closing and not self._shut_down

    @property
    def is_closed(self) -> bool:
        return self.event_closed.is_set()

    async def start(self) -> None:
        """Serve the connection until it closes (the swarm runs this as a task)."""
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                nursery.start_soon(self._flush_loop)
                nursery.start_soon(self._read_loop)
                self.event_started.set()
        finally:
            if not self._shut_down:  # cancelled from outside (the host is stopping)
                self._mark_dead()
                with trio.CancelScope(shield=True), trio.move_on_after(CLOSE_TIMEOUT):
                    await self._close_secured()

    async def open_stream(self) -> IMuxedStream:
        if self._closing or self._shut_down or self._remote_go_away:
            raise MuxedStreamError("connection is closing; no new streams")
        if len(self._streams) >= self.config.max_streams:
            raise MuxedStreamError(
                f"{len(self._streams)} streams open on this connection, the limit"
            )
        if self._next_id > MAX_STREAM_ID:
            raise MuxedStreamError(
                "stream IDs of this connection are used up; open a new connection"
            )
        stream = YamuxStream(self, self._next_id, is_initiator=True)
        self._next_id += 2
        self._streams[stream.stream_id] = stream
        self._queue_control(header(WINDOW_UPDATE, SYN, stream.stream_id, 0))
        await trio.lowlevel.checkpoint()
        return stream

    async def accept_stream(self) -> IMuxedStream:
        try:
            return await self._accept_receive.receive()
        except (trio.EndOfChannel, trio.ClosedResourceError):
            raise MuxedConnUnavailable("connection closed") from None

    async def close(self, error_code: int = GO_AWAY_NORMAL) -> None:
        if self._closing or self._shut_down:
            return
        self._closing = True
        try:
            with trio.move_on_after(CLOSE_TIMEOUT):
                try:
                    self._control.append(header(GO_AWAY, 0, 0, error_code))
                    await self._flush()
                except (IOException, trio.BrokenResourceError, trio.ClosedResourceError):
                    pass
        finally:
            # even when the caller's scope cancels us mid-GoAway: a close that stops there
            # leaves the socket open, and the peer lists us as connected until it is collected
            await self._shutdown()

    def get_transport_addresses(self) -> list[Multiaddr]:
        return self.secured_conn.get_transport_addresses()

    def get_connection_type(self):  # type: ignore[no-untyped-def]
        return self.secured_conn.get_connection_type()

    def get_remote_address(self) -> tuple[str, int] | None:
        return self.secured_conn.get_remote_address()

    def statistics(self) -> YamuxStatistics:
        return YamuxStatistics(
            streams=len(self._streams),
            queued_control=len(self._control) + len(self._window_updates),
            bytes_in_place=self._bytes_in_place,
        )

    # ------------------------------------------------------------------ sending (used by streams)

    async def send_data(self, stream: YamuxStream, payload: memoryview) -> None:
        async with self._write_lock:
            if stream.local_fin:  # a close() that came first has its FIN queued: no data after it
                raise MuxedStreamClosed(f"stream {stream.stream_id} is closed for writing")
            if stream.reset_locally or stream.reset_by_peer or stream.connection_lost:
                raise MuxedStreamReset(f"stream {stream.stream_id} was reset")
            control = self._take_control()
            data = [header(DATA, 0, stream.stream_id, len(payload)), payload]
            try:
                await self._write_parts(control + data)
            except trio.Cancelled:  # write_parts is all or nothing: none of it went out
                self._control[:0] = control
                raise
            except (IOException, trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                raise MuxedStreamReset(f"stream {stream.stream_id}: {exc}") from exc

    async def send_fin(self, stream: YamuxStream) -> None:
        self._queue_control(header(WINDOW_UPDATE, FIN, stream.stream_id, 0))
        self._forget_if_done(stream)
        await self._flush_quietly()

    async def send_reset(self, stream: YamuxStream) -> None:
        self._queue_control(header(WINDOW_UPDATE, RST, stream.stream_id, 0))
        self._window_updates.pop(stream.stream_id, None)
        self._forget_if_done(stream)
        await self._flush_quietly()

    def queue_window_update(self, stream_id: int, delta: int) -> None:
        self._window_updates[stream_id] = self._window_updates.get(stream_id, 0) + delta
        self._control_ready.set()

    def _queue_control(self, frame: bytes, *, peer_caused: bool = False) -> None:
        if peer_caused and len(self._control) >= MAX_QUEUED_CONTROL:
            raise YamuxProtocolError(
                "too many control frames queued: the peer floods us or stopped reading"
            )
        self._control.append(frame)
        self._control_ready.set()

    def _take_control(self) -> list[bytes]:
        frames = list(self._control)
        self._control.clear()
        self._pongs = 0
        frames.extend(
            header(WINDOW_UPDATE, 0, sid, delta) for sid, delta in self._window_updates.items()
        )
        self._window_updates.clear()
        return frames

    async def _flush(self) -> None:
        async with self._write_lock:
            frames = self._take_control()
            if frames:
                try:
                    await self._write_parts(frames)
                except trio.Cancelled:  # none of it went out: keep it for the next write
                    self._control[:0] = frames
                    raise

    async def _flush_quietly(self) -> None:
        try:
            await self._flush()
        except (IOException, trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            log.debug("yamux %s: control frames not sent: %r", self.peer_id, exc)

    async def _flush_loop(self) -> None:
        while True:
            await self._control_ready.wait()
            self._control_ready = trio.Event()
            try:
                await self._flush()
            except (IOException, trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                log.debug("yamux %s: write failed, closing: %r", self.peer_id, exc)
                await self._shutdown()
                return

    async def _write_joined(self, parts: list[Buffer]) -> None:
        await self.secured_conn.write(b"".join(parts))

    def _forget_if_done(self, stream: YamuxStream) -> None:
        if stream.done and self._streams.get(stream.stream_id) is stream:
            del self._streams[stream.stream_id]

    # ------------------------------------------------------------------ teardown

    def _mark_dead(self) -> None:
        self._shut_down = True
        for stream in self._streams.values():
            stream.on_connection_lost()
        self._streams.clear()
        self._accept_send.close()
        self.event_closed.set()

    async def _close_secured(self) -> None:
        try:
            await self.secured_conn.close()
        except Exception as exc:  # noqa: BLE001 - closing a broken socket may fail in many
            # ways; it is closed either way
            log.debug("yamux %s: closing the secure connection: %r", self.peer_id, exc)

    async def _shutdown(self) -> None:
        if self._shut_down:
            return
        self._mark_dead()
        with trio.CancelScope(shield=True), trio.move_on_after(CLOSE_TIMEOUT):
            await self._close_secured()
        if self.on_close is not None:
            try:
                outcome = self.on_close()
                if inspect.isawaitable(outcome):
                    await outcome
            except Exception as exc:  # the swarm's callback: its bug must not keep us open
                log.warning(
                    "yamux %s: on_close callback failed: %r", self.peer_id, exc, exc_info=True
                )
        if self._nursery is not None:
            self._nursery.cancel_scope.cancel()
