"""The root of every peertrain error, and the protocol layer's branch of the tree.

    PeertrainError                 anything peertrain raises on purpose
    └── ProtocolError              bytes from the network were not acceptable
        ├── DecodeError            malformed, wrong type, inconsistent sizes
        │   └── ChecksumMismatch   a tensor payload did not hash to its header's checksum
        ├── MessageTooLarge        a frame or message over its hard limit
        ├── VersionMismatch        the peer speaks an incompatible protocol version
        ├── BadSignature           signature, signer or envelope target did not verify
        ├── ReplayedEnvelope       a correctly signed envelope seen before
        ├── StreamEnded            the stream closed or was reset before the expected bytes came
        └── PeerTimeout            the peer did not send (or take) bytes in time; `phase` says when
    └── RemoteError                the peer understood a request and refused it (`code`, `reason`)

Other layers hang their own roots under `PeertrainError`: `dht.errors.DHTError`,
`crdt.errors.CRDTError`, `swarm.errors.SwarmError`, `node.errors.NodeError` (each errors.py draws
its branch). `PeertrainError` lives here because `protocol/` is the bottom layer and imports
nothing of ours. Every `ProtocolError` means "the remote peer is to blame": callers penalise the
peer and go on.

`Invalid` is not in the tree: schema.py's converters raise it for a field that does not match its
type, and messages.py turns it into `DecodeError` (their bytes) or `TypeError` (our own value)
before anything leaves this layer.
"""

from __future__ import annotations


class PeertrainError(Exception):
    """Base class of every error peertrain raises deliberately."""


class ProtocolError(PeertrainError):
    """Bytes received from a peer were not acceptable. The sender is to blame."""


class DecodeError(ProtocolError):
    """Malformed bytes: truncated, wrong types, inconsistent sizes, bad values."""


class ChecksumMismatch(DecodeError):
    """A payload's bytes did not hash to the checksum its header announced."""


class MessageTooLarge(ProtocolError):
    """A frame or message exceeded its hard size limit."""


class VersionMismatch(ProtocolError):
    """The peer speaks a protocol version we cannot talk to."""


class BadSignature(ProtocolError):
    """A signature, its signer, or the envelope's target (run, round) did not verify."""


class ReplayedEnvelope(ProtocolError):
    """A validly signed envelope arrived a second time (a replay, or a duplicate delivery)."""


class StreamEnded(ProtocolError):
    """The stream hit EOF, was reset, or failed in the middle of an exchange."""


class PeerTimeout(ProtocolError):
    """The peer was too slow; `phase` names what we were waiting for (e.g. "read-frame-header")."""

    def __init__(self, message: str, *, phase: str) -> None:
        super().__init__(message)
        self.phase = phase


class RemoteError(PeertrainError):
    """The peer answered a request with an error response. Not misbehaviour: no penalty."""

    def __init__(self, *, code: int, reason: str) -> None:
        super().__init__(f"peer refused the request (code {code}): {reason}")
        self.code = code
        self.reason = reason


class Invalid(Exception):
    """A value did not match its field's type; `path` says where (`"peers[3].addr"`)."""

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
