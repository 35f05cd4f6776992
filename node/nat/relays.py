"""Circuit relay v2 in the daemon: a bounded hop for others when public, reservations when not.

What py-libp2p 0.8.1 gives and what we add (LIBP2P-NOTES.md):
- `CircuitV2Protocol` serves the hop (relay for others) and the stop side (accept circuits).
  Every node runs the stop side; the hop is switched on only once our own dial-back check
  says "public": a NATed relay is useless to strangers and a trap for whoever picks it.
  Its limits are explicit (NodeConfig `relay_*`); its bandwidth cap is defined upstream but
  never enforced, so `PacedRelay` paces every relayed read itself. Upstream also keeps a
  circuit's streams in a table keyed by *peer*, and a circuit that ends closes whatever that
  table holds for its peer: the streams of another, live circuit to the same peer (a redial
  after a reset, or a second source). Each redial was torn down by the end of the circuit it
  replaced, and one transfer's end cut another's. `PacedRelay` closes each circuit's own
  streams instead.
- Its `RelayDiscovery` reserves only every 5 minutes. `ReservationKeeper` reserves on `want`
  public peers as soon as we are known to be private, and replaces a relay whose connection
  ends (checked every second), or that stops answering pings (every PING_EVERY s: a relay
  that vanished without closing its connection would otherwise be noticed only when TCP gives
  up, after minutes). Circuit addresses go to `on_circuits`: the daemon puts them in our DHT
  peer record, because identify mangles them.
- `host.connect()` refuses circuit addresses; `Dialer.connect` races direct addresses and
  circuits (through `CircuitV2Transport`) and then lets `HolePunch` upgrade a relayed
  connection by DCUtR (node/nat/hole_punch.py).
"""

from __future__ import annotations

import contextlib
import logging
import random
import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import trio
from libp2p.abc import IHost, INetConn, INetStream
from libp2p.host.ping import ID as PING
from libp2p.host.ping import perform_ping_roundtrip
from libp2p.peer.id import ID
from libp2p.peer.peerinfo import PeerInfo
from libp2p.relay.circuit_v2.protocol import PROTOCOL_ID as HOP
from libp2p.relay.circuit_v2.protocol import CircuitV2Protocol
from libp2p.relay.circuit_v2.resources import RelayLimits
from multiaddr import Multiaddr

from ..errors import ConnectError

log = logging.getLogger(__name__)

RESERVE_TIMEOUT = 5.0
REFUSED_COOLDOWN = 5.0  # a peer that refused may turn public (its own check) a moment later
CHECK_EVERY = 1.0
PING_EVERY = 10.0  # a held relay is pinged this often...
PING_TIMEOUT = 6.0  # ...and dropped when it does not answer within this: replaced in < 20 s
SILENT_COOLDOWN = 60.0  # a relay dropped for silence is not asked again for this long
CIRCUIT = "/p2p-circuit"


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
    """CircuitV2Protocol whose relayed bytes are paced to `bandwidth` per source stream.

    Upstream reads each direction of a circuit with `_read_stream_with_retry` and has no rate
    limit; sleeping after each read by its share of the budget caps both directions."""

    def __init__(self, host: IHost, *, limits: HopLimits):
        super().__init__(host, limits=limits.relay_limits(), allow_hop=False)
        self.bandwidth = limits.bandwidth
        self._next: weakref.WeakKeyDictionary[INetStream, float] = weakref.WeakKeyDictionary()
        self.relayed_bytes = 0
        self._active_relays = _Unshared()  # see the module docstring

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
        if data and self.bandwidth > 0:
            now = trio.current_time()
            due = max(self._next.get(stream, now), now) + len(data) / self.bandwidth
            self._next[stream] = due
            await trio.sleep_until(due)
        return data


class _Unshared(dict):
    """Upstream's circuit table, keyed by peer, kept empty: nothing can find another circuit's
    streams in it (upstream only reads it after checking `in`, and at shutdown, when the
    host's closing connections end every circuit anyway)."""

    def __setitem__(self, key: Any, value: Any) -> None:
        pass


@dataclass(frozen=True, slots=True, kw_only=True)
class Reservation:
    relay: str  # relay peer ID
    relay_addr: str  # /ip4/…/tcp/…/p2p/<relay>
    circuit: str  # <relay_addr>/p2p-circuit/p2p/<us>
    reserve_ms: float
    since: float  # time.time()


class ReservationKeeper:
    """Holds reservations on `want` relays among the connected peers; replaces lost ones.

    Candidates are peers we hold a direct connection to, bootstrap peers first; a peer that
    does not serve the hop (or refuses) is asked again after REFUSED_COOLDOWN. A relay whose
    connection closes is dropped at the next check (CHECK_EVERY); one that vanishes without
    closing it (power cut, cable pulled) fails a ping (`watch`): it is dropped and its
    connection closed.
    """

    def __init__(
        self,
        host: IHost,
        transport: Any,  # CircuitV2Transport
        *,
        want: int = 2,
        prefer: Sequence[ID] = (),
        on_change: Callable[[list[str]], Any] = lambda _circuits: None,
    ):
        self.host, self.transport = host, transport
        self.want = want
        self.prefer = list(prefer)
        self.on_change = on_change
        self.held: dict[ID, Reservation] = {}
        self.lost = 0
        self._refused: dict[ID, float] = {}  # bounded: pruned to connected peers each check
        self.active = False

    def circuits(self) -> list[str]:
        return [r.circuit for r in self.held.values()]

    async def run(self, nursery: trio.Nursery) -> None:
        """Keep `want` reservations while `active` (the daemon sets it from the verdict)."""
        nursery.start_soon(self.watch)
        while True:
            changed = self._drop_lost()
            if self.active and len(self.held) < self.want:
                for peer in self._candidates():
                    if len(self.held) >= self.want:
                        break
                    changed |= await self.reserve(peer, nursery)
            elif not self.active and self.held:
                self.held.clear()  # public now: reservations lapse, no circuits to publish
                changed = True
            if changed:
                self.on_change(self.circuits())
            await trio.sleep(CHECK_EVERY)

    async def watch(self) -> None:
        """Ping every held relay every PING_EVERY s; drop the silent ones."""
        while True:
            await trio.sleep(PING_EVERY)
            async with trio.open_nursery() as nursery:
                for peer in list(self.held):
                    nursery.start_soon(self._check_alive, peer)

    async def _check_alive(self, peer: ID) -> None:
        try:
            with trio.fail_after(PING_TIMEOUT):
                stream = await self.host.new_stream(peer, [PING])
                try:
                    await perform_ping_roundtrip(stream)
                finally:
                    await stream.reset()
            return
        except (Exception, trio.TooSlowError) as exc:  # silent, reset, refused: all mean gone
            reason = str(exc) or type(exc).__name__
        reservation = self.held.pop(peer, None)
        if reservation is None:  # dropped meanwhile (its connection closed)
            return
        log.warning(
            "relay: %s did not answer a ping (%s): replacing it", reservation.relay_addr, reason
        )
        self.lost += 1
        self._refused[peer] = time.monotonic() + SILENT_COOLDOWN
        self.on_change(self.circuits())
        with trio.move_on_after(PING_TIMEOUT):  # writes to a vanished peer may never finish
            for conn in list(self.host.get_network().get_connections(peer)):
                with contextlib.suppress(Exception):
                    await conn.close()

    def _drop_lost(self) -> bool:
        network = self.host.get_network()
        gone = [p for p in self.held if not _direct_conns(network.get_connections(p))]
        for peer in gone:
            log.warning(
                "relay: lost reservation on %s (connection closed)", self.held[peer].relay_addr
            )
            del self.held[peer]
            self.lost += 1
        return bool(gone)

    def _candidates(self) -> list[ID]:
        network = self.host.get_network()
        now = time.monotonic()
        connected = [
            p for p in self.host.get_connected_peers() if _direct_conns(network.get_connections(p))
        ]
        self._refused = {p: t for p, t in self._refused.items() if p in connected and t > now}
        fresh = [p for p in connected if p not in self.held and p not in self._refused]
        random.shuffle(fresh)
        return sorted(fresh, key=lambda p: p not in self.prefer)

    async def reserve(self, peer: ID, nursery: trio.Nursery) -> bool:
        relay_addr = self._relay_addr(peer)
        if relay_addr is None:
            return False
        started = time.perf_counter()
        try:
            with trio.fail_after(RESERVE_TIMEOUT):
                stream = await self.host.new_stream(peer, [HOP])
                ok = await self.transport.reserve(stream, peer, nursery)
        except Exception as exc:  # no hop protocol (not public, or an old node), gone, slow
            log.debug("relay: %s gives no reservation: %s", peer, exc)
            ok = False
        if not ok:
            self._refused[peer] = time.monotonic() + REFUSED_COOLDOWN
            return False
        ms = round((time.perf_counter() - started) * 1000, 1)
        circuit = f"{relay_addr}{CIRCUIT}/p2p/{self.host.get_id().to_base58()}"
        self.held[peer] = Reservation(
            relay=peer.to_base58(),
            relay_addr=relay_addr,
            circuit=circuit,
            reserve_ms=ms,
            since=time.time(),
        )
        log.info("relay: reservation on %s in %.0f ms", relay_addr, ms)
        return True

    def _relay_addr(self, peer: ID) -> str | None:
        """The address we reach the relay at: its listen address on the IP our connection goes
        to (an outbound connection's remote port is its listen port; an inbound one's is not)."""
        conns = _direct_conns(self.host.get_network().get_connections(peer))
        if not conns:
            return None
        remote = _remote_of(conns[0])
        listen = [str(a) for a in _peerstore_addrs(self.host, peer) if CIRCUIT not in str(a)]
        ip = remote.value_for_protocol("ip4") if remote is not None else None
        same_ip = [a for a in listen if ip and f"/ip4/{ip}/" in a + "/"]
        chosen = (
            same_ip[0]
            if same_ip
            else (str(remote) if remote is not None and _is_outbound(conns[0]) else None)
        )
        if chosen is None:
            return None
        chosen = chosen.split("/p2p/")[0]
        return f"{chosen}/p2p/{peer.to_base58()}"

    def status(self) -> list[dict[str, Any]]:
        return [
            {
                "relay": r.relay,
                "addr": r.relay_addr,
                "circuit": r.circuit,
                "reserve_ms": r.reserve_ms,
                "since": r.since,
            }
            for r in self.held.values()
        ]


class Dialer:
    """Connects to a peer at whichever of its addresses works: direct ones and circuits race."""

    def __init__(self, host: IHost, transport: Any, *, timeout: float = 10.0):
        self.host, self.transport, self.timeout = host, transport, timeout

    async def connect(self, peer: ID, addrs: Sequence[Multiaddr]) -> tuple[str, Multiaddr | None]:
        """("direct" | "relayed", the circuit it came through) for the first connection that
        came up; raise ConnectError."""
        direct = [a for a in addrs if CIRCUIT not in str(a)]
        circuits = [_to_peer(a, peer) for a in addrs if CIRCUIT in str(a)]
        if self.host.get_network().get_connections(peer):
            return connection_kind(self.host, peer) or "direct", None
        won: list[tuple[str, Multiaddr | None]] = []
        errors: list[str] = []

        async def attempt(addr: Multiaddr) -> None:
            relayed = CIRCUIT in str(addr)
            try:
                if relayed:
                    await self.dial_circuit(addr)
                else:  # this address only: host.connect would dial every peerstore address
                    await self.host.get_network().dial_addr(addr, peer)
            except Exception as exc:  # py-libp2p raises many types for failed dials
                log.debug("dialing %s at %s: %r", peer, addr, exc)
                errors.append(f"{addr}: {exc or type(exc).__name__}")
                return
            won.append(("relayed", addr) if relayed else ("direct", None))
            nursery.cancel_scope.cancel()

        # all at once: an address behind a NAT or in another LAN is dropped silently and would
        # hold a sequential dial for the whole dial timeout
        with trio.move_on_after(self.timeout):
            async with trio.open_nursery() as nursery:
                for addr in [*direct, *circuits]:
                    nursery.start_soon(attempt, addr)
        if won:
            return won[0]
        shown = ", ".join(str(a) for a in addrs) or "no addresses"
        raise ConnectError(
            f"could not connect to {peer} at {shown}: {'; '.join(errors) or 'timed out'}"
        )

    async def dial_circuit(self, circuit: Multiaddr) -> INetConn:
        """Connect to the relay (if needed), then to the peer behind it through the relay."""
        relay_part = str(circuit).split(CIRCUIT)[0]
        relay_addr, _, relay_id = relay_part.rpartition("/p2p/")
        relay = ID.from_base58(relay_id)
        if not self.host.get_network().get_connections(relay):
            await self.host.connect(PeerInfo(relay, [Multiaddr(relay_addr)]))
        return await self.transport.dial(circuit)


def _to_peer(circuit: Multiaddr, peer: ID) -> Multiaddr:
    """`<relay>/p2p-circuit/p2p/<peer>`: records and lookups may drop the trailing peer ID."""
    text = str(circuit)
    return (
        circuit
        if text.endswith(f"{CIRCUIT}/p2p/{peer}")
        else Multiaddr(f"{text.split(CIRCUIT)[0]}{CIRCUIT}/p2p/{peer}")
    )


def connection_kind(host: IHost, peer: ID) -> str | None:
    """ "direct" when any connection to `peer` is direct, "relayed" when all run through a relay,
    None when not connected."""
    conns = host.get_network().get_connections(peer)
    if not conns:
        return None
    return "direct" if _direct_conns(conns) else "relayed"


def connections_by_kind(host: IHost) -> dict[str, str]:
    out = {}
    for peer in host.get_connected_peers():
        kind = connection_kind(host, peer)
        if kind:
            out[peer.to_base58()] = kind
    return out


def _is_relayed(conn: INetConn) -> bool:
    try:
        addrs = [str(a) for a in conn.get_transport_addresses()]
    except Exception:  # a closing connection
        return False
    return bool(addrs) and all(CIRCUIT in a for a in addrs)


def _direct_conns(conns: Sequence[INetConn]) -> list[INetConn]:
    return [c for c in conns if not _is_relayed(c)]


def _remote_of(conn: INetConn) -> Multiaddr | None:
    try:
        addrs = conn.get_transport_addresses()
    except Exception:
        return None
    return addrs[0] if addrs else None


def _is_outbound(conn: INetConn) -> bool:
    muxed = getattr(conn, "muxed_conn", None)
    return bool(getattr(muxed, "is_initiator", False))


def _peerstore_addrs(host: IHost, peer: ID) -> list[Multiaddr]:
    try:
        return list(host.get_peerstore().addrs(peer))
    except Exception:  # unknown or expired peer
        return []
