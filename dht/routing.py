"""The routing table: k-buckets of DHT servers, verified ones first.

Two kinds of contact share the buckets:

- verified: we hold a connection to it and know it serves the DHT (it answered us, said so in a
  request, or identify listed our protocol). It leaves when its last connection closes or it
  fails a request, and the newest of that bucket's replacements (connected servers that did
  not fit) takes its place.
- learned: another server named it in an answer. It costs no connection to know, so a node
  that joined through one peer still knows the neighbourhoods it walked through; that
  knowledge is what makes lookups from different nodes converge on the same peers (measured:
  with connected peers only, 23 of 64 freshly joined nodes missed a record). A learned contact
  only takes a free slot, is the first to go when a verified peer needs the slot, becomes
  verified when it answers, and is dropped when it fails.

Bucket i holds peers whose key shares exactly i leading bits with ours; each keeps at most k
peers, oldest verified first (Kademlia's preference for long-lived peers, which resists
flooding by fresh identities). `closest` sorts the whole table, which at a few hundred entries
costs less than walking buckets outward.
"""

from __future__ import annotations

import heapq
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from libp2p.peer.id import ID

from .keyspace import KEY_BITS, bucket_index, peer_key


@dataclass(frozen=True, kw_only=True, slots=True)
class RoutingStatistics:
    peers: int
    verified: int
    replacements: int
    buckets: int


class _Bucket:
    __slots__ = ("verified", "learned", "spare")

    def __init__(self) -> None:
        self.verified: OrderedDict[ID, int] = OrderedDict()
        self.learned: OrderedDict[ID, int] = OrderedDict()
        self.spare: OrderedDict[ID, int] = OrderedDict()  # verified peers that did not fit

    def __len__(self) -> int:
        return len(self.verified) + len(self.learned)


class RoutingTable:
    def __init__(
        self, own: ID, *, bucket_size: int = 20, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.own = own
        self.own_key = peer_key(own)
        self.bucket_size = bucket_size
        self._clock = clock
        self._buckets: dict[int, _Bucket] = {}
        self._keys: dict[ID, int] = {}  # every peer in a bucket (not the spares)
        self.touched: dict[int, float] = {}  # bucket index → when a lookup last went through it

    def _bucket(self, key: int) -> tuple[int, _Bucket]:
        index = bucket_index(self.own_key, key)
        bucket = self._buckets.get(index)
        if bucket is None:
            bucket = self._buckets[index] = _Bucket()
        return index, bucket

    def add(self, peer: ID) -> bool:
        """Add a verified server; True if it is in the table now, False if it waits as a spare."""
        if peer == self.own:
            return False
        key = self._keys.get(peer) or peer_key(peer)
        _, bucket = self._bucket(key)
        if peer in bucket.verified:
            return True
        if bucket.learned.pop(peer, None) is not None:  # it answered: promote in place
            bucket.verified[peer] = key
            return True
        if len(bucket) >= self.bucket_size and bucket.learned:
            dropped, _ = bucket.learned.popitem(last=True)  # the newest hearsay goes first
            del self._keys[dropped]
        if len(bucket) < self.bucket_size:
            bucket.verified[peer] = key
            self._keys[peer] = key
            bucket.spare.pop(peer, None)
            return True
        bucket.spare[peer] = key
        bucket.spare.move_to_end(peer)
        if len(bucket.spare) > self.bucket_size:
            bucket.spare.popitem(last=False)
        return False

    def learn(self, peer: ID) -> bool:
        """Note a server another peer named; only into a free slot. True if it is in the table."""
        if peer == self.own:
            return False
        if peer in self._keys:
            return True
        key = peer_key(peer)
        _, bucket = self._bucket(key)
        if len(bucket) >= self.bucket_size:
            return False
        bucket.learned[peer] = key
        self._keys[peer] = key
        return True

    def remove(self, peer: ID) -> None:
        """Forget a peer that left or failed; promote the newest spare of its bucket."""
        key = self._keys.pop(peer, None)
        if key is None:
            for bucket in self._buckets.values():
                bucket.spare.pop(peer, None)
            return
        index, bucket = self._bucket(key)
        bucket.verified.pop(peer, None)
        bucket.learned.pop(peer, None)
        if bucket.spare:
            newcomer, newcomer_key = bucket.spare.popitem(last=True)
            bucket.verified[newcomer] = newcomer_key
            self._keys[newcomer] = newcomer_key
        if not len(bucket) and not bucket.spare:
            del self._buckets[index]

    def __contains__(self, peer: ID) -> bool:
        return peer in self._keys

    def is_verified(self, peer: ID) -> bool:
        key = self._keys.get(peer)
        return key is not None and peer in self._bucket(key)[1].verified

    def __len__(self) -> int:
        return len(self._keys)

    def verified_count(self) -> int:
        return sum(len(b.verified) for b in self._buckets.values())

    def peers(self) -> list[ID]:
        return list(self._keys)

    def verified_peers(self) -> list[ID]:
        return [peer for bucket in self._buckets.values() for peer in bucket.verified]

    def closest(self, target: int, count: int, *, exclude: ID | None = None) -> list[ID]:
        """The `count` peers nearest to `target`, nearest first."""
        items = ((key ^ target, peer) for peer, key in self._keys.items() if peer != exclude)
        return [peer for _, peer in heapq.nsmallest(count, items, key=lambda item: item[0])]

    def touch(self, target: int) -> None:
        """Note that a lookup for `target` refreshed the bucket that `target` falls in."""
        if target != self.own_key:
            self.touched[bucket_index(self.own_key, target)] = self._clock()

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
            verified=self.verified_count(),
            replacements=sum(len(b.spare) for b in self._buckets.values()),
            buckets=len(self._buckets),
        )
