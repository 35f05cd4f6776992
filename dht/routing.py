"""The routing table: k-buckets of DHT servers we are connected to.

Invariant: a peer is in the table only while we hold a connection to it and know it serves
the DHT (it answered us, told us so in a request, or identify listed our protocol). A peer
leaves the table when its last connection closes or it fails a request, and the first of that
bucket's replacements (connected servers that did not fit) takes its place. So everything the
table hands out was alive moments ago, and a lookup rarely waits on a dead peer.

Bucket i holds peers whose key shares exactly i leading bits with ours; each keeps at most k
peers, oldest first (Kademlia's preference for long-lived peers, which resists flooding by
fresh identities). `closest` sorts the whole table, which at a few hundred entries costs less
than walking buckets outward.
"""

from __future__ import annotations

import heapq
import time
from collections import OrderedDict
from dataclasses import dataclass

from libp2p.peer.id import ID

from .keyspace import KEY_BITS, bucket_index, peer_key


@dataclass(frozen=True, kw_only=True, slots=True)
class RoutingStatistics:
    peers: int
    replacements: int
    buckets: int


class RoutingTable:
    def __init__(self, own: ID, *, bucket_size: int = 20, clock=time.monotonic) -> None:
        self.own = own
        self.own_key = peer_key(own)
        self.bucket_size = bucket_size
        self._clock = clock
        self._buckets: dict[int, OrderedDict[ID, int]] = {}
        self._replacements: dict[int, OrderedDict[ID, int]] = {}
        self._keys: dict[ID, int] = {}
        self.touched: dict[int, float] = {}  # bucket index → when a lookup last went through it

    def _index(self, key: int) -> int:
        return bucket_index(self.own_key, key)

    def add(self, peer: ID) -> bool:
        """Add a live server; True if it is (now) in the table, False if it waits as a replacement."""
        if peer == self.own:
            return False
        if peer in self._keys:
            return True
        key = peer_key(peer)
        index = self._index(key)
        bucket = self._buckets.setdefault(index, OrderedDict())
        if len(bucket) < self.bucket_size:
            bucket[peer] = key
            self._keys[peer] = key
            self._replacements.get(index, {}).pop(peer, None)
            return True
        spare = self._replacements.setdefault(index, OrderedDict())
        spare[peer] = key
        spare.move_to_end(peer)
        if len(spare) > self.bucket_size:
            spare.popitem(last=False)
        return False

    def remove(self, peer: ID) -> None:
        """Forget a peer that left or failed; promote the newest replacement of its bucket."""
        key = self._keys.pop(peer, None)
        if key is None:
            for spare in self._replacements.values():
                spare.pop(peer, None)
            return
        index = self._index(key)
        bucket = self._buckets[index]
        del bucket[peer]
        spare = self._replacements.get(index)
        if spare:
            newcomer, newcomer_key = spare.popitem(last=True)
            bucket[newcomer] = newcomer_key
            self._keys[newcomer] = newcomer_key
        if not bucket:
            del self._buckets[index]

    def __contains__(self, peer: ID) -> bool:
        return peer in self._keys

    def __len__(self) -> int:
        return len(self._keys)

    def peers(self) -> list[ID]:
        return list(self._keys)

    def closest(self, target: int, count: int, *, exclude: ID | None = None) -> list[ID]:
        """The `count` peers nearest to `target`, nearest first."""
        items = ((key ^ target, peer) for peer, key in self._keys.items() if peer != exclude)
        return [peer for _, peer in heapq.nsmallest(count, items, key=lambda item: item[0])]

    def touch(self, target: int) -> None:
        """Note that a lookup for `target` refreshed the bucket that `target` falls in."""
        if target != self.own_key:
            self.touched[self._index(target)] = self._clock()

    def stale_buckets(self, older_than: float) -> list[int]:
        """Indices of buckets (up to the deepest one in use) that no lookup crossed lately."""
        if not self._buckets:
            return []
        deepest = min(max(self._buckets) + 1, KEY_BITS - 1)
        now = self._clock()
        return [i for i in range(deepest + 1) if now - self.touched.get(i, -1e18) > older_than]

    def statistics(self) -> RoutingStatistics:
        return RoutingStatistics(
            peers=len(self._keys),
            replacements=sum(len(s) for s in self._replacements.values()),
            buckets=len(self._buckets),
        )
