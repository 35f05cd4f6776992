"""Make the host build the muxer class registered for a protocol ID.

py-libp2p 0.8.1's `MuxerMultistream.new_conn` hard-codes its own `Yamux` class for
`/yamux/1.0.0`, whatever class `muxer_opt` registered for that ID. `RegisteredMuxers`
negotiates exactly as upstream does and then constructs the registered class; installing it on
a host's upgrader is how our Yamux replaces libp2p's under the same protocol ID.
"""

from __future__ import annotations

from libp2p.abc import IHost, IMuxedConn, ISecureConn
from libp2p.custom_types import TMuxerOptions
from libp2p.peer.id import ID
from libp2p.stream_muxer.muxer_multistream import MuxerMultistream


class RegisteredMuxers(MuxerMultistream):
    async def new_conn(self, conn: ISecureConn, peer_id: ID) -> IMuxedConn:
        protocol, muxer_class = await self._selector.select(
            conn, conn.is_initiator, self.negotiate_timeout
        )
        return self._annotate_connection(muxer_class(conn, peer_id), conn, protocol)


def use_registered_muxers(host: IHost, muxer_opt: TMuxerOptions) -> None:
    """Replace the host's muxer negotiation with one that honours `muxer_opt` (same order)."""
    upgrader = host.get_network().upgrader  # type: ignore[attr-defined]
    upgrader.muxer_multistream = RegisteredMuxers(
        muxer_opt, upgrader.muxer_multistream.negotiate_timeout
    )
