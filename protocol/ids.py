"""Versioned protocol IDs: `/peertrain/<name>/<major>.<minor>.<patch>`.

libp2p's multistream-select matches protocol IDs as exact strings, so a node registers a
handler for every version it serves and a dialer offers the versions it speaks, best first
(`dial_order`). The compatibility rule is semantic versioning's: the same major version is
wire-compatible (a newer minor may add optional fields that older peers ignore); a different
major is not. `negotiate` picks the best version two peers share from their lists, and
`require_compatible` turns a mismatch into a `VersionMismatch` that says what to do.

Names are lowercase words separated by '-' and, for sub-protocols, '/': `crdt/sync`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from .errors import DecodeError, VersionMismatch

PREFIX = "/peertrain/"
_NAME = re.compile(r"[a-z0-9][a-z0-9-]{0,31}(/[a-z0-9][a-z0-9-]{0,31}){0,3}")
_VERSION = re.compile(r"(0|[1-9][0-9]{0,5})\.(0|[1-9][0-9]{0,5})\.(0|[1-9][0-9]{0,5})")
MAX_ID_LEN = 160


@dataclass(frozen=True, kw_only=True, slots=True, order=True)
class Version:
    major: int
    minor: int
    patch: int

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}.{self.patch}"


@dataclass(frozen=True, kw_only=True, slots=True)
class ProtocolId:
    """One protocol at one version; `str(pid)` is what libp2p sees."""

    name: str
    version: Version

    def __post_init__(self) -> None:
        if not _NAME.fullmatch(self.name):
            raise ValueError(f"invalid protocol name {self.name!r}")

    def __str__(self) -> str:
        return f"{PREFIX}{self.name}/{self.version}"

    def compatible_with(self, other: ProtocolId) -> bool:
        return self.name == other.name and self.version.major == other.version.major


def protocol_id(name: str, version: str) -> ProtocolId:
    """`protocol_id("crdt/sync", "1.2.0")`, for declaring our own protocols."""
    return ProtocolId(name=name, version=_parse_version(version, ValueError))


def _parse_version(text: str, error: type[Exception]) -> Version:
    match = _VERSION.fullmatch(text)
    if match is None:
        raise error(f"invalid protocol version {text!r} (want MAJOR.MINOR.PATCH)")
    major, minor, patch = (int(part) for part in match.groups())
    return Version(major=major, minor=minor, patch=patch)


def parse_protocol_id(text: str) -> ProtocolId:
    """Parse a protocol ID received from a peer; malformed IDs raise `DecodeError`."""
    if not isinstance(text, str) or len(text) > MAX_ID_LEN or not text.startswith(PREFIX):
        raise DecodeError(f"not a peertrain protocol ID: {str(text)[:MAX_ID_LEN]!r}")
    name, _, version = text[len(PREFIX) :].rpartition("/")
    if not _NAME.fullmatch(name):
        raise DecodeError(f"invalid protocol name in {text!r}")
    return ProtocolId(name=name, version=_parse_version(version, DecodeError))


def _as_ids(items: Iterable[ProtocolId | str]) -> list[ProtocolId]:
    return [item if isinstance(item, ProtocolId) else parse_protocol_id(item) for item in items]


def dial_order(supported: Iterable[ProtocolId | str]) -> list[ProtocolId]:
    """Our versions, best (highest) first: the order to offer them in multistream-select."""
    return sorted(_as_ids(supported), key=lambda pid: (pid.name, pid.version), reverse=True)


def negotiate(ours: Iterable[ProtocolId | str], theirs: Iterable[ProtocolId | str]) -> ProtocolId:
    """The best version both sides can speak.

    An exact match is preferred (the highest one). Failing that, the highest compatible pair
    (same name and major) wins, at the *lower* of the two versions: the newer side knows the
    older format, not the reverse. Raises `VersionMismatch` when nothing is compatible.
    """
    our_ids, their_ids = _as_ids(ours), _as_ids(theirs)
    exact = set(our_ids) & set(their_ids)
    if exact:
        return max(exact, key=lambda pid: pid.version)
    pairs = [
        min(a, b, key=lambda pid: pid.version)
        for a in our_ids
        for b in their_ids
        if a.compatible_with(b)
    ]
    if pairs:
        return max(pairs, key=lambda pid: pid.version)
    raise VersionMismatch(
        f"no compatible protocol version: we speak {_listing(our_ids)}, "
        f"the peer speaks {_listing(their_ids)}; the major versions must match, "
        f"so the older node must be upgraded"
    )


def require_compatible(ours: ProtocolId, theirs: ProtocolId | str) -> ProtocolId:
    """Check a single peer-announced ID against ours; return it parsed."""
    their_id = theirs if isinstance(theirs, ProtocolId) else parse_protocol_id(theirs)
    if not ours.compatible_with(their_id):
        raise VersionMismatch(
            f"the peer speaks {their_id}, we speak {ours}: "
            + (
                "a different protocol"
                if ours.name != their_id.name
                else f"major version {their_id.version.major} cannot talk to "
                f"{ours.version.major}; upgrade the older node"
            )
        )
    return their_id


def _listing(ids: list[ProtocolId]) -> str:
    return ", ".join(str(pid) for pid in ids) or "nothing"
