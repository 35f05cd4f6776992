"""Putting and getting records: signed entries stored at, and merged from, the replicas of a key.

A key holds one entry per writer (`records.py`); the replicas of a key are the DHT servers
nearest to it. Why a put and a get walk the way they do:
- a put stores at every hop of its lookup (`Store` answers name closer peers), so the entry
  is already at the replicas when the walk ends, without a second round of requests; this
  node keeps a copy too when it is a server among the nearest;
- a get stops at the first replica that holds the key (`quorum`), at the second for keys
  that many peers write to: a put's hops off the nearest set may hold some writers' entries
  and not others;
- every entry a replica returns is checked (namespace, signature, expiry) before it is used,
  and a replica that answers with another key's entry or a forged one is penalised.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

from libp2p.crypto.keys import KeyPair
from libp2p.peer.id import ID
from peertrain.protocol.errors import ProtocolError

from .config import DhtConfig
from .errors import RecordRejected, RejectReason, StoreFailed
from .keyspace import peer_key, record_key
from .messages import FindValue, Store, Stored, Value
from .namespaces import NamespaceRegistry
from .records import Record, SignatureCache, SignedEntry, check_entry, now_ms, sign_entry, to_record
from .storage import RecordStore
from .walker import Walker

Merged = dict[bytes, tuple[SignedEntry, Any]]  # writer → its newest valid entry and value
MULTI_WRITER_QUORUM = 3  # replicas a get of a many-writer key merges (see `Values.get`)


class Values:
    """`put`, `put_entry` and `get` for one node (`Dht` delegates to it)."""

    def __init__(
        self,
        *,
        walker: Walker,
        config: DhtConfig,
        key_pair: KeyPair,
        registry: NamespaceRegistry,
        signatures: SignatureCache,
        store: RecordStore,
        on_reject: Callable[[ID, ProtocolError], None],
        counts: Counter[str],
        clock: Callable[[], float],
    ) -> None:
        self.walker, self.config = walker, config
        self._key_pair = key_pair
        self.registry, self.signatures, self.store = registry, signatures, store
        self._on_reject = on_reject
        self._counts = counts  # shared with the node's statistics: "puts", "gets"
        self.clock = clock

    def sign(self, key: str, value: Any, ttl: float) -> SignedEntry:
        """Our entry under `key`; `ValueError` if its namespace would refuse it."""
        entry = sign_entry(self._key_pair, key, value, ttl=ttl, clock=self.clock)
        try:
            check_entry(entry, self.registry, self.signatures, now=now_ms(self.clock))
        except RecordRejected as exc:
            raise ValueError(f"cannot publish under {key!r}: {exc}") from None
        return entry

    async def put(self, key: str, value: Any, *, ttl: float) -> int:
        """Sign `value` as our entry under `key` for `ttl` seconds and store it at the replicas.

        Returns how many peers hold it (this node included, as a server among the nearest).
        Raises `ValueError` for a key, value or ttl the namespace refuses, and `StoreFailed`
        when nobody took it.
        """
        self._counts["puts"] += 1
        entry = self.sign(key, value, ttl)
        return await self.put_entry(entry)

    async def put_entry(self, entry: SignedEntry) -> int:
        """Store an already signed entry (ours, or one we relay) at its replicas."""
        target = record_key(entry.key)
        width = self.config.replicas
        holders = 0
        walker = self.walker

        async def query(peer: ID) -> list[ID]:
            nonlocal holders
            reply = await walker.request(
                peer, Store(entries=(entry,), server=walker.is_server, count=width), Stored
            )
            holders += reply.accepted
            return walker.heard(reply.peers, target)

        result = await walker.lookup(
            target, query, width=width, alpha=max(self.config.alpha, width)
        )
        if walker.is_server and self._among_nearest(target, result.closest):
            namespace, _ = check_entry(
                entry, self.registry, self.signatures, now=now_ms(self.clock)
            )
            holders += self.store.put(entry, namespace, now=now_ms(self.clock)) or self.store.holds(
                entry
            )
        if not holders:
            raise StoreFailed(
                f"no peer stored {entry.key!r} ({result.queried} asked, {result.failed} failed)"
            )
        return holders

    def _among_nearest(self, target: int, closest: list[ID]) -> bool:
        if len(closest) < self.config.replicas:
            return True
        return (self.walker.table.own_key ^ target) < (peer_key(closest[-1]) ^ target)

    async def get(self, key: str, *, quorum: int = 1) -> dict[str, Record]:
        """Every writer's live entry under `key`, merged from the replicas that answered.

        The lookup stops once `quorum` replicas (this node counts as one) returned entries and
        the nearest of them is nearer the key than every peer not yet heard from (or once the
        `2 × replicas` nearest peers it found have answered). A put stores at every hop of its
        walk, so a peer off the nearest set may hold some writers' entries and not others; the
        nearest holder is in every writer's replica set. Raises `ValueError` when the key
        belongs to no namespace.
        """
        self._counts["gets"] += 1
        try:
            namespace = self.registry.match(key).namespace
        except RecordRejected as exc:
            raise ValueError(str(exc)) from None
        if namespace.owner is None and namespace.max_writers > 1:
            # A key many peers write to is merged from at least three replicas: once the nearest
            # peers have died, the nearest survivor may have been in some writers' replica sets
            # only (seen: 1 of 4 writers' entries after a third of 32 nodes died), and under
            # load a put's stores time out on some of its replicas (two replicas once missed a
            # writer in a full suite run).
            quorum = max(quorum, MULTI_WRITER_QUORUM)
        walker = self.walker
        target = record_key(key)
        found: Merged = {}
        holders: list[int] = []  # distances of the peers that held entries
        if walker.is_server and self._merge(found, self.store.get(key, now=now_ms(self.clock))):
            holders.append(walker.table.own_key ^ target)
        # Twice the replica count: a get that finds nothing keeps walking a little longer
        # (the put may have landed on nearest peers this node had not heard of yet); a get that
        # finds something stops at once, so the extra width costs only misses.
        width = 2 * self.config.replicas

        async def query(peer: ID) -> list[ID]:
            reply = await walker.request(
                peer, FindValue(key=key, server=walker.is_server, count=width), Value
            )
            if self._accept_answer(peer, key, reply.entries, found):
                holders.append(peer_key(peer) ^ target)
            return walker.heard(reply.peers, target)

        def satisfied(nearest_open: int | None) -> bool:
            return len(holders) >= quorum and (nearest_open is None or min(holders) < nearest_open)

        await walker.lookup(target, query, width=width, alpha=self.config.alpha, done=satisfied)
        records = (to_record(entry, value) for entry, value in found.values())
        return {record.writer: record for record in records}

    def _accept_answer(
        self, peer: ID, key: str, entries: tuple[SignedEntry, ...], found: Merged
    ) -> bool:
        """Validate a replica's entries into `found`; True if it held any valid one."""
        good = []
        for entry in entries:
            if entry.key != key:
                detail = f"asked for {key[:80]!r}, answered with an entry of {entry.key[:80]!r}"
                self._on_reject(peer, RecordRejected(RejectReason.WRONG_KEY, detail))
                return False
            good.append(entry)
        return self._merge(found, good, sender=peer) > 0

    def _merge(
        self, found: Merged, entries: Iterable[SignedEntry], *, sender: ID | None = None
    ) -> int:
        """Validate `entries` (signatures already seen cost a hash) into `found`; count them.

        Blame is per answer, not per entry: a replica that handed over several bad entries is
        penalised once, for the worst. Failures that clocks explain (expired in flight, issued
        in our future) cost nobody anything: the replica only forwarded what a writer signed."""
        taken = 0
        worst: RecordRejected | None = None
        now = now_ms(self.clock)
        for entry in entries:
            try:
                _, value = check_entry(entry, self.registry, self.signatures, now=now)
            except RecordRejected as exc:
                if worst is None or exc.reason.penalty > worst.reason.penalty:
                    worst = exc
                continue
            taken += 1
            current = found.get(entry.writer)
            if current is None or entry.newer_than(current[0]):
                found[entry.writer] = (entry, value)
        if worst is not None and worst.reason.penalty > 0 and sender is not None:
            self._on_reject(sender, worst)
        return taken
