"""Errors of our Noise and Yamux data path.

    PeertrainError
    └── NodeError
        └── TransportError         (also a libp2p IOException, so libp2p code treats it as I/O)
            ├── NoiseError         a Noise message failed to decrypt or was malformed
            └── YamuxProtocolError the peer broke the Yamux rules (window, framing, stream IDs)

Each of them ends the connection: after a bad tag or a window overrun nothing later on the
wire can be trusted. Stream-level outcomes (EOF, reset, closed) use libp2p's own
`MuxedStream*` exceptions, because `NetStream` translates exactly those for its callers.
"""

from __future__ import annotations

from libp2p.io.exceptions import IOException
from peertrain.node.errors import NodeError


class TransportError(NodeError, IOException):
    """The secure or muxed connection failed and was closed."""


class NoiseError(TransportError):
    """A Noise transport message was malformed or failed authentication."""


class YamuxProtocolError(TransportError):
    """The peer violated the Yamux protocol (e.g. sent beyond our receive window)."""
