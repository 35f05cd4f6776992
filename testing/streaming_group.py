"""StreamingGroup: a Streaming DiLoCo group in one thread, with the overlap τ simulated exactly.

Members step in lockstep. When a fragment is due every member encodes it; the payloads are held
back and delivered τ inner steps later (what a network that needs τ steps' time for the exchange
does), then every member applies the fragment's outer step. Bytes are counted per exchange, so a
benchmark can read the peak a member's uplink sees at once. `fragment_gossip` puts a member's
fragments on real update gossip over a MemoryRouter instead, for a `StreamingLoop`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import trio
from libp2p.crypto.keys import KeyPair
from libp2p.peer.id import ID
from peertrain.swarm.diloco.group.streaming_loop import FragmentExchange
from peertrain.swarm.diloco.member.streaming import FragmentReport, StreamingMember
from peertrain.swarm.exchange.codec import Payload
from peertrain.swarm.exchange.gossip import UpdateGossip
from peertrain.swarm.exchange.interface import Contribution

from .memory_router import MemoryRouter


@dataclass(frozen=True, slots=True)
class _InFlight:
    lands_at: int  # inner step after which the outer step is applied
    slot: int
    contributions: tuple[Contribution, ...]


class StreamingGroup:
    def __init__(
        self, members: Sequence[StreamingMember], names: Sequence[str] | None = None
    ) -> None:
        self.members = list(members)
        self.names = (
            list(names) if names is not None else [f"member-{i:03d}" for i in range(len(members))]
        )
        self.overlap = self.members[0].config.overlap
        self.bytes_sent = 0  # payload bytes published by all members
        self.peak_exchange_bytes = 0  # the largest payload one member sent in one exchange
        self.reports: list[list[FragmentReport]] = []  # per landed slot, one per member
        self._in_flight: list[_InFlight] = []

    @property
    def step(self) -> int:
        return self.members[0].inner.step

    def run(self, steps: int) -> None:
        """`steps` more inner steps, with every exchange due (and landing) on the way."""
        end = self.step + steps
        while self.step < end:
            for member in self.members:
                member.train(1)
            self._send_due()
            self._land_due()

    def finish(self) -> None:
        """Land what is still in flight (the end of training: no more inner steps to hide it)."""
        for flight in self._in_flight:
            self._land(flight)
        self._in_flight.clear()

    def _send_due(self) -> None:
        slot = self.members[0].due()
        if slot is None:
            return
        payloads = [member.prepare_fragment(slot) for member in self.members]
        self.bytes_sent += sum(len(p) for p in payloads)
        self.peak_exchange_bytes = max(self.peak_exchange_bytes, *(len(p) for p in payloads))
        contributions = tuple(
            Contribution(sender=n, payload=bytes(p))
            for n, p in zip(self.names, payloads, strict=True)
        )
        self._in_flight.append(_InFlight(self.step + self.overlap, slot, contributions))

    def _land_due(self) -> None:
        while self._in_flight and self._in_flight[0].lands_at <= self.step:
            self._land(self._in_flight.pop(0))

    def _land(self, flight: _InFlight) -> None:
        self.reports.append(
            [m.apply_fragment(flight.slot, flight.contributions) for m in self.members]
        )


def fragment_gossip(
    router: MemoryRouter, member: StreamingMember, key: KeyPair, peers: set[str], *, topic: str
) -> tuple[UpdateGossip, FragmentExchange]:
    """`member`'s update gossip on `router` (every slot's update sized as its fragment's, all of
    `peers` expected) and the exchange a `StreamingLoop` calls with it."""
    endpoint = router.endpoint(ID.from_pubkey(key.public_key).to_base58())
    gossip = UpdateGossip(
        run_id=topic,
        key_pair=key,
        transport=endpoint.group(topic),
        expected_nbytes=max(member.slot_nbytes(s) for s in range(1, 1 + len(member.fragments))),
        nbytes_of=member.slot_nbytes,
        is_member=lambda p: p in peers,
        expected=lambda slot: peers,
    )
    endpoint.validate_only(topic, gossip.validate)

    async def exchange(slot: int, payload: Payload) -> list[Contribution]:
        return await gossip.exchange(slot, bytes(payload), deadline=trio.current_time() + 600)

    return gossip, exchange
