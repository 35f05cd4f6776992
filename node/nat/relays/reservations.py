"""Reservations on public peers, so that a node behind NAT can be reached through them.

py-libp2p's `RelayDiscovery` reserves only every 5 minutes. `ReservationKeeper` reserves on
`want` public peers as soon as we are known to be private, and replaces a relay whose
connection ends (checked every second), or that stops answering pings (every PING_EVERY s: a
relay that vanished without closing its connection would otherwise be noticed only when TCP
gives up, after minutes). Circuit addresses go to `on_change`: the daemon puts them in our DHT
peer record, because identify mangles them (docs/libp2p-notes.md).
"""

from __future__ import annotations

import contextlib
import logging
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import trio
from libp2p.abc import IHost
from libp2p.host.ping import ID as PING
from libp2p.host.ping import perform_ping_roundtrip
from libp2p.peer.id import ID
from libp2p.relay.circuit_v2.protocol import PROTOCOL_ID as HOP

from ...net.connections import CIRCUIT, direct_conns, is_outbound, peerstore_addrs, remote_addr
from ...net.streams import reset_quietly

log = logging.getLogger(__name__)

RESERVE_TIMEOUT = 5.0
REFUSED_COOLDOWN = 5.0  # a peer that refused may turn public (its own check) a moment later
CHECK_EVERY = 1.0
PING_EVERY = 10.0  # a held relay is pinged this often...
PING_TIMEOUT = 6.0  # ...and dropped when it does not answer within this: replaced in < 20 s
SILENT_COOLDOWN = 60.0  # a relay dropped for silence is not asked again for this long


@dataclass(frozen=True, slots=True, kw_only=True)
class Reservation:
    relay: str  # relay peer ID
    relay_addr: str  # /ip4/…/tcp/…/p2p/<relay>
    circuit: str  # <relay_addr>/p2p-circuit/p2p/<us>
    reserve_ms: float
    since: float  # time.time()

    def as_dict(self) -> dict[str, Any]:
        """The shape `peertrain status --json` shows under reachability.relays."""
        return {
            "relay": self.relay,
            "addr": self.relay_addr,
            "circuit": self.circuit,
            "reserve_ms": self.reserve_ms,
            "since": self.since,
        }


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
        reason = await self._ping_failure(peer)
        if reason is None:
            return
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
                # closing what is already dead may raise anything; dropping it is all we want
                with contextlib.suppress(Exception):
                    await conn.close()

    async def _ping_failure(self, peer: ID) -> str | None:
        """None when `peer` answers a ping within PING_TIMEOUT, else why not."""
        try:
            with trio.fail_after(PING_TIMEOUT):
                stream = await self.host.new_stream(peer, [PING])
                try:
                    await perform_ping_roundtrip(stream)
                finally:
                    await reset_quietly(stream)
        except trio.TooSlowError:
            return "no answer in time"
        except Exception as exc:  # noqa: BLE001 - silent, reset, refused: all mean gone; the
            # caller logs the reason at warning when it drops the relay
            return str(exc) or type(exc).__name__
        return None

    def _drop_lost(self) -> bool:
        network = self.host.get_network()
        gone = [p for p in self.held if not direct_conns(network.get_connections(p))]
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
            p for p in self.host.get_connected_peers() if direct_conns(network.get_connections(p))
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
        except Exception as exc:  # noqa: BLE001 - no hop protocol (not public, or an old
            # node), gone, slow: the usual answer of a peer that is no relay; ask the next one
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
        conns = direct_conns(self.host.get_network().get_connections(peer))
        if not conns:
            return None
        remote = remote_addr(conns[0])
        listen = [str(a) for a in peerstore_addrs(self.host, peer) if CIRCUIT not in str(a)]
        ip = remote.value_for_protocol("ip4") if remote is not None else None
        same_ip = [a for a in listen if ip and f"/ip4/{ip}/" in a + "/"]
        chosen = (
            same_ip[0]
            if same_ip
            else (str(remote) if remote is not None and is_outbound(conns[0]) else None)
        )
        if chosen is None:
            return None
        chosen = chosen.split("/p2p/")[0]
        return f"{chosen}/p2p/{peer.to_base58()}"

    def status(self) -> list[Reservation]:
        return list(self.held.values())
