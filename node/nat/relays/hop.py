"""The hop side of circuit relay v2: a public node relays for peers behind NAT, within limits.

py-libp2p's `CircuitV2Protocol` serves the hop (relay for others) and the stop side (accept
circuits). Every node runs the stop side; the hop is switched on only once our own dial-back
check says "public": a NATed relay is useless to strangers and a trap for whoever picks it.
Its limits are explicit (NodeConfig `relay_*`); its bandwidth cap is defined upstream but never
enforced, so `PacedRelay` paces every relayed read itself. Upstream also keeps a circuit's
streams in a table keyed by *peer*, and a circuit that ends closes whatever that table holds
for its peer: the streams of another, live circuit to the same peer (a redial after a reset, or
a second source). Each redial was torn down by the end of the circuit it replaced, and one
transfer's end cut another's. `PacedRelay` closes each circuit's own streams instead.

Upstream also grants a reservation to whatever peer ID the RESERVE names and keeps it an hour
after its holder has gone, so one stranger could fill the table. Here a reservation is only for
the peer asking, lasts while it is connected, and one IP prefix holds a few; circuits at once
and relayed bytes/s are bounded in total by the daemon's budget (node/net/budget.py).
"""

from __future__ import annotations

import logging
import weakref
from dataclasses import dataclass
from typing import Any

import trio
from libp2p.abc import IHost, INetStream
from libp2p.peer.id import ID
from libp2p.relay.circuit_v2.pb.circuit_pb2 import HopMessage
from libp2p.relay.circuit_v2.protocol import PROTOCOL_ID as HOP
from libp2p.relay.circuit_v2.protocol import CircuitV2Protocol
from libp2p.relay.circuit_v2.protocol_buffer import StatusCode
from libp2p.relay.circuit_v2.resources import RelayLimits

from ...net.budget import ResourceBudget, is_local, prefix_of
from ...net.streams import close_quietly

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class HopLimits:
    """What a public node grants strangers (NodeConfig `relay_*`)."""

    reservations: int = 64
    circuits: int = 8
    duration: float = 600.0
    data: int = 1 << 30
    bandwidth: float = 16e6  # bytes/s per direction of one relayed connection; 0: no cap
    reservation_ttl: int = 3600

    @classmethod
    def of(cls, config: Any) -> HopLimits:
        """From NodeConfig's `relay_*` options."""
        return cls(
            reservations=config.relay_reservations,
            circuits=config.relay_circuits,
            duration=config.relay_duration,
            data=config.relay_data,
            bandwidth=config.relay_bandwidth,
        )

    def relay_limits(self) -> RelayLimits:
        return RelayLimits(
            duration=int(self.duration),
            data=self.data,
            max_circuit_conns=self.circuits,
            max_reservations=self.reservations,
            reservation_ttl=self.reservation_ttl,
        )


class PacedRelay(CircuitV2Protocol):
    """CircuitV2Protocol whose relayed bytes are paced to `bandwidth` per source stream and to the
    budget's `relay_bandwidth` in all, with bounded reservations and circuits (module docstring).

    Upstream reads each direction of a circuit with `_read_stream_with_retry` and has no rate
    limit; sleeping after each read by its share of the budget caps both directions."""

    def __init__(self, host: IHost, *, limits: HopLimits, budget: ResourceBudget | None = None):
        super().__init__(host, limits=limits.relay_limits(), allow_hop=False)
        self.bandwidth = limits.bandwidth
        self.budget = budget or ResourceBudget()
        self._next: weakref.WeakKeyDictionary[INetStream, float] = weakref.WeakKeyDictionary()
        self._next_all = 0.0  # when the relay as a whole may pass its next bytes
        self.relayed_bytes = 0
        self._active_relays = _Unshared()  # see the module docstring

    async def _handle_reserve(self, stream: INetStream, msg: HopMessage) -> None:
        """Upstream's reservation, for the asking peer only, within the per-prefix share."""
        asker = stream.muxed_conn.peer_id
        if msg.HasField("peer") and msg.peer.id and ID(msg.peer.id) != asker:
            self.budget.refused["relay_forged_reservation"] += 1
            await self._send_status(stream, StatusCode.PERMISSION_DENIED, "reserve for yourself")
            return
        self._drop_departed()
        if not self.resource_manager.has_reservation(asker) and self._prefix_full(asker):
            self.budget.refused["relay_reservations_per_prefix"] += 1
            await self._send_status(
                stream,
                StatusCode.RESOURCE_LIMIT_EXCEEDED,
                "too many reservations from your network",
            )
            return
        await super()._handle_reserve(stream, msg)

    def _drop_departed(self) -> None:
        """Reservations whose holder is gone (a reservation lives only while its holder is
        connected, per the spec): upstream keeps them for their whole TTL, filling the table."""
        table = self.resource_manager._reservations  # upstream has no public way to prune
        for peer in [p for p in table if not self.host.get_network().get_connections(p)]:
            del table[peer]

    def _prefix_full(self, asker: ID) -> bool:
        prefix = self._prefix(asker)
        if prefix is None or is_local(prefix):
            return False  # one machine or one LAN: the connection budget bounds it
        same = sum(1 for p in self.resource_manager._reservations if self._prefix(p) == prefix)
        return same >= self.budget.limits.relay_reservations_per_prefix

    def _prefix(self, peer: ID) -> str | None:
        conns = self.host.get_network().get_connections(peer)
        return prefix_of(conns[0]) if conns else None

    async def _handle_connect(self, stream: INetStream, msg: HopMessage) -> None:
        """Upstream's circuit, within the budget's total of circuits at once."""
        if self.budget.relay_circuits >= self.budget.limits.relay_circuits:
            self.budget.refused["relay_circuits"] += 1
            await self._send_status(stream, StatusCode.RESOURCE_LIMIT_EXCEEDED, "relay is full")
            # a close, not a reset: a reset right behind the status could overtake it at the
            # asker's reader, which then sees only the reset and never learns why
            await close_quietly(stream)
            return
        self.budget.relay_circuits += 1
        try:
            await super()._handle_connect(stream, msg)
        finally:
            self.budget.relay_circuits -= 1

    async def _relay_data(
        self, src_stream: INetStream, dst_stream: INetStream, *args: Any, **kwargs: Any
    ) -> None:
        """One direction of a circuit; when it ends, the circuit's own two streams close
        (upstream closed the streams its per-peer table held, maybe another circuit's)."""
        try:
            await super()._relay_data(src_stream, dst_stream, *args, **kwargs)
        finally:
            await self._close_stream(src_stream)
            await self._close_stream(dst_stream)

    def enable_hop(self) -> None:
        """Serve as a relay from now on (the stop side always runs)."""
        if not self.allow_hop:
            self.allow_hop = True
            self.host.set_stream_handler(HOP, self._handle_hop_stream)
            log.info("relay: serving circuit relay v2 for peers behind NAT")

    def disable_hop(self) -> None:
        if self.allow_hop:
            self.allow_hop = False
            self.host.remove_stream_handler(HOP)

    async def _read_stream_with_retry(self, stream: INetStream, *args: Any, **kwargs: Any) -> Any:
        data = await super()._read_stream_with_retry(stream, *args, **kwargs)
        if data:
            self.relayed_bytes += len(data)
        if data:
            await trio.sleep_until(self._due(stream, len(data)))
        return data

    def _due(self, stream: INetStream, nbytes: int) -> float:
        """When `nbytes` just read may go on: after this stream's share of `bandwidth` and the
        relay's share of the budget's total, whichever is later."""
        now = trio.current_time()
        due = now
        if self.bandwidth > 0:
            due = max(self._next.get(stream, now), now) + nbytes / self.bandwidth
            self._next[stream] = due
        total = self.budget.limits.relay_bandwidth
        if total > 0:
            self._next_all = max(self._next_all, now) + nbytes / total
            due = max(due, self._next_all)
        return due


class _Unshared(dict):
    """Upstream's circuit table, keyed by peer, kept empty: nothing can find another circuit's
    streams in it (upstream only reads it after checking `in`, and at shutdown, when the
    host's closing connections end every circuit anyway)."""

    def __setitem__(self, key: Any, value: Any) -> None:
        pass
