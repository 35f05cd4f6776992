"""A member's progress report: the run-wide view's row, carried in the member's own lease.

Each member of a run says where it stands (round, state checksum, samples/s, device, software
version, its owner's public name) in its member record (`MemberInfo.report`). The record is in
the member's own slot: it is signed with the member's delta and `RunState.apply_remote` refuses
anyone else's write to it, so nobody can speak for another member. What a member says of
itself is still only its claim (a member may lie about its round or its speed): readers show it
as such and decide nothing on it; who counts and which state is trusted are decided elsewhere
(swarm/diloco/group/trust.py, roster.py).

It rides the lease rather than a component of its own: a lease is renewed anyway, so the report
costs no extra record per member, and a member that leaves takes its report with it. Every
field is bounded here, and a report that breaks a bound is a `DecodeError` for its signer.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from peertrain.protocol.errors import DecodeError

from .wire import MAX_SEQ, Wire, read_float, read_int, read_list, read_str

MAX_CHECKSUM_LEN = 64  # hex characters (a SHA-256 whole; members send a 16-character prefix)
MAX_DEVICE_LEN = 48  # "cuda:0 NVIDIA H200", "cpu", "mps"
MAX_VERSION_LEN = 32
MAX_NAME_LEN = 32  # node/config.py PUBLIC_NAME_MAX
MAX_SAMPLES_PER_S = 1e12
HEX = frozenset("0123456789abcdef")


@dataclass(frozen=True, slots=True, kw_only=True)
class MemberReport:
    """Where a member says it stands: its round, the checksum of its state, its training speed
    (samples a second over the rounds it took part in, waits included), its device, its
    peertrain version and its owner's public name ("" when it has none)."""

    round: int
    checksum: str
    samples_per_s: float
    device: str = ""
    version: str = ""
    name: str = ""

    def __post_init__(self) -> None:
        if not 0 <= self.round <= MAX_SEQ:
            raise ValueError("round must be a non-negative int")
        if len(self.checksum) > MAX_CHECKSUM_LEN or not set(self.checksum) <= HEX:
            raise ValueError(f"checksum is at most {MAX_CHECKSUM_LEN} lower-case hex characters")
        if not (math.isfinite(self.samples_per_s) and 0 <= self.samples_per_s <= MAX_SAMPLES_PER_S):
            raise ValueError(f"samples_per_s must be finite, 0..{MAX_SAMPLES_PER_S:g}")
        for what, text, most in (
            ("device", self.device, MAX_DEVICE_LEN),
            ("version", self.version, MAX_VERSION_LEN),
            ("name", self.name, MAX_NAME_LEN),
        ):
            # shown on other people's terminals and pages: no escape sequences, no line breaks
            if len(text) > most or not text.isprintable():
                raise ValueError(f"{what} is at most {most} printable characters")


def encode_report(report: MemberReport) -> Wire:
    r = report
    return [r.round, r.checksum, float(r.samples_per_s), r.device, r.version, r.name]


def decode_report(x: Wire) -> MemberReport:
    round_, checksum, speed, device, version, name = read_list(
        x, "member report", max_len=6, length=6
    )
    try:
        return MemberReport(
            round=read_int(round_, "report round"),
            checksum=read_str(checksum, "report checksum", max_len=MAX_CHECKSUM_LEN),
            samples_per_s=read_float(speed, "report samples/s", hi=MAX_SAMPLES_PER_S),
            device=read_str(device, "report device", max_len=MAX_DEVICE_LEN),
            version=read_str(version, "report version", max_len=MAX_VERSION_LEN),
            name=read_str(name, "report name", max_len=MAX_NAME_LEN),
        )
    except ValueError as exc:
        raise DecodeError(str(exc)) from None
