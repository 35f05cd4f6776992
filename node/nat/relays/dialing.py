"""Dialing a peer at whichever of its addresses works: direct addresses and circuits race.

`host.connect()` refuses circuit addresses and dials every peerstore address in turn;
`RacingDialer.connect` dials each given address on its own, circuits through
`CircuitV2Transport`, all at once, and then lets `HolePunch` upgrade a relayed connection by
DCUtR (node/nat/hole_punch.py). (dht/dialer.py's `Dialer` is the DHT's: shared, uncancellable
dials for one host.)
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import trio
from libp2p.abc import IHost, INetConn
from libp2p.peer.id import ID
from libp2p.peer.peerinfo import PeerInfo
from multiaddr import Multiaddr

from ...errors import ConnectError
from ...net.connections import CIRCUIT, connection_kind

log = logging.getLogger(__name__)


class RacingDialer:
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
            except Exception as exc:  # noqa: BLE001 - py-libp2p raises many types for a failed
                # dial; each is one address that did not work, reported in the ConnectError
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
