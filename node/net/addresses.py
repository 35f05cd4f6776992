"""Concrete, routable addresses to advertise instead of /ip4/0.0.0.0, and address scope.

py-libp2p advertises a wildcard listen address verbatim, which breaks everything that passes
addresses around (docs/libp2p-notes.md). We expand a wildcard into one address per interface and
order them so that the first one is the best to give other machines: public, then private
(LAN), then loopback last. Link-local addresses are dropped: they need a zone to be dialed.
`in_scope` keeps a peer's address hints within the scope we reach that peer in: a stranger on
the internet must not make us dial our own loopback or LAN.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Sequence

import psutil
from multiaddr import Multiaddr
from multiaddr.exceptions import Error as _MultiaddrError

# What parsing text into a Multiaddr, or asking one for a protocol it lacks, may raise: the
# library's own tree (StringParseError, ProtocolLookupError, ...), plus TypeError for a non-string
MULTIADDR_ERRORS: tuple[type[Exception], ...] = (_MultiaddrError, TypeError, ValueError)

_WILDCARDS = {"0.0.0.0": "ip4", "::": "ip6"}


_CACHE: dict[str, tuple[float, list[str]]] = {}
CACHE_SECONDS = (
    30.0  # identify asks for our addresses on every connection; interfaces rarely change
)


def interface_ips(family: str) -> list[str]:
    """Every usable address of this machine for `family` ("ip4" or "ip6"), cached briefly."""
    import time

    cached = _CACHE.get(family)
    if cached is not None and time.monotonic() - cached[0] < CACHE_SECONDS:
        return list(cached[1])
    found = _scan(family)
    _CACHE[family] = (time.monotonic(), found)
    return list(found)


def _scan(family: str) -> list[str]:
    found = []
    for addrs in psutil.net_if_addrs().values():
        for addr in addrs:
            text = addr.address.split("%")[0]
            try:
                ip = ipaddress.ip_address(text)
            except ValueError:
                continue
            if (ip.version == 4) != (family == "ip4") or ip.is_link_local or ip.is_unspecified:
                continue
            found.append(str(ip))
    return sorted(set(found), key=_rank_ip)


def _rank_ip(text: str) -> tuple[int, str]:
    ip = ipaddress.ip_address(text)
    if ip.is_loopback:
        return (2, text)
    if ip.is_global:
        return (0, text)
    return (1, text)


def value_of(addr: Multiaddr | str, protocol: str) -> str | None:
    """The value of `protocol` in `addr` ("ip4" → "10.0.0.2"); None when `addr` does not parse or
    has no such part."""
    try:
        return (addr if isinstance(addr, Multiaddr) else Multiaddr(addr)).value_for_protocol(
            protocol
        )
    except MULTIADDR_ERRORS:
        return None


def rank(addr: Multiaddr) -> int:
    """0 for public, 1 for private, 2 for loopback, 3 for anything we cannot classify."""
    for proto in ("ip4", "ip6"):
        value = value_of(addr, proto)
        if value:
            return _rank_ip(value)[0]
    return 3


PUBLIC, PRIVATE, LOOPBACK, UNKNOWN = 0, 1, 2, 3  # what `rank` returns


def in_scope(addrs: Iterable[Multiaddr], source: Multiaddr | None) -> list[Multiaddr]:
    """The addresses among `addrs` a peer we reach at `source` may point us to: public ones
    always; private ones only from a private or loopback peer, or inside a LAN we are on
    ourselves; loopback ones only from a loopback peer. An unknown source counts as public."""
    scope = rank(source) if source is not None else PUBLIC
    scope = PUBLIC if scope == UNKNOWN else scope
    out = []
    for addr in addrs:
        kind = rank(addr)
        if kind in (PUBLIC, UNKNOWN) or kind <= scope:  # UNKNOWN: a DNS name, dialed as such
            out.append(addr)
        elif kind == PRIVATE and _on_our_lan(addr):
            out.append(addr)
    return out


def _on_our_lan(addr: Multiaddr) -> bool:
    """Whether `addr`'s IP shares a /24 (IPv4) or /48 (IPv6) with one of our own addresses."""
    for family, bits in (("ip4", 24), ("ip6", 48)):
        value = value_of(addr, family)
        if value:
            block = ipaddress.ip_network(f"{value}/{bits}", strict=False)
            return any(ipaddress.ip_address(ip) in block for ip in interface_ips(family))
    return False


def expand_wildcards(addrs: Iterable[Multiaddr]) -> list[Multiaddr]:
    """Replace each wildcard IP by every concrete IP of this machine; stable order, best first."""
    out: list[Multiaddr] = []
    for addr in addrs:
        parts = str(addr).split("/")
        if len(parts) > 2 and parts[1] in ("ip4", "ip6") and parts[2] in _WILDCARDS:
            for ip in interface_ips(parts[1]):
                out.append(Multiaddr("/".join(parts[:2] + [ip] + parts[3:])))
        else:
            out.append(addr)
    unique = list(dict.fromkeys(out))
    return sorted(unique, key=rank)


def is_loopback(addr: Multiaddr) -> bool:
    return rank(addr) == 2


def shareable(addrs: Sequence[Multiaddr]) -> list[Multiaddr]:
    """The addresses worth giving to other machines: loopback only if nothing else exists."""
    routable = [a for a in addrs if not is_loopback(a)]
    return routable or list(addrs)
