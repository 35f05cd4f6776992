"""Request/response over libp2p streams: one stream per request, one message each way.

`serve` registers a handler class for a protocol ID: every inbound stream is read with a size
limit and a timeout, decoded at the edge into the declared request type, answered, and closed.
A peer that sends garbage gets an `ErrorResponse` when possible and a penalty always; the node
goes on. Concurrency is bounded per peer and in total, so a flood of streams waits in line
instead of growing memory. `request` is the client side, with the same limits.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

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
        with trio.move_on_after(self.timeout):
            try:
                request = await read_message(stream, self.request_type, idle_timeout=self.timeout)
            except ProtocolError as exc:
                if is_misbehaviour(exc):
                    self.scoreboard.penalise(
                        peer.to_base58(), BAD_MESSAGE_PENALTY, f"{self.pid}: {exc}"
                    )
                return
            try:
                response = await self.handler(peer, request)
            except Exception:
                # our bug, but one that a remote request triggers: answering INTERNAL keeps the
                # node (and libp2p's swarm, which runs this handler) alive; the traceback is logged
                log.exception("%s: handler failed on a request from %s", self.pid, peer)
                response = refuse(request, ErrorCode.INTERNAL, "internal error")
            try:
                await write_message(stream, response, idle_timeout=self.timeout)
            except ProtocolError as exc:
                log.debug("%s: could not answer %s: %s", self.pid, peer, exc)


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
