"""The root of every peertrain error, and the protocol layer's branch of the tree.

    PeertrainError                 anything peertrain raises on purpose
    └── ProtocolError              bytes from the network were not acceptable
        ├── DecodeError            malformed, wrong type, inconsistent sizes
        ├── MessageTooLarge        a frame or message over its hard limit
        ├── VersionMismatch        the peer speaks an incompatible protocol version
        └── BadSignature           signature, signer or envelope target did not verify

Other layers hang their own branches under `PeertrainError` (e.g. `dht.errors.DHTError`).
`PeertrainError` lives here because `protocol/` is the bottom layer and imports nothing of ours.
"""

from __future__ import annotations


class PeertrainError(Exception):
    """Base class of every error peertrain raises deliberately."""


class ProtocolError(PeertrainError):
    """Bytes received from a peer were not acceptable. The sender is to blame."""


class DecodeError(ProtocolError):
    """Malformed bytes: truncated, wrong types, inconsistent sizes, bad values."""


class MessageTooLarge(ProtocolError):
    """A frame or message exceeded its hard size limit."""


class VersionMismatch(ProtocolError):
    """The peer speaks a protocol version we cannot talk to."""


class BadSignature(ProtocolError):
    """A signature, its signer, or the envelope's target (run, round) did not verify."""
