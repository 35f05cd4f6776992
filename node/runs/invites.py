"""Invite runs from the control socket: certify a peer (`run invite`), end it (`run revoke`),
and hold the certificate this node was given (`join --certificate`).

A certificate is a small signed envelope (crdt/certificates.py); the issuer hands it to the
invitee as a base64 token, out of band, and the invitee's node keeps it beside the run's saved
manifest (`<home>/runs/<run id>/certificate`) and carries it in its member record, where every
replica verifies it. A revocation is the issuer's own signed envelope in the run's grow-only
revocation set (crdt/revocations.py), which every replica keeps whole and the node persists
(revocation_file.py). Who may issue is checked here for a clear error, and again by every
replica, which is what counts.
"""

from __future__ import annotations

import base64
import binascii
import re
from typing import TYPE_CHECKING, Any

from libp2p.peer.id import ID
from peertrain.crdt.admission import Admission
from peertrain.crdt.certificates import MemberCertificate, open_certificate, sign_certificate
from peertrain.crdt.errors import StateFull
from peertrain.crdt.hlc import wall_clock_ms
from peertrain.protocol.errors import ProtocolError

from ..errors import ControlError

if TYPE_CHECKING:
    from .session import RunSession

DEFAULT_EXPIRES = "30d"
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(text: str) -> int:
    """Seconds in `30d`, `12h`, `90m`, `45s` (or plain seconds); ControlError otherwise."""
    found = re.fullmatch(r"\s*(\d+)\s*([smhd]?)\s*", text or "")
    if found is None or int(found.group(1)) <= 0:
        raise ControlError(f"a duration is like 30d, 12h, 90m or 45s, not {text!r}")
    return int(found.group(1)) * _UNITS[found.group(2) or "s"]


def token_of(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def certificate_of(token: str) -> bytes:
    """The certificate envelope a token (`run invite`'s output) carries; ControlError if none."""
    try:
        return base64.urlsafe_b64decode(token.strip() + "=" * (-len(token.strip()) % 4))
    except (binascii.Error, ValueError):
        raise ControlError(
            "that is no certificate token (as `peertrain run invite` prints)"
        ) from None


def check_certificate(token: str, run_id: str, peer_id: str) -> bytes:
    """The certificate in `token`, verified as one for `peer_id` in `run_id` (a wrong token is
    said now, not by silent drops once the run starts)."""
    raw = certificate_of(token)
    try:
        certificate = open_certificate(raw, run_id)
    except ProtocolError as exc:
        raise ControlError(f"that certificate is not one of this run: {exc}") from None
    if certificate.peer != peer_id:
        raise ControlError(f"that certificate is for {certificate.peer}, not this node ({peer_id})")
    if certificate.expires_ms < wall_clock_ms():
        raise ControlError("that certificate has expired; ask for a new one")
    return raw


def _issuer_admission(session: RunSession, me: str) -> Admission:
    """The run's admission, if this node may certify and revoke in it; ControlError else."""
    driver = session.driver
    if session.manifest.mode != "diloco" or driver is None:
        raise ControlError("invites are for DiLoCo runs that this node has started")
    admission: Admission = driver.admission
    if not admission.invite:
        raise ControlError(
            f"run {session.manifest.name!r} is open: anyone may train in it; invites are for "
            "runs created with --admission invite"
        )
    if admission.role(me) != "admin":
        raise ControlError("only the run's creator or an admin it certified may invite or revoke")
    return admission


def _peer(peer: str) -> str:
    try:
        ID.from_base58(peer)
    except ValueError:
        raise ControlError(
            f"{peer!r} is no peer ID (12D3KooW…; `peertrain id` prints one)"
        ) from None
    return peer


def invite(
    session: RunSession, me: str, key_pair, *, peer: str, role: str, expires: str
) -> dict[str, Any]:
    """Sign a certificate for `peer`; the token the invitee joins with."""
    _peer(peer)
    _issuer_admission(session, me)
    expires_s = parse_duration(expires)
    certificate = MemberCertificate(
        run=session.run_id, peer=peer, role=role, expires_ms=wall_clock_ms() + 1000 * expires_s
    )
    try:
        raw = sign_certificate(key_pair, certificate)
    except ValueError as exc:
        raise ControlError(str(exc)) from None
    return {
        "run_id": session.run_id,
        "name": session.manifest.name,
        "peer": peer,
        "role": role,
        "expires_ms": certificate.expires_ms,
        "certificate": token_of(raw),
    }


def revoke(session: RunSession, me: str, peer: str) -> dict[str, Any]:
    """End `peer`'s membership: our signed revocation, replicated as run state."""
    _peer(peer)
    admission = _issuer_admission(session, me)
    if peer == session.manifest.creator:
        raise ControlError("nobody revokes a run's creator")
    try:
        session.replicator.writer.revoke(peer)
    except (StateFull, ProtocolError) as exc:  # our quota of revocations is spent, say
        raise ControlError(f"cannot revoke {peer}: {exc}") from None
    return {"run_id": session.run_id, "peer": peer, "revoked": admission.revoked(peer)}
