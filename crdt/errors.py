"""The CRDT layer's branch of the error tree.

    PeertrainError
    └── CRDTError                  the replicated run state refused something
        ├── ForbiddenWrite         a delta wrote a slot its signer does not own   (remote's fault)
        ├── ClockDrift             a remote stamp lies too far in the future      (remote's fault)
        ├── WrongRun               a manifest or delta belongs to another run     (remote's fault)
        ├── NotAdmitted            a non-member of an invite run signed something (remote's fault)
        └── StateFull              a capacity limit was reached (nobody to blame)

Remote-fault errors also derive from `ProtocolError`, so callers that already penalise a peer
for any `ProtocolError` treat them alike; `StateFull` does not, because a full table is not
evidence that the sender misbehaved.
"""

from __future__ import annotations

from peertrain.protocol.errors import PeertrainError, ProtocolError


class CRDTError(PeertrainError):
    """The replicated run state refused an operation or a remote delta."""


class ForbiddenWrite(CRDTError, ProtocolError):
    """A signed delta wrote a slot that its signer does not own."""


class ClockDrift(CRDTError, ProtocolError):
    """A remote hybrid-clock stamp lies further in the future than the allowed drift."""


class WrongRun(CRDTError, ProtocolError):
    """A manifest does not hash to the run ID, or a message names another run."""


class NotAdmitted(CRDTError, ProtocolError):
    """The signer is no member of this invite run (no valid certificate), or signed a
    certificate or revocation it may not issue."""


class StateFull(CRDTError):
    """A bounded table (owners, entries) is full; the write was dropped."""
