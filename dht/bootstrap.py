"""Joining the DHT and staying joined: bootstrap, the first wide walk, periodic refresh.

The bootstrap self-lookup is one peer wide: the bootstrap peer names the peers nearest to us
and we walk to the nearest, which then knows us. That makes us useful at once (lookups work
through any peer in the table) for about two connections. A wider walk follows a moment later
in the background (`maintain`): in py-libp2p a connection costs ≈17 ms of CPU (two thirds of it
identify), and a swarm joining all at once with the wide walk up front spent three times as
long before anyone was usable.

The wide walk is as wide as a k-bucket (`bucket_size`, Kademlia's join): the peers nearest us
must know us, or a put whose key falls next to us stops at them without ever hearing of us, and
gets then miss. The self-lookup of every refresh is as wide as a put (`replicas`). Measured with
the scale simulation (`benchmarks/scale_sim.py`, 1k nodes, no churn): three wide, 12 of 64
records were not at their nearest peer and 5 of 100 gets missed; eight wide, 64 of 64 and 0-2
of 100, but with churn at 4k nodes 11 of 100 gets still missed; twenty wide, 64 of 64 and 0 of
100 at 1k with fewer requests per get (5.6 against 6.6) and a third more CPU for the join.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Sequence

import trio
from libp2p.abc import IHost
from libp2p.peer.id import ID
from libp2p.peer.peerinfo import PeerInfo
from peertrain.protocol.errors import PeertrainError

from .config import DhtConfig
from .dialer import Dialer
from .keyspace import random_key_in_bucket
from .routing import RoutingTable
from .table_feed import TableFeed
from .walker import Walker

log = logging.getLogger(__name__)

FIRST_REFRESH = (5.0, 15.0)  # seconds after bootstrap: the wide self-lookup, spread out in time


class Bootstrapper:
    def __init__(
        self,
        *,
        host: IHost,
        config: DhtConfig,
        table: RoutingTable,
        walker: Walker,
        feed: TableFeed,
        dialer: Dialer,
        peers: Sequence[PeerInfo],
    ) -> None:
        self.host = host
        self.config = config
        self.table = table
        self.walker = walker
        self.feed = feed
        self.dialer = dialer
        self.own = host.get_id()
        self.peers = [p for p in peers if p.peer_id != self.own]
        self._lock = trio.Lock()
        # set once the bootstrap walk's first answer put a server in the table: lookups work
        # from then on (the walk goes on toward our neighbours, who then know us)
        self.done = trio.Event()

    async def bootstrap(self, peers: Sequence[PeerInfo] = ()) -> int:
        """Connect to `peers` (and the configured ones), then look ourselves up, one peer wide.

        Returns the routing table's size. Safe to call again at any time.
        """
        known = {p.peer_id for p in self.peers}
        self.peers += [p for p in peers if p.peer_id not in known and p.peer_id != self.own]
        async with self._lock:
            reached = await self.dialer.connect_all(self.peers)
            await self._greet(reached)
            seeds = [*reached, *self.table.closest(self.table.own_key, self.config.alpha)]
            if seeds:
                await self.walker.lookup_nodes(
                    self.table.own_key, width=1, alpha=1, seeds=seeds, done=self._first_answer
                )
            if len(self.table):
                self.done.set()
            return len(self.table)

    async def _greet(self, peers: Sequence[ID]) -> None:
        """Ask every bootstrap peer we reached for our neighbours, in parallel.

        The walk alone is one peer wide and may start from peers that dialled us meanwhile:
        then the bootstrap peer never heard a request, neither side's table held the other
        (identify had failed on the fresh connection), and a 10-node swarm joining at once
        split in two halves that did not meet until the first refresh, 5-15 s later. A peer
        we ask learns that we serve and joins our table when it answers."""

        async def greet(peer: ID) -> None:
            try:
                await self.walker.find_nodes(peer, self.table.own_key, count=self.config.alpha)
            except (PeertrainError, trio.TooSlowError) as exc:
                log.info("dht: bootstrap peer %s did not answer: %s", peer, exc)

        async with trio.open_nursery() as nursery:
            for peer in peers:
                nursery.start_soon(greet, peer)

    def _first_answer(self, _nearest_open: int | None) -> bool:
        """After each answer of the bootstrap walk: usable once a server is in the table. The
        walk's next hop may be a peer whose address drops packets (a NAT's LAN side), which
        held `peertrain join` behind NAT for a request timeout (3 s of its 3.4 s from start)."""
        if len(self.table):
            self.done.set()
        return False  # the walk itself goes on

    async def maintain(self) -> None:
        """Bootstrap as soon as there is anyone to bootstrap from, then refresh periodically."""
        delay = 1.0
        while not self.done.is_set():
            if self.peers or len(self.table):
                async with self._lock:
                    pass  # a bootstrap someone else started finishes first
                if not self.done.is_set():
                    await self.bootstrap()
                if self.done.is_set():
                    break
            with trio.move_on_after(delay):
                await self.feed.wait_for_growth()
            delay = min(delay * 2, self.config.refresh_interval)
        await trio.sleep(random.uniform(*FIRST_REFRESH))
        # k (bucket_size) wide, as Kademlia's join: see the docstring
        await self.walker.lookup_nodes(self.table.own_key, width=self.config.bucket_size)
        while True:
            await trio.sleep(self.config.refresh_interval * random.uniform(0.8, 1.2))
            await self.refresh()

    async def refresh(self) -> None:
        """Self-lookup plus a random lookup in up to 3 buckets no lookup went through lately."""
        if not len(self.table):
            await self.dialer.connect_all(self.peers)
        await self.walker.lookup_nodes(self.table.own_key)
        stale = self.table.stale_buckets(self.config.refresh_interval)
        for index in random.sample(stale, min(3, len(stale))):
            await self.walker.lookup_nodes(
                random_key_in_bucket(self.table.own_key, index, random.getrandbits(256))
            )
