"""NAT traversal as one daemon service: it follows the reachability verdict and acts on it.

    verdict public  : serve circuit relay v2 (bounded hop, node/nat/relays/hop.py); DHT server mode.
    verdict private : reserve on `relays` public peers, publish the circuits in our DHT peer
                      record, ask a UPnP gateway once (node/nat/upnp.py); DHT client mode (a
                      server nobody can dial costs every lookup that reaches it a timeout).
    no verdict yet  : DHT client mode as soon as peers see us at an address we do not listen
                      on (a NAT): a "private" verdict waits for dial-backs to time out (~10 s).
    every node      : accept circuits; answer and start DCUtR hole punches; dial peers at
                      circuit addresses and upgrade them (node/nat/hole_punch.py).

`status()` is merged into `status["reachability"]`: relays held, circuit addresses, whether each
connected peer is reached directly or through a relay, hole punch outcomes, UPnP.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypedDict

import trio
from libp2p.abc import IHost
from libp2p.peer.id import ID
from multiaddr import Multiaddr

from ..net.addresses import MULTIADDR_ERRORS
from ..net.budget import ResourceBudget
from .hole_punch import HolePunch, QuickDCUtR
from .reachability import ReachabilityCheck, address_translated
from .relays import (
    CIRCUIT,
    HopLimits,
    PacedRelay,
    RacingDialer,
    ReservationKeeper,
    connections_by_kind,
)

log = logging.getLogger(__name__)

PROVISIONAL_FOR = 60.0  # seconds to watch for a translated address before any verdict


class NatStatus(TypedDict):
    """What `status["reachability"]` gets from NAT traversal (`peertrain status --json`)."""

    relays: list[dict[str, Any]]  # Reservation.as_dict() per relay held
    relays_lost: int
    relay_service: bool  # serving the hop for others
    relayed_bytes: int
    connections: dict[str, str]  # peer → "direct" | "relayed"
    hole_punches: dict[str, dict[str, Any]]  # peer → PunchResult.as_dict()
    upnp: str | None


class NatTraversal:
    def __init__(
        self,
        host: IHost,
        reachability: ReachabilityCheck,
        *,
        limits: HopLimits,
        budget: ResourceBudget | None = None,
        relays: int = 2,
        prefer: Sequence[ID] = (),
        upnp: bool = True,
        publish: Callable[[list[str]], Awaitable[Any]] | None = None,
        dial_timeout: float = 10.0,
        dht_server: Callable[[bool], Awaitable[Any]] | None = None,
    ):
        self.host, self.reachability = host, reachability
        self.limits, self.want, self.prefer = limits, relays, list(prefer)
        self.budget = budget
        self.use_upnp, self.publish = upnp, publish
        self.dial_timeout = dial_timeout
        self.dht_server = dht_server
        self.relay: PacedRelay | None = None
        self.keeper: ReservationKeeper | None = None
        self.dialer: RacingDialer | None = None
        self.punch: HolePunch | None = None
        self.upnp_text: str | None = None
        self._nursery: trio.Nursery | None = None
        self._published: list[str] = []
        reachability.circuits = self.circuits

    def circuits(self) -> list[str]:
        return self.keeper.circuits() if self.keeper else []

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        # imported here: the relay and DCUtR modules are only needed once the daemon runs them
        from libp2p.relay.circuit_v2.config import RelayConfig
        from libp2p.relay.circuit_v2.transport import CircuitV2Transport
        from libp2p.tools.anyio_service import background_trio_service

        self.relay = PacedRelay(self.host, limits=self.limits, budget=self.budget)
        dcutr = QuickDCUtR(self.host)
        async with (
            background_trio_service(self.relay),
            background_trio_service(dcutr),
            trio.open_nursery() as nursery,
        ):
            self._nursery = nursery
            transport = CircuitV2Transport(self.host, self.relay, RelayConfig())
            self.keeper = ReservationKeeper(
                self.host,
                transport,
                want=self.want,
                prefer=self.prefer,
                on_change=self._circuits_changed,
            )
            self.dialer = RacingDialer(self.host, transport, timeout=self.dial_timeout)
            self.punch = HolePunch(self.host, dcutr, self.dialer)
            nursery.start_soon(self.keeper.run, nursery)
            nursery.start_soon(self._client_while_translated)
            task_status.started()
            await self._follow_verdicts(nursery)

    async def _follow_verdicts(self, nursery: trio.Nursery) -> None:
        assert self.relay is not None and self.keeper is not None
        upnp_asked = False
        verdict = self.reachability.current
        while True:
            if verdict.status == "public":
                self.relay.enable_hop()
                self.keeper.active = False
            elif verdict.status == "private":
                self.relay.disable_hop()
                self.keeper.active = self.want > 0
                if self.use_upnp and not upnp_asked:
                    upnp_asked = True
                    nursery.start_soon(self._try_upnp)
            if self.dht_server is not None and verdict.status in ("public", "private"):
                nursery.start_soon(self.dht_server, verdict.status == "public")
            self._publish()
            verdict = await self.reachability.wait_changed()

    async def _client_while_translated(self) -> None:
        """Before the first verdict, a node behind a NAT is most likely not dialable: it turns
        DHT client at its first observed address instead of being handed out as a server for
        the ~10 s its verdict takes. A "public" verdict (a forwarded port) makes it serve."""
        if self.dht_server is None:
            return
        with trio.move_on_after(PROVISIONAL_FOR):
            while self.reachability.current.status == "unknown":
                if address_translated(self.host):
                    log.info("peers see us through a NAT: DHT client until dial-backs say more")
                    await self.dht_server(False)
                    return
                await trio.sleep(0.2)

    def _circuits_changed(self, _circuits: list[str]) -> None:
        self.reachability.circuits_changed()  # a new verdict text, which _follow_verdicts publishes

    def _publish(self) -> None:
        """Our peer record gets what the host cannot advertise: addresses peers dialed us back
        at (a forwarded port), then circuits."""
        addrs = [*self.reachability.current.addrs, *self.circuits()]
        if self.publish is not None and self._nursery is not None and addrs != self._published:
            self._published = addrs
            self._nursery.start_soon(self.publish, addrs)

    async def _try_upnp(self) -> None:
        from .upnp import map_port

        listen = [a for a in self.host.get_addrs() if CIRCUIT not in str(a)]
        try:
            addr = listen[0]
            ip, port = addr.value_for_protocol("ip4"), int(addr.value_for_protocol("tcp"))
        except (IndexError, *MULTIADDR_ERRORS):  # no IPv4 TCP listen address: nothing to map
            self.upnp_text = "UPnP: no IPv4 TCP listen address to map"
            return
        result = await map_port(ip, port)
        self.upnp_text = result.text
        if result.mapped:  # the next dial-back check can now reach us: ask at once
            await self.reachability.check()

    async def connect(self, peer: ID, addrs: Sequence[Multiaddr]) -> str:
        """Connect to `peer` directly or through a circuit; upgrade a relayed connection."""
        assert self.dialer is not None and self.punch is not None and self._nursery is not None
        kind, circuit = await self.dialer.connect(peer, addrs)
        if circuit is not None:
            self.punch.start(self._nursery, peer, circuit)
        return kind

    def status(self) -> NatStatus:
        held = self.keeper.status() if self.keeper else []
        punches = self.punch.status() if self.punch else {}
        return NatStatus(
            relays=[r.as_dict() for r in held],
            relays_lost=self.keeper.lost if self.keeper else 0,
            relay_service=bool(self.relay and self.relay.allow_hop),
            relayed_bytes=self.relay.relayed_bytes if self.relay else 0,
            connections=connections_by_kind(self.host),
            hole_punches={peer: r.as_dict() for peer, r in punches.items()},
            upnp=self.upnp_text,
        )
