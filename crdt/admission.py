"""`Admission`: which signers a run's replica lets in, from the creator's signed word only.

Peer IDs cost nothing, so nothing a peer says about itself admits it. An **invite** run admits
its creator and holders of a valid member certificate (crdt/certificates.py) signed by the
creator or by an admin the creator certified; a revocation signed by the same signers ends it
(kept whole in the run's `RevocationSet`, crdt/revocations.py, so every replica agrees).
Certificates travel in the holder's own member record (`MemberInfo.certificate`), so a replica
learns them with the first delta that needs one; anything a non-member signs is dropped by
`RunState.check_remote` (`NotAdmitted`) before it is stored, forwarded or counted.

An **open** run admits every signer, and the state's owner table is defended another way: when
it is full, a new owner evicts the oldest owner nobody vouched for (`RunState`), so a wave of
fresh IDs cannot lock an honest newcomer out; anchors and members the training layer counted in
a round are vouched for and never evicted. How much of the run an admitted stranger can sway is
the training layer's business (rate-limited rosters, trusted attestations: swarm/diloco).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable

from .certificates import MemberCertificate, open_certificate, open_revocation
from .errors import NotAdmitted
from .hlc import wall_clock_ms
from .revocations import RevocationSet

MAX_CERTIFICATES = 4096  # certified peers remembered (an invite run's member count is far lower)
ISSUER_ROLES = ("admin",)


def revocation_evidence(run_id: str, peer: str) -> bytes:
    """The evidence of a ban vote that revokes `peer` from `run_id` (nothing else hashes so)."""
    return hashlib.blake2b(
        f"peertrain/revocation\0{run_id}\0{peer}".encode(), digest_size=32
    ).digest()


class Admission:
    """The admission policy of one run: `open`, or `invite` with certificates and revocations."""

    def __init__(
        self,
        *,
        run_id: str,
        creator: str,
        mode: str = "open",
        anchors: frozenset[str] = frozenset(),
        wall_ms: Callable[[], int] = wall_clock_ms,
    ) -> None:
        if mode not in ("open", "invite"):
            raise ValueError(f"admission must be 'open' or 'invite', got {mode!r}")
        self.run_id, self.creator, self.mode = run_id, creator, mode
        self.anchors = frozenset(anchors) | {creator}
        self.wall_ms = wall_ms
        self._certificates: dict[str, MemberCertificate] = {}
        # the run's revocations; RunState.install_admission hands in the replica's own set
        self.revocations = RevocationSet(run_id, creator, wall_ms=wall_ms)

    @property
    def invite(self) -> bool:
        return self.mode == "invite"

    # -- what the creator and its admins signed

    def add_certificate(self, raw: bytes) -> MemberCertificate:
        """Verify and keep a certificate; `ProtocolError` if it is no valid one of this run."""
        certificate = open_certificate(raw, self.run_id)
        if not self._may_issue(certificate.issuer):
            raise NotAdmitted(f"{certificate.issuer} may not certify members of this run")
        if self.revocations.revoked(certificate.peer):
            raise NotAdmitted(f"{certificate.peer} was revoked from this run")
        known = self._certificates.get(certificate.peer)
        if known is None and len(self._certificates) >= MAX_CERTIFICATES:
            raise NotAdmitted("this run's certificate table is full")
        if known is None or certificate.expires_ms > known.expires_ms:
            self._certificates[certificate.peer] = certificate
        return certificate

    def revoke(self, raw: bytes) -> str:
        """Verify a revocation and apply it; the revoked peer's ID. `ProtocolError` if invalid.
        One carrying its time (and an admin's certificate) is kept in the set to be forwarded."""
        revocation = open_revocation(raw, self.run_id)
        if revocation.issued_ms and (
            revocation.issuer == self.creator or revocation.issuer_certificate
        ):
            self.revocations.add(raw)
            self._certificates.pop(revocation.peer, None)
            return revocation.peer
        return self.revoke_by(revocation.issuer, revocation.peer)

    def revoke_by(self, issuer: str, peer: str) -> str:
        """`issuer` (whose signature the caller checked) revokes `peer`; NotAdmitted if it may
        not. Returns `peer`."""
        if not self._may_issue(issuer):
            raise NotAdmitted(f"{issuer} may not revoke members of this run")
        if peer == self.creator:
            raise NotAdmitted("nobody revokes a run's creator")
        self.revocations.note(issuer, peer)
        self._certificates.pop(peer, None)
        return peer

    def revoked(self, peer: str) -> bool:
        return self.revocations.revoked(peer)

    def _may_issue(self, issuer: str) -> bool:
        if issuer == self.creator:
            return True
        held = self._valid(issuer)
        return held is not None and held.role in ISSUER_ROLES and held.issuer == self.creator

    def _valid(self, peer: str) -> MemberCertificate | None:
        certificate = self._certificates.get(peer)
        if certificate is None or self.revocations.revoked(peer):
            return None
        if certificate.expires_ms < self.wall_ms():
            return None
        if certificate.issuer != self.creator and not self._issuer_still_valid(certificate):
            return None
        return certificate

    def _issuer_still_valid(self, certificate: MemberCertificate) -> bool:
        """An admin's certificates lapse with the admin's own (revoked or expired)."""
        issuer = self._certificates.get(certificate.issuer)
        return (
            issuer is not None
            and issuer.role in ISSUER_ROLES
            and issuer.issuer == self.creator
            and not self.revocations.revoked(certificate.issuer)
            and issuer.expires_ms >= self.wall_ms()
        )

    # -- what replicas ask

    def admits(self, peer: str) -> bool:
        """May `peer` write to the run's state at all?"""
        if not self.invite or peer == self.creator:
            return True
        return self._valid(peer) is not None

    def certified(self) -> set[str]:
        """Peers holding a valid certificate now, and the creator (invite runs)."""
        return {p for p in self._certificates if self._valid(p) is not None} | {self.creator}

    def role(self, peer: str) -> str | None:
        if peer == self.creator:
            return "admin"
        certificate = self._valid(peer)
        return certificate.role if certificate is not None else None

    def trusted_attesters(self) -> frozenset[str]:
        """Open runs: the anchors (and certified anchors of an invite run too)."""
        named = {p for p in self._certificates if self.role(p) == "anchor"}
        return self.anchors | named
