"""Member certificates of invite runs: who may take part, signed by who may say so.

A certificate names (run ID, peer ID, role, expiry) and is sealed in an envelope (domain
`crdt/member-cert`) with the issuer's libp2p identity key, as every signed thing in peertrain
is (protocol/envelope.py): the issuer is whoever signed it, never a field anyone could write.
A revocation (domain `crdt/revocation`) names (run ID, peer ID, when it was signed) and is signed
the same way; an admin's carries the admin's own certificate, so any replica can check it alone,
whenever it arrives (crdt/revocations.py keeps them).

Who may issue is decided by the verifier (`Admission`, crdt/admission.py), not here: the run's
creator, or an admin holding a certificate from the creator. Roles: `member` trains, `admin`
may also certify and revoke, `anchor` is a member whose state attestations open runs trust.
"""

from __future__ import annotations

from dataclasses import dataclass

from libp2p.crypto.keys import KeyPair
from peertrain.protocol.envelope import open_envelope, seal
from peertrain.protocol.errors import DecodeError
from peertrain.protocol.packing import pack, unpack

from .records import read_peer
from .wire import MAX_SEQ, read_bytes, read_int, read_list, read_str

CERTIFICATE_DOMAIN = "crdt/member-cert"
REVOCATION_DOMAIN = "crdt/revocation"
ROLES = ("member", "admin", "anchor")
MAX_CERTIFICATE_BYTES = 512  # an envelope of ~250 bytes: two peer IDs, a key, a signature
MAX_REVOCATION_BYTES = 1024  # an envelope of ~200 bytes carrying an admin's certificate
MAX_RUN_ID_LEN = 64


@dataclass(frozen=True, slots=True, kw_only=True)
class MemberCertificate:
    """`peer` may take part in `run` as `role` until `expires_ms`; `issuer` signed it."""

    run: str
    peer: str
    role: str
    expires_ms: int
    issuer: str = ""  # set by `open_certificate` from the signature, never from the payload

    def payload(self) -> bytes:
        return pack([self.run, self.peer, self.role, self.expires_ms])


@dataclass(frozen=True, slots=True, kw_only=True)
class Revocation:
    """`peer` no longer belongs to `run`; `issuer` signed it at `issued_ms` (its own clock),
    carrying `issuer_certificate` (an admin's, from the creator; empty for the creator)."""

    run: str
    peer: str
    issuer: str = ""
    issued_ms: int = 0
    issuer_certificate: bytes = b""


def sign_certificate(key_pair: KeyPair, certificate: MemberCertificate) -> bytes:
    if certificate.role not in ROLES:
        raise ValueError(f"role must be one of {', '.join(ROLES)}")
    env = seal(
        key_pair,
        domain=CERTIFICATE_DOMAIN,
        run=certificate.run,
        round=None,
        payload=certificate.payload(),
    )
    return env.to_bytes()


def open_certificate(raw: bytes, run_id: str) -> MemberCertificate:
    """Verify a certificate envelope for `run_id`; `ProtocolError` if it is not one."""
    env = open_envelope(
        raw, expected_domain=CERTIFICATE_DOMAIN, expected_run=run_id, max_size=MAX_CERTIFICATE_BYTES
    )
    fields = read_list(
        unpack(env.payload, max_size=MAX_CERTIFICATE_BYTES, what="certificate"),
        "certificate",
        max_len=4,
        length=4,
    )
    run, peer, role, expires = fields
    certificate = MemberCertificate(
        run=read_str(run, "certificate run", max_len=MAX_RUN_ID_LEN),
        peer=read_peer(peer),
        role=read_str(role, "certificate role", max_len=16),
        expires_ms=read_int(expires, "certificate expiry", hi=MAX_SEQ),
        issuer=env.peer_id.to_base58(),
    )
    if certificate.run != run_id or certificate.role not in ROLES:
        raise DecodeError(f"certificate for run {run!r} as {role!r}")
    return certificate


def sign_revocation(
    key_pair: KeyPair,
    run_id: str,
    peer: str,
    *,
    issued_ms: int | None = None,
    issuer_certificate: bytes = b"",
) -> bytes:
    """A revocation of `peer`; without `issued_ms`, the old form `[peer]` (issued at 0)."""
    fields: list[object] = [peer]
    if issued_ms is not None:
        fields = [peer, issued_ms, issuer_certificate]
    env = seal(key_pair, domain=REVOCATION_DOMAIN, run=run_id, round=None, payload=pack(fields))
    return env.to_bytes()


def open_revocation(raw: bytes, run_id: str) -> Revocation:
    """Verify a revocation envelope for `run_id` (signature and shape; who may issue is the
    verifier's business); `ProtocolError` if it is not one."""
    env = open_envelope(
        raw, expected_domain=REVOCATION_DOMAIN, expected_run=run_id, max_size=MAX_REVOCATION_BYTES
    )
    fields = read_list(
        unpack(env.payload, max_size=MAX_REVOCATION_BYTES, what="revocation"),
        "revocation",
        max_len=3,
    )
    if len(fields) not in (1, 3):
        raise DecodeError(f"a revocation has 1 or 3 fields, not {len(fields)}")
    issued_ms, issuer_certificate = 0, b""
    if len(fields) == 3:
        issued_ms = read_int(fields[1], "revocation time", hi=MAX_SEQ)
        issuer_certificate = read_bytes(
            fields[2], "revocation issuer certificate", max_len=MAX_CERTIFICATE_BYTES
        )
    return Revocation(
        run=run_id,
        peer=read_peer(fields[0]),
        issuer=env.peer_id.to_base58(),
        issued_ms=issued_ms,
        issuer_certificate=issuer_certificate,
    )
