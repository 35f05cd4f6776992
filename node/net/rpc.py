"""Request/response over libp2p streams: one stream per request, one message each way.

The one convention for a protocol that answers one request per stream: `serve_one` reads the
request with a size limit and an idle timeout, decoded at the edge into the declared types;
a peer that sends garbage is penalised (`BAD_MESSAGE_PENALTY`, when it is misbehaviour rather
than a slow or dropped link) and gets no answer; the handler's answer is sent back, and a
handler that fails on our own bug is answered `INTERNAL` and logged, so the node goes on.
`RpcServer` is `serve_one` behind `StreamSlots` (concurrency bounded per peer and in total, so a
flood of streams waits in line instead of growing memory) for a handler `(peer, request) ->
response`; `request` is the client side, with the same limits. Protocols that need more around
the exchange call `serve_one` themselves: the pipeline (node/runs/pipeline_transport.py: tensor
payloads read after the request and written after the reply, as an `Answer`'s `then`) and
dial-back (node/nat/dialback.py: one check per peer, refused when busy, the caller's IP).

Streams that are not one request and one response keep their own shape:
- tensors (node/services/tensors.py, protocol/tensor_transfer.py): one request, then a bulk
  stream paced against a deadline and a minimum rate; a slow reader loses its slot unpenalised;
- DHT channels (dht/channels.py): many requests on one long-lived stream, in the dht layer,
  which does not import node/ (its own bans and per-peer stream counts);
- the relay hop (node/nat/relays/hop.py): libp2p's circuit relay v2, upstream's protobuf
  handler, which we only pace and bound.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import NamedTuple

import trio
from libp2p.abc import IHost, INetStream
from libp2p.peer.id import ID
from peertrain.protocol.errors import ProtocolError, StreamEnded
from peertrain.protocol.framing import read_message, write_message
from peertrain.protocol.ids import ProtocolId
from peertrain.protocol.messages import ErrorCode, ErrorResponse, Request, Response, check_reply

from .penalties import PeerScoreboard, is_misbehaviour
from .stream_limits import StreamSlots
from .streams import close_quietly

log = logging.getLogger(__name__)

BAD_MESSAGE_PENALTY = 25.0


class RpcServer:
    """Serves `handler(peer, request) -> response` for one protocol, with limits."""

    def __init__(
        self,
        host: IHost,
        pid: ProtocolId,
        request_type: type[Request],
        handler: Callable[[ID, Request], Awaitable[Response]],
        *,
        scoreboard: PeerScoreboard,
        timeout: float = 10.0,
        max_total: int = 64,
        max_per_peer: int = 4,
    ):
        self.host, self.pid, self.request_type, self.handler = host, pid, request_type, handler
        self.scoreboard = scoreboard
        self.timeout = timeout
        self._slots = StreamSlots(scoreboard, max_total=max_total, max_per_peer=max_per_peer)

    def register(self) -> None:
        self.host.set_stream_handler(str(self.pid), self._on_stream)

    async def _on_stream(self, stream: INetStream) -> None:
        async with self._slots.admit(stream) as peer:
            if peer is not None:
                await self._answer(stream.muxed_conn.peer_id, stream)

    async def _answer(self, peer: ID, stream: INetStream) -> None:
        async def handle(request: Request) -> Response:
            return await self.handler(peer, request)

        with trio.move_on_after(self.timeout):
            await serve_one(
                stream,
                peer.to_base58(),
                self.request_type,
                handle,
                scoreboard=self.scoreboard,
                idle_timeout=self.timeout,
                label=str(self.pid),
            )


class Answer(NamedTuple):
    """A reply and what follows it on the stream (`then`: tensor payloads, say)."""

    reply: Response
    then: Callable[[], Awaitable[None]] | None = None


async def serve_one(
    stream: INetStream,
    peer: str,
    request_types: type[Request] | tuple[type[Request], ...],
    handle: Callable[[Request], Awaitable[Response | Answer]],
    *,
    scoreboard: PeerScoreboard | None,
    idle_timeout: float,
    label: str,
) -> None:
    """Read one request from `peer`, answer it with `handle`, send the answer: see the module
    docstring. The caller bounds the whole exchange and closes the stream."""
    try:
        request = await read_message(stream, request_types, idle_timeout=idle_timeout)
    except ProtocolError as exc:
        if scoreboard is not None and is_misbehaviour(exc):
            scoreboard.penalise(peer, BAD_MESSAGE_PENALTY, f"{label}: {exc}")
        log.debug("%s: unreadable request from %s: %s", label, peer, exc)
        return
    try:
        answer = await handle(request)
    except Exception:
        # our bug, but one that a remote request triggers: answering INTERNAL keeps the node
        # (and libp2p's swarm, which runs this handler) alive; the traceback is logged
        log.exception("%s: handler failed on a request from %s", label, peer)
        answer = refuse(request, ErrorCode.INTERNAL, "internal error")
    reply, then = answer if isinstance(answer, Answer) else (answer, None)
    try:
        await write_message(stream, reply, idle_timeout=idle_timeout)
        if then is not None:
            await then()
    except ProtocolError as exc:
        log.debug("%s: could not answer %s: %s", label, peer, exc)


async def request(
    host: IHost,
    peer: ID,
    pid: ProtocolId,
    message: Request,
    response_type: type[Response],
    *,
    timeout: float = 10.0,
) -> Response:
    """Send one request and return the matching response; ProtocolError / RemoteError otherwise."""
    with trio.fail_after(timeout):
        try:
            stream = await host.new_stream(peer, [str(pid)])
        except Exception as exc:  # noqa: BLE001 - libp2p's StreamFailure, SwarmException, …:
            # translated into one error for callers
            raise StreamEnded(f"could not open {pid} to {peer}: {exc}") from None
        try:
            await write_message(stream, message, idle_timeout=timeout)
            reply = await read_message(stream, (response_type, ErrorResponse), idle_timeout=timeout)
        finally:
            await close_quietly(stream)
    return check_reply(message, reply)


def refuse(req: Request, code: int = ErrorCode.BAD_REQUEST, reason: str = "") -> ErrorResponse:
    return req.reply(ErrorResponse, code=code, reason=reason[:256])
