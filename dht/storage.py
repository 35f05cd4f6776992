"""What a DHT server holds for others: verified entries, merged per writer, dropped at expiry.

Bounded three ways, so that no peer can make us grow without limit: a total entry count and
byte budget, a per-key writer count (the namespace's `max_writers`), and a per-writer key count
(one writer cannot fill the store with many keys). Expired entries are never returned and are
swept from a heap; an entry replaced by a newer one leaves a stale heap item behind, which the
sweep skips (and the heap is rebuilt when stale items outnumber live ones).

Peer IDs cost nothing, so a full key must not go to whoever floods it. Each writer under a key
has a *seniority*: when this server first stored it there, kept while the writer renews its
entry. A newcomer to a full key evicts a random entry of the younger half (by seniority), so the
older half is a reserved share for long-lived writers: a flood of fresh writers churns among
itself and the newest arrivals, and never pushes out a listing that was here before it. (Before,
the entry expiring first was evicted: 1024 writers with 1-hour TTLs pushed out every honest
600 s listing of `/peertrain/runs`, and refused any new one.) Answers rank by seniority too
(`ranked`), never by the writer's own stamps (serving.py).

Writers store their own entries (a put sends each replica its entry itself), so an entry that
another peer hands over is *relayed*: one connection can relay any number of fresh writers'
entries, while storing one's own costs a connection per writer (counted per IP prefix by the
node's budget). Relayed entries take free room and each other's places only, never an entry its
writer stored, and rank after those in answers: a listing put after a relayed flood began was
evicted at random like the flood's own entries; now the flood cannot touch it.
"""

from __future__ import annotations

import heapq
import random
from collections import Counter
from dataclasses import dataclass

from .namespaces import Namespace
from .records import SignedEntry


@dataclass(frozen=True, kw_only=True, slots=True)
class StoreStatistics:
    keys: int
    entries: int
    bytes: int
    refused_full: int


class RecordStore:
    """Entries by key and writer; every method takes `now` (unix ms) from the caller's clock."""

    def __init__(
        self,
        *,
        max_entries: int = 100_000,
        max_bytes: int = 64 << 20,
        max_keys_per_writer: int = 1024,
        seed: int | None = None,
    ) -> None:
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.max_keys_per_writer = max_keys_per_writer
        self._by_key: dict[str, dict[bytes, SignedEntry]] = {}
        self._since: dict[str, dict[bytes, int]] = {}  # key → writer → first stored (ms)
        self._relayed: dict[str, set[bytes]] = {}  # key → writers whose entries others stored
        self._rng = random.Random(seed)
        self._expiry: list[tuple[int, str, bytes]] = []
        self._per_writer: Counter[bytes] = Counter()
        self._entries = 0
        self._bytes = 0
        self._refused_full = 0

    def put(
        self, entry: SignedEntry, namespace: Namespace, *, now: int, relayed: bool = False
    ) -> bool:
        """Store a *validated* entry; False if we already hold a newer one or have no room.
        `relayed`: a peer other than its writer handed it over."""
        self.purge_expired(now)
        writers = self._by_key.get(entry.key, {})
        current = writers.get(entry.writer)
        if current is not None:
            if not entry.newer_than(current):
                return False
            self._drop(entry.key, entry.writer, renewed=True)  # its seniority stays
        elif not self._make_room(entry, writers, namespace, relayed):
            self._refused_full += 1
            return False
        if relayed and current is None:
            self._relayed.setdefault(entry.key, set()).add(entry.writer)
        elif not relayed:  # its writer stored it: its own from now on
            self._forget_relayed(entry.key, entry.writer)
        self._by_key.setdefault(entry.key, {})[entry.writer] = entry
        self._since.setdefault(entry.key, {}).setdefault(entry.writer, now)
        self._per_writer[entry.writer] += 1
        self._entries += 1
        self._bytes += entry.size
        heapq.heappush(self._expiry, (entry.expires_ms, entry.key, entry.writer))
        return True

    def _make_room(
        self, entry: SignedEntry, writers: dict[bytes, SignedEntry], ns: Namespace, relayed: bool
    ) -> bool:
        if self._per_writer[entry.writer] >= self.max_keys_per_writer:
            return False
        evict = None
        if len(writers) >= ns.max_writers:
            victim = self._younger_half_victim(entry.key, relayed)
            if victim is None:
                return False
            evict = writers[victim]
        entries = self._entries - (evict is not None)
        size = self._bytes - (evict.size if evict is not None else 0)
        if entries >= self.max_entries or size + entry.size > self.max_bytes:
            return False
        if evict is not None:
            self._drop(entry.key, evict.writer)
        return True

    def _younger_half_victim(self, key: str, relayed: bool) -> bytes | None:
        """A random writer of the younger half under `key` (by seniority): the older half is
        kept for long-lived writers, whatever a flood of new ones does. Relayed entries go
        first, and a relayed newcomer evicts only those (None: no room for it)."""
        since, others = self._since[key], self._relayed.get(key, set())
        pool = list(others) if others or relayed else list(since)
        if not pool:
            return None
        youngest_first = sorted(pool, key=lambda w: (-since[w], w))
        return self._rng.choice(youngest_first[: max(1, (len(youngest_first) + 1) // 2)])

    def ranked(self, key: str, *, now: int) -> list[SignedEntry]:
        """The unexpired entries under `key`: those their writers stored first, then relayed
        ones, each longest-held writer first."""
        since, others = self._since.get(key, {}), self._relayed.get(key, set())
        return sorted(
            self.get(key, now=now),
            key=lambda e: (e.writer in others, since.get(e.writer, now), e.writer),
        )

    def _forget_relayed(self, key: str, writer: bytes) -> None:
        others = self._relayed.get(key)
        if others is not None:
            others.discard(writer)
            if not others:
                del self._relayed[key]

    def _drop(self, key: str, writer: bytes, *, renewed: bool = False) -> None:
        writers = self._by_key[key]
        entry = writers.pop(writer)
        if not writers:
            del self._by_key[key]
        if not renewed:
            since = self._since[key]
            del since[writer]
            if not since:
                del self._since[key]
            self._forget_relayed(key, writer)
        self._per_writer[writer] -= 1
        if not self._per_writer[writer]:
            del self._per_writer[writer]
        self._entries -= 1
        self._bytes -= entry.size

    def holds(self, entry: SignedEntry) -> bool:
        """True if we keep `entry` or a newer entry of the same writer under the same key."""
        current = self._by_key.get(entry.key, {}).get(entry.writer)
        return current is not None and (current == entry or current.newer_than(entry))

    def get(self, key: str, *, now: int) -> list[SignedEntry]:
        """The unexpired entries under `key`."""
        return [e for e in self._by_key.get(key, {}).values() if e.expires_ms > now]

    def purge_expired(self, now: int) -> int:
        """Drop every entry that expired by `now`; return how many."""
        dropped = 0
        while self._expiry and self._expiry[0][0] <= now:
            expires, key, writer = heapq.heappop(self._expiry)
            current = self._by_key.get(key, {}).get(writer)
            if current is not None and current.expires_ms == expires:
                self._drop(key, writer)
                dropped += 1
        if len(self._expiry) > 2 * self._entries + 1024:
            self._expiry = [
                (e.expires_ms, k, w) for k, ws in self._by_key.items() for w, e in ws.items()
            ]
            heapq.heapify(self._expiry)
        return dropped

    def keys(self) -> list[str]:
        return list(self._by_key)

    def __len__(self) -> int:
        return self._entries

    def statistics(self) -> StoreStatistics:
        return StoreStatistics(
            keys=len(self._by_key),
            entries=self._entries,
            bytes=self._bytes,
            refused_full=self._refused_full,
        )
