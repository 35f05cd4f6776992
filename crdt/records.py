"""What RunState slots hold: member records, checkpoint references, ban votes.

Frozen value types with strict codecs. Every size is capped here, so one owner's slot in the
run state has a hard upper bound whatever that owner sends: at most one member record, one
progress count, `CHECKPOINT_WINDOW` checkpoint references and `BAN_WINDOW` ban votes.
A member record may carry its member's progress report (crdt/member_report.py), bounded there.
"""

from __future__ import annotations

from dataclasses import dataclass

from peertrain.protocol.errors import DecodeError

from .member_report import MemberReport, decode_report, encode_report
from .wire import (
    MAX_SEQ,
    Codec,
    Wire,
    read_bytes,
    read_float,
    read_int,
    read_list,
    read_str,
)

MAX_PEER_ID_LEN = 128  # a base58 Ed25519 peer ID is 52 characters
MAX_ROLE_LEN = 64
MAX_ADDRS = 16
MAX_ADDR_LEN = 256
MAX_HASH_LEN = 64
MAX_CERTIFICATE_LEN = 512  # certificates.MAX_CERTIFICATE_BYTES
CIRCUIT = "/p2p-circuit"


def read_peer(x: Wire, what: str = "peer ID") -> str:
    return read_str(x, what, max_len=MAX_PEER_ID_LEN)


@dataclass(frozen=True, slots=True, kw_only=True)
class MemberInfo:
    """A member's own record: role, how to reach it, how fast it is, until when it counts."""

    role: str
    addrs: tuple[str, ...]
    throughput: float
    lease_expiry_ms: int
    certificate: bytes = b""  # invite runs: the member's certificate envelope (crdt/certificates)
    loss: float | None = None  # the member's latest eval loss, where its mode publishes one
    report: MemberReport | None = None  # where the member says it stands (the run-wide view)

    def __post_init__(self) -> None:
        if len(self.role) > MAX_ROLE_LEN:
            raise ValueError(f"role is longer than {MAX_ROLE_LEN} characters")
        if len(self.addrs) > MAX_ADDRS or any(len(a) > MAX_ADDR_LEN for a in self.addrs):
            raise ValueError(f"at most {MAX_ADDRS} addresses of {MAX_ADDR_LEN} characters")
        if len(self.certificate) > MAX_CERTIFICATE_LEN:
            raise ValueError(f"a certificate is at most {MAX_CERTIFICATE_LEN} bytes")
        if not 0.0 <= self.throughput < 1e18:
            raise ValueError("throughput must be a non-negative finite number")
        if self.loss is not None and not 0.0 <= self.loss <= 1e18:
            raise ValueError("loss must be a non-negative finite number")

    @property
    def relay_addrs(self) -> tuple[str, ...]:
        """Circuit-relay addresses (libp2p identify cannot carry these; RunState does)."""
        return tuple(a for a in self.addrs if CIRCUIT in a)


def _encode_member(m: MemberInfo) -> Wire:
    fields: list[Wire] = [m.role, list(m.addrs), float(m.throughput), m.lease_expiry_ms]
    if m.report is not None:  # 7 fields: the certificate (maybe empty), the loss (maybe nil)
        loss = None if m.loss is None else float(m.loss)
        return [*fields, m.certificate, loss, encode_report(m.report)]
    if m.loss is not None:  # 6 fields: the certificate (maybe empty) and the loss
        return [*fields, m.certificate, float(m.loss)]
    return [*fields, m.certificate] if m.certificate else fields  # open runs: the old 4 fields


def _decode_member(x: Wire) -> MemberInfo:
    fields = read_list(x, "member record", max_len=7)
    if len(fields) not in (4, 5, 6, 7):
        raise DecodeError(f"a member record has 4 to 7 fields, not {len(fields)}")
    role, addrs, throughput, lease = fields[:4]
    certificate = b""
    if len(fields) >= 5:
        certificate = read_bytes(fields[4], "member certificate", max_len=MAX_CERTIFICATE_LEN)
        if not certificate and len(fields) == 5:
            raise DecodeError("an empty certificate is encoded by leaving it out")
    loss = None
    if len(fields) == 6 or (len(fields) == 7 and fields[5] is not None):
        loss = read_float(fields[5], "member loss")  # nil only where a report follows
    report = decode_report(fields[6]) if len(fields) == 7 else None
    addrs = read_list(addrs, "member addresses", max_len=MAX_ADDRS)
    return MemberInfo(
        loss=loss,
        report=report,
        certificate=certificate,
        role=read_str(role, "member role", max_len=MAX_ROLE_LEN),
        addrs=tuple(read_str(a, "member address", max_len=MAX_ADDR_LEN) for a in addrs),
        throughput=read_float(throughput, "member throughput"),
        lease_expiry_ms=read_int(lease, "lease expiry", hi=MAX_SEQ),
    )


MEMBER = Codec(_encode_member, _decode_member)
PEER = Codec(lambda p: p, read_peer)


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckpointRef:
    """A checkpoint of round `round` whose bytes hash to `content_hash`."""

    round: int
    content_hash: bytes


def _decode_checkpoint(x: Wire) -> CheckpointRef:
    round_, digest = read_list(x, "checkpoint reference", max_len=2, length=2)
    return CheckpointRef(
        round=read_int(round_, "checkpoint round"),
        content_hash=read_bytes(digest, "checkpoint hash", max_len=MAX_HASH_LEN),
    )


CHECKPOINT = Codec(lambda c: [c.round, c.content_hash], _decode_checkpoint)


@dataclass(frozen=True, slots=True, kw_only=True)
class BanVote:
    """One member's vote to ban `peer`, naming the hash of its evidence."""

    peer: str
    evidence: bytes


def _decode_ban(x: Wire) -> BanVote:
    peer, evidence = read_list(x, "ban vote", max_len=2, length=2)
    return BanVote(
        peer=read_peer(peer), evidence=read_bytes(evidence, "ban evidence", max_len=MAX_HASH_LEN)
    )


BAN = Codec(lambda b: [b.peer, b.evidence], _decode_ban)
