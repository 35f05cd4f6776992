"""One resource budget per daemon: what peers can make us take, bounded where it is taken.

Peers are free to make (docs/design.md §2), so every resource a stranger can make us spend is drawn
from one budget, whose limits are set in config.toml (`budget_*` keys) and whose usage is shown
under `budget` in `status --json`:

    connections          all peers together, per peer, and per IP prefix (/24 for IPv4, /48
                         for IPv6: one machine or one cheap cloud block cannot take them all)
    receive memory       bytes of downloads in flight (states, updates): reserved when a
                         download is admitted, before its buffer exists; per peer at most a
                         share, so one peer cannot starve the rest
    disk                 bytes under the home's runs/ folder (checkpoints, manifests)
    relay                circuits relayed at once and their bytes/s, all reservations together,
                         and reservations per IP prefix (node/nat/relays/hop.py takes them)

Connections are counted from the host's live table at each arrival rather than by our own
bookkeeping: py-libp2p misses disconnect events of peers that die abruptly
(docs/libp2p-notes.md), and a count that only grows would lock every peer out. The newest
connection over a limit is closed.
"""

from __future__ import annotations

import ipaddress
import logging
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict

from libp2p.abc import IHost, INetConn, INetwork

from ..errors import BudgetExceeded
from .notifee import ConnectionEvents

log = logging.getLogger(__name__)

MiB = 1 << 20
GiB = 1 << 30


@dataclass(frozen=True, slots=True, kw_only=True)
class BudgetLimits:
    connections: int = 256
    connections_per_peer: int = 4
    connections_per_prefix: int = 32
    receive_memory: int = 2 * GiB
    receive_memory_per_peer: int = 512 * MiB
    disk: int = 20 * GiB
    relay_circuits: int = 32
    relay_bandwidth: int = 32_000_000  # bytes/s
    relay_reservations_per_prefix: int = 4

    @classmethod
    def of(cls, config: Any) -> BudgetLimits:
        """From a NodeConfig's `budget_*` fields (those it has; defaults for the rest)."""
        fields = {
            f: getattr(config, f"budget_{f}")
            for f in cls.__dataclass_fields__
            if hasattr(config, f"budget_{f}")
        }
        return cls(**fields)


def ip_prefix(ip: str) -> str:
    """The block one party plausibly controls: /24 of IPv4, /48 of IPv6."""
    address = ipaddress.ip_address(ip)
    bits = 24 if address.version == 4 else 48
    return str(ipaddress.ip_network(f"{ip}/{bits}", strict=False))


class ResourceBudget:
    """Receive memory and disk accounting; connection limits through `ConnectionGate`."""

    def __init__(self, limits: BudgetLimits | None = None, *, home: Path | None = None) -> None:
        self.limits = limits or BudgetLimits()
        self.home = home
        self._memory: Counter[str] = Counter()  # peer → bytes reserved
        self.relay_circuits = 0  # circuits relayed now (hop.py counts them)
        self.refused: Counter[str] = Counter()  # resource → refusals

    @contextmanager
    def receive_memory(self, peer: str, nbytes: int) -> Iterator[None]:
        """Hold `nbytes` of receive memory for a download from `peer` while the block runs."""
        self.reserve_memory(peer, nbytes)
        try:
            yield
        finally:
            self.release_memory(peer, nbytes)

    def reserve_memory(self, peer: str, nbytes: int) -> None:
        if nbytes < 0:
            raise ValueError("a reservation is a non-negative number of bytes")
        total = sum(self._memory.values())
        if total + nbytes > self.limits.receive_memory:
            self.refused["receive_memory"] += 1
            raise BudgetExceeded(
                f"receive memory: {nbytes} bytes more would exceed the daemon's "
                f"{self.limits.receive_memory} ({total} in use)"
            )
        if self._memory[peer] + nbytes > self.limits.receive_memory_per_peer:
            self.refused["receive_memory_per_peer"] += 1
            raise BudgetExceeded(
                f"receive memory: {peer} would hold over "
                f"{self.limits.receive_memory_per_peer} bytes of downloads"
            )
        self._memory[peer] += nbytes

    def release_memory(self, peer: str, nbytes: int) -> None:
        self._memory[peer] -= nbytes
        if self._memory[peer] <= 0:
            del self._memory[peer]

    def check_disk(self, nbytes: int) -> None:
        """Refuse to write `nbytes` more under the home's runs/ when that exceeds the budget."""
        used = self.disk_used()
        if used + nbytes > self.limits.disk:
            self.refused["disk"] += 1
            raise BudgetExceeded(
                f"disk: writing {nbytes} bytes would exceed the {self.limits.disk}-byte budget "
                f"for runs ({used} used)"
            )

    def disk_used(self) -> int:
        if self.home is None or not (self.home / "runs").exists():
            return 0
        return sum(p.stat().st_size for p in (self.home / "runs").rglob("*") if p.is_file())

    def usage(self, connections: ConnectionCounts | None = None) -> BudgetUsage:
        """What `status --json` shows under `budget`: usage beside each limit."""
        return BudgetUsage(
            limits={f: getattr(self.limits, f) for f in self.limits.__dataclass_fields__},
            receive_memory=sum(self._memory.values()),
            receive_memory_peers=len(self._memory),
            relay_circuits=self.relay_circuits,
            connections=dict(connections or {}),
            refused=dict(self.refused),
        )


class BudgetUsage(TypedDict):
    """`status["budget"]`: each limit (BudgetLimits' fields) and what is used of it."""

    limits: dict[str, int]
    receive_memory: int  # bytes reserved by downloads in flight
    receive_memory_peers: int
    relay_circuits: int  # circuits relayed now
    connections: dict[str, int]  # ConnectionGate.counts()
    refused: dict[str, int]  # by the limit that refused


class ConnectionCounts(TypedDict):
    total: int
    peers: int
    max_per_peer: int
    max_per_prefix: int


class ConnectionGate(ConnectionEvents):
    """Closes a new connection that takes the host over a connection limit."""

    def __init__(self, host: IHost, budget: ResourceBudget) -> None:
        self.host = host
        self.budget = budget

    def counts(self) -> ConnectionCounts:
        conns = self._connections()
        peers = Counter(peer for peer, _ in conns)
        prefixes = Counter(prefix for _, prefix in conns if prefix)
        return ConnectionCounts(
            total=len(conns),
            peers=len(peers),
            max_per_peer=max(peers.values(), default=0),
            max_per_prefix=max(prefixes.values(), default=0),
        )

    async def connected(self, network: INetwork, conn: INetConn) -> None:
        reason = self._over_limit(conn)
        if reason is None:
            return
        self.budget.refused[reason] += 1
        log.info("closing a connection from %s: %s", conn.muxed_conn.peer_id, reason)
        try:
            await conn.close()
        except Exception as exc:  # noqa: BLE001 - a connection that went already is what we want
            log.debug("closing an over-limit connection: %s", exc)

    def _over_limit(self, conn: INetConn) -> str | None:
        limits = self.budget.limits
        conns = self._connections()
        peer = conn.muxed_conn.peer_id.to_base58()
        prefix = prefix_of(conn)
        if len(conns) > limits.connections:
            return "connections"
        if sum(1 for p, _ in conns if p == peer) > limits.connections_per_peer:
            return "connections_per_peer"
        if prefix and not is_local(prefix):
            if sum(1 for _, x in conns if x == prefix) > limits.connections_per_prefix:
                return "connections_per_prefix"
        return None

    def _connections(self) -> list[tuple[str, str | None]]:
        out = []
        for peer, conns in list(self.host.get_network().connections.items()):
            items = conns if isinstance(conns, list) else [conns]
            out += [(peer.to_base58(), prefix_of(c)) for c in items]
        return out


def prefix_of(conn: INetConn) -> str | None:
    """The remote IP's prefix, when the connection says where it comes from."""
    try:
        maddr = conn.muxed_conn.secured_conn.get_remote_address()  # type: ignore[attr-defined]
        ip = maddr[0] if isinstance(maddr, tuple) else None
        return ip_prefix(ip) if ip else None
    except Exception:  # noqa: BLE001 - relayed and exotic connections have no plain IP
        return None


def is_local(prefix: str) -> bool:
    """Loopback and private blocks are one machine or one LAN: test swarms live there."""
    network = ipaddress.ip_network(prefix)
    return network.is_loopback or network.is_private
