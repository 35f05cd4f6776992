"""The DHT's branch of the error tree.

    PeertrainError
    ├── ProtocolError                      (protocol/errors.py: the remote peer is to blame)
    │   └── RecordRejected                 a record failed validation; `reason` says which rule
    └── DHTError                           the DHT could not do what was asked; nobody to blame
        ├── StoreFailed                    no replica accepted a record
        ├── PeerNotFound                   a bare peer ID could not be resolved or dialled
        └── DialFailed                     a connection to a known peer could not be made

A `RecordRejected` always comes with a penalty for the peer that sent the record (a `Store`
request, or a `Value` answer from a replica); `DHTError`s are for our own callers.
"""

from __future__ import annotations

import enum

from peertrain.protocol.errors import PeertrainError, ProtocolError


class RejectReason(enum.Enum):
    """Why a record was refused, and how many penalty points its sender earns."""

    MALFORMED = ("malformed", 25.0)
    UNKNOWN_NAMESPACE = ("unknown-namespace", 10.0)
    OVERSIZED = ("oversized", 25.0)
    EXPIRED = ("expired", 0.0)  # nobody's fault: an honest record can expire in flight
    FUTURE = ("issued-in-future", 0.0)  # nobody's fault: the writer's clock or ours is off
    WRONG_WRITER = ("wrong-writer", 50.0)
    BAD_SIGNATURE = ("bad-signature", 50.0)
    WRONG_KEY = ("wrong-key", 50.0)  # a replica answered with records of another key

    def __init__(self, code: str, penalty: float) -> None:
        self.code = code
        self.penalty = penalty


class RecordRejected(ProtocolError):
    """A record from the network broke a rule; nothing of it is stored or returned."""

    def __init__(self, reason: RejectReason, detail: str) -> None:
        super().__init__(f"{reason.code}: {detail}")
        self.reason = reason
        self.detail = detail


class DHTError(PeertrainError):
    """The DHT could not do what was asked."""


class StoreFailed(DHTError):
    """No replica (and not this node) accepted a record."""


class PeerNotFound(DHTError):
    """A peer ID could not be resolved to addresses that answer."""


class DialFailed(DHTError):
    """A dial to a peer failed (refused, unreachable, its handshake failed or ran out of time)."""
