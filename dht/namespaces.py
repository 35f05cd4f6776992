"""Which keys exist, who may write them, and how big and long-lived their records may be.

Every key belongs to a registered namespace; a record under any other key is refused. Keys
are scoped by run so that runs never collide:

    /peertrain/peer/<peer id>            where a peer can be reached (only that peer writes)
    /peertrain/runs                      runs that exist (one entry per creator)
    /peertrain/<run>/members             peers taking part in a run
    /peertrain/<run>/stage/<k>           servers of pipeline stage k
    /peertrain/<run>/group/<g>           members of DiLoCo group g
    /peertrain/<run>/ckpt                checkpoint providers

A key holds a dictionary with one entry per writer (the subkey is the writer's peer ID), so
"servers of stage 3" is one key and every server owns its own entry. A namespace with an
`owner` field allows only the peer named in the key to write. Other layers register their
own namespaces on a `NamespaceRegistry` (e.g. `/peertrain/<run>/expert/<e>`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from libp2p.peer.id import ID
from multiaddr import Multiaddr

from .errors import RecordRejected, RejectReason

MAX_KEY_LEN = 256
MAX_VALUE_SIZE = 8 * 1024  # no namespace may allow more: records are pointers, not payloads
MAX_WRITERS = 1024
MAX_PEER_ADDRS = 16

_FIELD_PATTERNS = {
    "run": r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}",
    "peer": r"[1-9A-HJ-NP-Za-km-z]{32,64}",  # base58btc
    "index": r"0|[1-9][0-9]{0,4}",
    "name": r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}",
}
_PLACEHOLDER = re.compile(r"\{(\w+)\}")


def _compile(pattern: str) -> re.Pattern[str]:
    parts, pos = [], 0
    for match in _PLACEHOLDER.finditer(pattern):
        kind = match.group(1)
        if kind not in _FIELD_PATTERNS:
            raise ValueError(f"unknown key field {{{kind}}} in {pattern!r}")
        parts.append(re.escape(pattern[pos : match.start()]))
        parts.append(f"(?P<{kind}>{_FIELD_PATTERNS[kind]})")
        pos = match.end()
    parts.append(re.escape(pattern[pos:]))
    return re.compile("".join(parts))


@dataclass(frozen=True, kw_only=True, slots=True)
class Namespace:
    """A family of keys and the rules for their records.

    `pattern` uses `{run}`, `{peer}`, `{index}` and `{name}` fields. `owner="peer"` means only
    the peer whose ID fills `{peer}` may write. `check_value` receives the unpacked value and
    raises ValueError (or TypeError) when its shape is wrong.
    """

    name: str
    pattern: str
    max_ttl: float
    max_value_size: int = 1024
    max_writers: int = 256
    owner: str | None = None
    check_value: Callable[[Any], None] | None = None
    regex: re.Pattern[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not 0 < self.max_value_size <= MAX_VALUE_SIZE:
            raise ValueError(f"max_value_size must be in 1..{MAX_VALUE_SIZE}")
        if not 0 < self.max_writers <= MAX_WRITERS:
            raise ValueError(f"max_writers must be in 1..{MAX_WRITERS}")
        if self.max_ttl <= 0:
            raise ValueError("max_ttl must be positive")
        object.__setattr__(self, "regex", _compile(self.pattern))
        if self.owner is not None and self.owner not in self.regex.groupindex:
            raise ValueError(f"owner field {{{self.owner}}} is not in {self.pattern!r}")


@dataclass(frozen=True, slots=True)
class KeyMatch:
    namespace: Namespace
    fields: dict[str, str]

    @property
    def owner(self) -> str | None:
        """The only writer allowed under this key (base58 peer ID), or None if anyone may write."""
        return None if self.namespace.owner is None else self.fields[self.namespace.owner]


class NamespaceRegistry:
    """The namespaces a node accepts. Matching is a full-string regex match per namespace."""

    def __init__(self, namespaces: Iterable[Namespace] = ()) -> None:
        self._namespaces: dict[str, Namespace] = {}
        for namespace in namespaces:
            self.register(namespace)

    def register(self, namespace: Namespace) -> None:
        if namespace.name in self._namespaces:
            raise ValueError(f"namespace {namespace.name!r} is already registered")
        self._namespaces[namespace.name] = namespace

    def __iter__(self) -> Iterator[Namespace]:
        return iter(self._namespaces.values())

    def match(self, key: str) -> KeyMatch:
        """The namespace of `key`, or `RecordRejected(UNKNOWN_NAMESPACE)`."""
        if len(key) > MAX_KEY_LEN:
            raise RecordRejected(RejectReason.OVERSIZED, f"key of {len(key)} chars")
        for namespace in self._namespaces.values():
            found = namespace.regex.fullmatch(key)
            if found is not None:
                return KeyMatch(namespace, found.groupdict())
        raise RecordRejected(RejectReason.UNKNOWN_NAMESPACE, f"no namespace for key {key[:80]!r}")


def check_peer_addrs(value: Any) -> None:
    """A peer record: {"addrs": [multiaddr, ...]}, 1..MAX_PEER_ADDRS parseable addresses."""
    if type(value) is not dict or set(value) != {"addrs"}:
        raise ValueError('a peer record is {"addrs": [...]}')
    addrs = value["addrs"]
    if type(addrs) is not list or not 0 < len(addrs) <= MAX_PEER_ADDRS:
        raise ValueError(f"a peer record lists 1..{MAX_PEER_ADDRS} addresses")
    for addr in addrs:
        if type(addr) is not str or len(addr) > 256:
            raise ValueError("addresses are multiaddr strings of at most 256 characters")
        try:
            Multiaddr(addr)
        except Exception as exc:  # noqa: BLE001 - multiaddr raises many types for bad text: translated
            raise ValueError(f"{addr[:80]!r} is not a multiaddr ({exc})") from None


def check_map(value: Any) -> None:
    if type(value) is not dict:
        raise ValueError("the value must be a map")


HOUR = 3600.0

PEER = Namespace(
    name="peer",
    pattern="/peertrain/peer/{peer}",
    max_ttl=HOUR,
    max_value_size=4096,
    max_writers=1,
    owner="peer",
    check_value=check_peer_addrs,
)
RUNS = Namespace(  # each member lists its runs (node/runs/directory.py): up to 8 of ~300 bytes
    name="runs",
    pattern="/peertrain/runs",
    max_ttl=HOUR,
    max_value_size=4096,
    max_writers=1024,
    check_value=check_map,
)
MEMBERS = Namespace(
    name="members", pattern="/peertrain/{run}/members", max_ttl=HOUR, max_writers=1024
)
STAGE = Namespace(name="stage", pattern="/peertrain/{run}/stage/{index}", max_ttl=HOUR)
GROUP = Namespace(name="group", pattern="/peertrain/{run}/group/{name}", max_ttl=HOUR)
CHECKPOINT = Namespace(name="ckpt", pattern="/peertrain/{run}/ckpt", max_ttl=6 * HOUR)

DEFAULT_NAMESPACES = (PEER, RUNS, MEMBERS, STAGE, GROUP, CHECKPOINT)


def default_registry() -> NamespaceRegistry:
    return NamespaceRegistry(DEFAULT_NAMESPACES)


def peer_record_key(peer: ID | str) -> str:
    return f"/peertrain/peer/{peer.to_base58() if isinstance(peer, ID) else peer}"


def runs_key() -> str:
    return "/peertrain/runs"


def members_key(run: str) -> str:
    return f"/peertrain/{run}/members"


def stage_key(run: str, index: int) -> str:
    return f"/peertrain/{run}/stage/{index}"


def group_key(run: str, group: str) -> str:
    return f"/peertrain/{run}/group/{group}"


def checkpoint_key(run: str) -> str:
    return f"/peertrain/{run}/ckpt"
