"""The real DHT (dht/) at thousands of nodes on the simulated Internet: join, churn, lookups.

    async with open_sim_dht(n, seed=0) as sim:       # under trio.testing.MockClock(autojump)
        await sim.join_all(window=60.0)               # node i starts at i·window/n
        found = await sim.timed_get(sim.nodes[3], peer_record_key(sim.nodes[9].own))

Each node is an unchanged `Dht` (default config: it publishes its peer record, refreshes its
table every minute) on a `SimHost`, bootstrapping from a random node that started before it,
as a joiner does from a bootstrap list. Keys come from a seeded generator, so the XOR geometry
repeats run to run; `random` (the DHT's refresh jitter) is seeded too.
"""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import trio
from libp2p.crypto.ed25519 import create_new_key_pair
from peertrain.dht import Dht, DhtConfig

from .sim_host import SimHost, SimHostNet
from .sim_links import draw_access, mean_session_s
from .sim_net import TRACE, LookupTrace

EPOCH = 1.7e9  # the DHT's wall clock (record expiry) is trio's clock plus this


@dataclass(frozen=True, slots=True, kw_only=True)
class GetResult:
    found: bool
    seconds: float
    hops: int  # of the replica whose answer ended the walk (sim_net.LookupTrace)
    requests: int
    bytes: int


@dataclass
class SimDht:
    net: SimHostNet
    nursery: trio.Nursery
    rng: random.Random
    config: DhtConfig
    hosts: list[SimHost] = field(default_factory=list)
    nodes: list[Dht] = field(default_factory=list)  # started, in the order they started

    def live(self) -> list[Dht]:
        return [d for d in self.nodes if d.host.alive]  # type: ignore[attr-defined]

    def add_host(self) -> SimHost:
        """A new node's host (its identity and access link), not started."""
        key_pair = create_new_key_pair(self.rng.randbytes(32))
        host = self.net.add(len(self.hosts), key_pair, draw_access(self.rng))
        self.hosts.append(host)
        return host

    async def start(self, host: SimHost) -> Dht:
        """Start a DHT node on `host`, bootstrapping from a random live node started before."""
        via = []
        for _ in range(8 if self.nodes else 0):  # a bootstrap list holds a few; one answers
            peer = self.rng.choice(self.nodes).host
            if peer.alive:  # type: ignore[attr-defined]
                via = [peer.info()]  # type: ignore[attr-defined]
                break
        dht = Dht(host, self.config, bootstrap=via, clock=lambda: EPOCH + trio.current_time())  # type: ignore[arg-type]
        await self.nursery.start(host.run)
        await host.nursery.start(dht.run)  # type: ignore[union-attr]
        self.nodes.append(dht)
        return dht

    async def join_all(self, *, window: float) -> None:
        """Start every node not yet started, one every window/n seconds."""
        waiting = self.hosts[len(self.nodes) :]
        gap = window / max(1, len(waiting))
        for host in waiting:
            await self.start(host)
            await trio.sleep(gap)

    async def churn(self, *, seconds: float) -> tuple[int, int]:
        """Crash and add nodes for `seconds` at the rate of the measured session lengths
        (sim_links.py): Poisson, 1/mean-session of the live nodes a second each way."""
        left = joined = 0
        end = trio.current_time() + seconds
        while True:
            rate = len(self.live()) / mean_session_s()
            await trio.sleep(self.rng.expovariate(2 * rate))
            if trio.current_time() >= end:
                return left, joined
            if self.rng.random() < 0.5:
                self.net.crash(self.rng.choice(self.live()).host)  # type: ignore[arg-type]
                left += 1
            else:
                await self.start(self.add_host())
                joined += 1

    async def timed_get(self, dht: Dht, key: str) -> GetResult:
        trace = LookupTrace()
        token = TRACE.set(trace)
        start = trio.current_time()
        try:
            records = await dht.get(key)
        finally:
            TRACE.reset(token)
        return GetResult(
            found=bool(records),
            seconds=trio.current_time() - start,
            hops=trace.last_depth,
            requests=trace.requests,
            bytes=trace.bytes,
        )


@asynccontextmanager
async def open_sim_dht(
    n: int, *, seed: int = 0, config: DhtConfig | None = None, loss: bool = True
) -> AsyncIterator[SimDht]:
    """`n` DHT nodes on a simulated Internet, created but not started (`join_all`)."""
    random.seed(seed)  # the DHT's own jitter (bootstrap.py)
    net = SimHostNet(seed=seed, loss=loss)
    async with trio.open_nursery() as nursery:
        await nursery.start(net.serve)
        sim = SimDht(
            net=net, nursery=nursery, rng=random.Random(seed), config=config or DhtConfig()
        )
        for _ in range(n):
            sim.add_host()
        try:
            yield sim
        finally:
            nursery.cancel_scope.cancel()
