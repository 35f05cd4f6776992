"""From a relayed connection to a direct one: DCUtR, and the circuit back when a punch fails.

py-libp2p 0.8.1's `DCUtRProtocol` punches by TCP simultaneous open from our listen port
(docs/libp2p-notes.md: about 1 s between port-preserving NATs, never through a symmetric one). Its
service also starts punches by itself for relayed peers every 2 s; we start one at once after
dialing a circuit, bounded by `budget`. A relayed connection sometimes closed during failed
attempts (about 1 in 4 with a symmetric NAT; at least some of those were the relay closing one
circuit for another's end, fixed in node/nat/relays/hop.py): then we dial the circuit again, and
keep watching for `watch` seconds, so the peer we just reached is not lost.

Before punching, upstream first dials every direct address it knows for the peer ("step 0",
in case it is reachable after all) and waits for all of them, up to its 10 s dial timeout. A
NATed peer's known addresses include its LAN address, whose SYNs vanish: every punch between
cone NATs took 10.1 s, of which the punch itself took 20 ms. `QuickDCUtR` bounds that step to
`UNILATERAL_TIMEOUT` and ends it at the first direct connection (our `RacingDialer` has raced
those addresses moments before anyway).
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from dataclasses import asdict, dataclass
from typing import Any

import trio
from libp2p.abc import IHost
from libp2p.peer.id import ID
from libp2p.relay.circuit_v2.dcutr import DCUtRProtocol
from multiaddr import Multiaddr

from ..net.connections import CIRCUIT, connection_kind, peerstore_addrs
from .relays import RacingDialer

log = logging.getLogger(__name__)

MAX_REMEMBERED = 64
UNILATERAL_TIMEOUT = 0.5  # seconds for DCUtR's plain direct dial before the punch


class QuickDCUtR(DCUtRProtocol):
    """py-libp2p's DCUtR with a bounded step 0 (see the module docstring)."""

    unilateral_timeout = UNILATERAL_TIMEOUT

    async def _try_unilateral_upgrade(self, peer_id: ID) -> bool:
        addrs = [a for a in peerstore_addrs(self.host, peer_id) if CIRCUIT not in str(a)]
        if not addrs:  # unknown or expired peer: nothing to dial
            return False
        with trio.move_on_after(self.unilateral_timeout):
            async with trio.open_nursery() as nursery:
                for addr in addrs:
                    nursery.start_soon(self._dial_peer, peer_id, addr)
                # libp2p signals no event when a direct connection appears: poll it
                while not await self._verify_direct_connection(peer_id):  # noqa: ASYNC110
                    await trio.sleep(0.05)
                nursery.cancel_scope.cancel()
        return await self._verify_direct_connection(peer_id)


@dataclass(frozen=True, slots=True, kw_only=True)
class PunchResult:
    peer: str
    direct: bool
    punch_s: float
    redials: int
    at: float  # time.time()

    def as_dict(self) -> dict[str, Any]:
        """The shape `peertrain status --json` shows under reachability.hole_punches."""
        return asdict(self)


class HolePunch:
    """Upgrades relayed connections we dialed; remembers the outcome per peer (bounded)."""

    def __init__(
        self,
        host: IHost,
        dcutr: Any,
        dialer: RacingDialer,
        *,
        budget: float = 20.0,
        watch: float = 60.0,
    ):
        self.host, self.dcutr, self.dialer = host, dcutr, dialer
        self.budget, self.watch = budget, watch
        self.results: OrderedDict[str, PunchResult] = OrderedDict()
        self._active: set[ID] = set()  # bounded by the peers we dial through circuits

    def start(self, nursery: trio.Nursery, peer: ID, circuit: Multiaddr) -> None:
        if peer not in self._active:
            self._active.add(peer)
            nursery.start_soon(self._upgrade, peer, circuit)

    async def _upgrade(self, peer: ID, circuit: Multiaddr) -> None:
        try:
            started = time.monotonic()
            redials = await self._punch(peer, circuit)
            kind = connection_kind(self.host, peer)
            self._remember(
                PunchResult(
                    peer=peer.to_base58(),
                    direct=kind == "direct",
                    punch_s=round(time.monotonic() - started, 2),
                    redials=redials,
                    at=time.time(),
                )
            )
            log.info(
                "hole punch to %s: %s after %.1f s",
                peer,
                kind or "not connected",
                time.monotonic() - started,
            )
            await self._keep_reachable(peer, circuit, until=started + self.watch)
        finally:
            self._active.discard(peer)

    async def _punch(self, peer: ID, circuit: Multiaddr) -> int:
        """DCUtR for at most `budget` s; meanwhile, a relayed connection that a failed attempt
        closed is dialed again at once (an attempt through a symmetric NAT can last 20-50 s)."""
        redials = 0

        async def attempts() -> None:
            while connection_kind(self.host, peer) != "direct":
                try:
                    if await self.dcutr.initiate_hole_punch(peer):
                        break
                except Exception as exc:  # noqa: BLE001 - upstream's DCUtR raises many types
                    # for a failed attempt; the next one follows until `budget` runs out
                    log.debug("hole punch to %s: %s", peer, exc)
                await trio.sleep(0.5)
            nursery.cancel_scope.cancel()

        async def keep_circuit() -> None:
            nonlocal redials
            while True:
                if connection_kind(self.host, peer) is None:
                    redials += await self._redial(peer, circuit)
                await trio.sleep(0.5)

        with trio.move_on_after(self.budget):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(attempts)
                nursery.start_soon(keep_circuit)
        if connection_kind(self.host, peer) is None:
            redials += await self._redial(peer, circuit)
        return redials

    async def _keep_reachable(self, peer: ID, circuit: Multiaddr, *, until: float) -> None:
        while time.monotonic() < until and connection_kind(self.host, peer) != "direct":
            if connection_kind(self.host, peer) is None:
                await self._redial(peer, circuit)
            await trio.sleep(1.0)

    async def _redial(self, peer: ID, circuit: Multiaddr) -> int:
        log.info("hole punch to %s closed the relayed connection: dialing the circuit again", peer)
        try:
            with trio.fail_after(self.dialer.timeout):
                await self.dialer.dial_circuit(circuit)
            return 1
        except Exception as exc:  # noqa: BLE001 - relay gone too (a failed dial, any type):
            # logged at warning; the joiner's own retry loop takes over
            log.warning("redialing %s through %s failed: %s", peer, circuit, exc)
            return 0

    def _remember(self, result: PunchResult) -> None:
        self.results[result.peer] = result
        self.results.move_to_end(result.peer)
        while len(self.results) > MAX_REMEMBERED:
            self.results.popitem(last=False)

    def status(self) -> dict[str, PunchResult]:
        """The latest punch per peer (base58 ID), oldest first."""
        return dict(self.results)
