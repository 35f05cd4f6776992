"""The in-memory network under sharded rounds (swarm/exchange/sharded/transport.py's seam):
broadcasts reach every other member, payloads are fetched by key, and each member's uplink
and downlink pass bytes first come first served at their rate, after a one-way latency.

Under trio's MockClock with autojump a 64-member round at home-link speeds takes a moment
of real time; bytes sent and received are counted per member."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import blake3
import trio
from peertrain.swarm.exchange.sharded.transport import FetchFailed

REQUEST_BYTES = 64  # a fetch request on the wire


@dataclass
class Link:
    up: float | None = None  # bytes per second; None: unlimited
    down: float | None = None
    latency: float = 0.0  # seconds, one way


@dataclass
class Endpoint:
    peer: str
    net: ShardNetwork
    # (origin, raw): a round's `Board.receive(raw)`, or a driver's update-gossip validator
    deliver: Callable[[str, bytes], object] = lambda origin, raw: None
    served: dict[bytes, bytes] = field(default_factory=dict)
    sent: int = 0
    received: int = 0
    gone: bool = False
    _up_free: float = 0.0
    _down_free: float = 0.0

    async def broadcast(self, raw: bytes) -> None:
        for other in self.net.endpoints.values():
            if other is not self and not other.gone:
                self.net.nursery.start_soon(self.net.carry, self, other, raw)

    async def serve(self, payload: bytes) -> bytes:
        key = blake3.blake3(payload).digest()
        self.served[key] = payload
        return key

    async def fetch(self, peer: str, key: bytes, nbytes: int) -> bytes:
        source = self.net.endpoints.get(peer)
        if source is None or source.gone:
            await trio.sleep(self.net.link.latency)
            raise FetchFailed(f"{peer[:12]} is not reachable")
        await self.net.transfer(self, source, REQUEST_BYTES)
        payload = source.served.get(key)
        if payload is None or len(payload) != nbytes:
            raise FetchFailed(f"{peer[:12]} does not serve {key[:8].hex()} ({nbytes} bytes)")
        await self.net.transfer(source, self, len(payload))
        if blake3.blake3(payload).digest() != key:  # a cheat's `served` table in a test
            raise FetchFailed(f"{peer[:12]} served bytes that are not {key[:8].hex()}")
        self.served[key] = payload
        return payload


class ShardNetwork:
    def __init__(self, nursery: trio.Nursery, link: Link) -> None:
        self.nursery, self.link = nursery, link
        self.endpoints: dict[str, Endpoint] = {}

    def endpoint(self, peer: str) -> Endpoint:
        self.endpoints[peer] = Endpoint(peer, self)
        return self.endpoints[peer]

    async def transfer(self, src: Endpoint, dst: Endpoint, nbytes: int) -> None:
        now, link = trio.current_time(), self.link
        up_done = max(src._up_free, now) + (nbytes / link.up if link.up else 0.0)
        down_done = max(dst._down_free, now) + (nbytes / link.down if link.down else 0.0)
        src._up_free, dst._down_free = up_done, down_done
        src.sent += nbytes
        dst.received += nbytes
        await trio.sleep_until(max(up_done, down_done) + link.latency)

    async def carry(self, src: Endpoint, dst: Endpoint, raw: bytes) -> None:
        await self.transfer(src, dst, len(raw))
        if not dst.gone:
            dst.deliver(src.peer, raw)


@asynccontextmanager
async def shard_network(link: Link | None = None) -> AsyncIterator[ShardNetwork]:
    async with trio.open_nursery() as nursery:
        yield ShardNetwork(nursery, link or Link())
        nursery.cancel_scope.cancel()
