"""Request/response on long-lived libp2p streams, many requests in flight per stream.

Measured here: opening a libp2p stream (multistream-select) and sending one request costs
≈12 ms on loopback, while a request on an open stream costs ≈1 ms. A lookup talks to a handful
of peers it has mostly talked to before, so each node keeps one outbound stream per peer and
sends every request on it; answers come back tagged with the request ID and may arrive in any
order. The other direction uses the other peer's own outbound stream.

`Links` is the client side: it opens a stream on first use, runs one reader task per stream
(in the nursery given to `attach`), and fails every waiting request when the stream dies.
`Server` is the serving side: it answers the requests of one stream in order, synchronously
(handlers do bounded CPU work and never wait on the network), so a peer cannot make us hold
more than one request of its per stream, and it caps streams per peer and in total.
Between requests a stream may idle (`LINK_IDLE`); inside a frame, bytes must keep coming.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

import trio
from libp2p.abc import IHost, INetStream
from libp2p.custom_types import TProtocol
from libp2p.peer.id import ID
from peertrain.protocol.errors import PeerTimeout, ProtocolError, StreamEnded
from peertrain.protocol.framing import read_exactly, read_frame_length, write_message
from peertrain.protocol.ids import ProtocolId
from peertrain.protocol.messages import (
    ErrorResponse,
    Request,
    Response,
    check_reply,
    decode,
)

log = logging.getLogger(__name__)

LINK_IDLE = 600.0  # an unused stream is closed after this long
FRAME_IDLE = 10.0  # inside a frame, the peer must send something this often

BadPeer = Callable[[ID, ProtocolError], None]
R = TypeVar("R", bound=Response)


async def _read_frame(stream: INetStream, max_size: int) -> bytes:
    length = await read_frame_length(stream, max_size=max_size, idle_timeout=LINK_IDLE)
    return await read_exactly(stream, length, idle_timeout=FRAME_IDLE, phase="frame-body")


async def _close_quietly(stream: INetStream) -> None:
    with trio.CancelScope(shield=True):
        try:
            await stream.close()
        except Exception:  # noqa: BLE001 - the peer may already have reset it: nothing to do
            pass


class _Waiter:
    __slots__ = ("event", "reply", "error")

    def __init__(self) -> None:
        self.event = trio.Event()
        self.reply: Response | None = None
        self.error: ProtocolError | None = None


class _Link:
    def __init__(self, peer: ID, stream: INetStream) -> None:
        self.peer = peer
        self.stream = stream
        self.pending: dict[int, _Waiter] = {}
        self.write_lock = trio.Lock()
        self.closed = False


class Links:
    """Outbound streams to peers, one per peer, shared by every request to that peer."""

    def __init__(
        self,
        host: IHost,
        pid: ProtocolId,
        response_types: Sequence[type[Response]],
        *,
        on_bad_peer: BadPeer,
        connect: Callable[[ID, float], Awaitable[None]],  # (peer, patience): dialer.dial
        max_in_flight: int = 64,
    ) -> None:
        self.host = host
        self.connect = connect
        self.pid = pid
        self.response_types: tuple[type[Response], ...] = (*response_types, ErrorResponse)
        self.max_frame = max(t.wire_max_size for t in self.response_types)
        self.on_bad_peer = on_bad_peer
        self.max_in_flight = max_in_flight
        self._links: dict[ID, _Link] = {}
        self._opening: dict[ID, trio.Lock] = {}
        self._nursery: trio.Nursery | None = None

    def attach(self, nursery: trio.Nursery) -> None:
        """Reader tasks run in `nursery`; call before the first request."""
        self._nursery = nursery

    async def request(
        self,
        peer: ID,
        message: Request,
        expected: type[R],
        *,
        timeout: float,  # noqa: ASYNC109 - each request's own budget, apart from the caller's scope
    ) -> R:
        """Send `message` to `peer` and return its answer of type `expected`.

        Raises `ProtocolError` (the peer failed us), `RemoteError` (it refused), or
        `trio.TooSlowError`.
        """
        # Connecting gets the same budget once the dial holds a slot (dialer.py): a lookup does
        # not wait on an address that drops packets silently (a NAT's LAN side) longer than on
        # a peer that does not answer, nor gives up on a dial queued on a busy CPU. Giving up
        # leaves the dial running: a later request finds it done.
        link = await self._link(peer, timeout)
        with trio.fail_after(timeout):
            if len(link.pending) >= self.max_in_flight:
                raise StreamEnded(f"{self.max_in_flight} requests already in flight to {peer}")
            waiter = _Waiter()
            link.pending[message.request_id] = waiter
            try:
                async with link.write_lock:
                    # Never abandon a frame half-written: the stream would be garbage after it.
                    # The write has its own timeout inside write_message.
                    with trio.CancelScope(shield=True):
                        await write_message(link.stream, message, idle_timeout=FRAME_IDLE)
                await waiter.event.wait()
            finally:
                link.pending.pop(message.request_id, None)
        if waiter.error is not None:
            raise waiter.error
        assert waiter.reply is not None  # the event is set after a reply or an error
        reply = check_reply(message, waiter.reply)
        if not isinstance(reply, expected):
            error = ProtocolError(f"answered {type(message).__name__} with {type(reply).__name__}")
            self.on_bad_peer(peer, error)
            raise error
        return reply

    async def _link(self, peer: ID, patience: float) -> _Link:
        link = self._links.get(peer)
        if link is not None and not link.closed:
            return link
        lock = self._opening.setdefault(peer, trio.Lock())
        try:
            async with lock:
                link = self._links.get(peer)
                if link is not None and not link.closed:
                    return link
                try:
                    if not self.host.get_network().get_connections(peer):
                        await self.connect(peer, patience)
                    with trio.fail_after(patience):
                        stream = await self.host.new_stream(peer, [TProtocol(str(self.pid))])
                except trio.Cancelled:
                    raise
                except Exception as exc:  # noqa: BLE001 - dial or negotiation failed (py-libp2p raises many types): translated
                    raise StreamEnded(f"could not open a DHT stream to {peer}: {exc}") from None
                link = self._links[peer] = _Link(peer, stream)
                assert self._nursery is not None, "Links.attach() was not called"
                self._nursery.start_soon(self._read_answers, link)
                return link
        finally:
            if not lock.statistics().tasks_waiting and not lock.locked():
                self._opening.pop(peer, None)

    async def _read_answers(self, link: _Link) -> None:
        failure: ProtocolError = StreamEnded(f"DHT stream to {link.peer} closed")
        try:
            while True:
                raw = await _read_frame(link.stream, self.max_frame)
                reply = decode(raw, self.response_types)
                waiter = link.pending.get(reply.request_id)
                if waiter is not None:  # else: an answer to a request that timed out
                    waiter.reply = reply
                    waiter.event.set()
        except ProtocolError as exc:
            failure = exc
            if not isinstance(exc, StreamEnded) and link.pending:
                self.on_bad_peer(link.peer, exc)
        finally:
            self._forget(link, failure)
            await _close_quietly(link.stream)

    def _forget(self, link: _Link, failure: ProtocolError) -> None:
        link.closed = True
        if self._links.get(link.peer) is link:
            del self._links[link.peer]
        for waiter in link.pending.values():
            waiter.error = failure
            waiter.event.set()

    async def close_peer(self, peer: ID) -> None:
        link = self._links.get(peer)
        if link is not None:
            self._forget(link, StreamEnded(f"disconnected from {peer}"))
            await _close_quietly(link.stream)

    def __len__(self) -> int:
        return len(self._links)


class Server:
    """Serves `handler(peer, request) -> response` on every inbound stream of one protocol."""

    def __init__(
        self,
        host: IHost,
        pid: ProtocolId,
        request_types: Sequence[type[Request]],
        handler: Callable[[ID, Request], Response],
        *,
        on_bad_peer: BadPeer,
        is_banned: Callable[[str], bool] = lambda _peer: False,
        max_streams_per_peer: int = 4,
        max_streams: int = 1024,
    ) -> None:
        self.host, self.pid, self.handler = host, pid, handler
        self.request_types = tuple(request_types)
        self.max_frame = max(t.wire_max_size for t in self.request_types)
        self.on_bad_peer = on_bad_peer
        self.is_banned = is_banned
        self.max_streams_per_peer = max_streams_per_peer
        self.max_streams = max_streams
        self._streams: defaultdict[ID, int] = defaultdict(int)
        self._total = 0
        self.serving = False

    def register(self) -> None:
        self.serving = True
        self.host.set_stream_handler(TProtocol(str(self.pid)), self._on_stream)

    def unregister(self) -> None:
        """Refuse new streams, and end open ones at their next request (unanswered)."""
        self.serving = False
        self.host.remove_stream_handler(TProtocol(str(self.pid)))

    async def _on_stream(self, stream: INetStream) -> None:
        peer = stream.muxed_conn.peer_id
        if (
            self.is_banned(peer.to_base58())
            or self._streams[peer] >= self.max_streams_per_peer
            or self._total >= self.max_streams
        ):
            if not self._streams[peer]:
                del self._streams[peer]
            await stream.reset()
            return
        self._streams[peer] += 1
        self._total += 1
        try:
            await self._serve(peer, stream)
        finally:
            self._total -= 1
            self._streams[peer] -= 1
            if not self._streams[peer]:
                del self._streams[peer]
            await _close_quietly(stream)

    async def _serve(self, peer: ID, stream: INetStream) -> None:
        while True:
            try:
                raw = await _read_frame(stream, self.max_frame)
                request = decode(raw, self.request_types)
            except StreamEnded:
                return
            except PeerTimeout as exc:
                if exc.phase != "frame-header":  # idling between requests is allowed
                    self.on_bad_peer(peer, exc)
                return
            except ProtocolError as exc:  # undecodable or oversized
                self.on_bad_peer(peer, exc)
                return
            if not self.serving:  # unregistered while this stream was open
                return
            response = self.handler(peer, request)
            try:
                with trio.CancelScope(shield=True):
                    await write_message(stream, response, idle_timeout=FRAME_IDLE)
            except ProtocolError as exc:
                log.debug("%s: could not answer %s: %s", self.pid, peer, exc)
                return
