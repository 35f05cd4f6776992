"""One shield in front of every inbound stream: a peer's bytes can cost the peer, never the node.

py-libp2p 0.8.1 runs each inbound stream's handler inside the connection's nursery, and an
exception there cancels the host's whole service tree (docs/libp2p-notes.md): one malformed
gossipsub frame (protobuf's DecodeError out of `continuously_read_stream`) ended the daemon.
Upstream handlers (identify, ping, relay, DCUtR, meshsub) are not ours to patch one by one, but
all of them are reached through one function, the swarm's common stream handler; wrapping it
shields them all, and ours too. A banned peer's streams are reset before multistream-select.

Blame: an error that only bytes from the peer can cause (a protobuf or libp2p parse error, our
own ProtocolError) penalises the peer that opened the stream. Anything else is our bug or the
connection going away: logged with its traceback, nobody penalised, the stream reset.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TypedDict

from libp2p.abc import IHost, INetStream
from libp2p.exceptions import ParseError
from peertrain.protocol.errors import ProtocolError

from .streams import reset_quietly

log = logging.getLogger(__name__)

MALFORMED_STREAM_PENALTY = 25.0

StreamHandler = Callable[[INetStream], Awaitable[None]]


class ShieldStatistics(TypedDict):
    refused_banned: int  # streams of banned peers, reset before negotiation
    peer_faults: int  # malformed input: the peer was penalised
    handler_bugs: int  # our own handlers' failures, logged with their traceback


def is_peer_fault(exc: BaseException) -> bool:
    """True for errors that only a peer's malformed bytes cause."""
    from google.protobuf.message import DecodeError as ProtobufDecodeError

    return isinstance(exc, ProtobufDecodeError | ParseError | ProtocolError | UnicodeDecodeError)


class InboundShield:
    """Wraps a host's common stream handler. `install()` once, after the host is built."""

    def __init__(
        self,
        host: IHost,
        *,
        is_banned: Callable[[str], bool],
        penalise: Callable[[str, float, str], object],
    ) -> None:
        self.host = host
        self._is_banned = is_banned
        self._penalise = penalise
        self.refused_banned = 0
        self.peer_faults = 0
        self.handler_bugs = 0

    def install(self) -> None:
        network = self.host.get_network()
        inner: StreamHandler = network.common_stream_handler  # type: ignore[attr-defined]
        network.set_stream_handler(self._shielded(inner))

    def _shielded(self, inner: StreamHandler) -> StreamHandler:
        async def handle(stream: INetStream) -> None:
            peer = stream.muxed_conn.peer_id.to_base58()
            if self._is_banned(peer):
                self.refused_banned += 1
                await reset_quietly(stream)
                return
            try:
                await inner(stream)
            except Exception as exc:  # noqa: BLE001 - the shield's whole job: nothing escapes
                self._blame(peer, stream, exc)
                await reset_quietly(stream)

        return handle

    def _blame(self, peer: str, stream: INetStream, exc: BaseException) -> None:
        protocol = _protocol_of(stream)
        leaf = _leaf(exc)
        if is_peer_fault(leaf):
            self.peer_faults += 1
            self._penalise(peer, MALFORMED_STREAM_PENALTY, f"malformed {protocol} stream: {leaf!r}")
        else:
            self.handler_bugs += 1
            log.warning("handler for %s from %s failed; stream reset", protocol, peer, exc_info=exc)

    def statistics(self) -> ShieldStatistics:
        return ShieldStatistics(
            refused_banned=self.refused_banned,
            peer_faults=self.peer_faults,
            handler_bugs=self.handler_bugs,
        )


def _leaf(exc: BaseException) -> BaseException:
    """The one real error inside nested exception groups (trio nurseries wrap handler errors)."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


def _protocol_of(stream: INetStream) -> str:
    try:
        return str(stream.get_protocol())
    except Exception:  # noqa: BLE001 - before negotiation a stream has no protocol to name
        return "(unnegotiated)"
