"""The record store: merges per writer, drops at expiry, and stays within every bound."""

from __future__ import annotations

import dataclasses

from libp2p.crypto.ed25519 import create_new_key_pair
from peertrain.dht.namespaces import STAGE, Namespace
from peertrain.dht.records import sign_entry
from peertrain.dht.storage import RecordStore

KEYS = [create_new_key_pair() for _ in range(6)]


def entry(i, key="/peertrain/r/stage/0", ttl=60.0, value=None):
    return sign_entry(KEYS[i], key, value if value is not None else {"i": i}, ttl=ttl)


def test_one_entry_per_writer_and_the_newest_wins():
    store = RecordStore()
    first = entry(0)
    later = dataclasses.replace(entry(0, value={"i": 99}), issued_ms=first.issued_ms + 5)
    assert store.put(first, STAGE, now=first.issued_ms)
    assert store.put(entry(1), STAGE, now=first.issued_ms)
    assert store.put(later, STAGE, now=first.issued_ms)
    assert not store.put(first, STAGE, now=first.issued_ms)  # older: ignored
    held = store.get(first.key, now=first.issued_ms)
    assert len(held) == 2 and later in held and first not in held
    assert store.holds(first) and store.holds(later)


def test_expired_entries_are_neither_returned_nor_kept():
    store = RecordStore()
    short, long = entry(0, ttl=1), entry(1, ttl=60)
    store.put(short, STAGE, now=short.issued_ms)
    store.put(long, STAGE, now=short.issued_ms)
    assert store.get(short.key, now=short.expires_ms) == [long]
    assert store.purge_expired(short.expires_ms) == 1
    assert len(store) == 1 and store.statistics().keys == 1


def test_a_full_key_lets_a_newcomer_evict_only_from_its_younger_half():
    """Issue 29: the entry expiring first used to go, so long TTLs won every full key. Now a
    newcomer evicts a writer of the younger half by seniority, whatever the TTLs say, and a
    writer renewing its entry keeps its seniority."""
    narrow = Namespace(
        name="narrow", pattern="/peertrain/{run}/narrow", max_ttl=3600, max_writers=2
    )
    store = RecordStore(seed=1)
    key = "/peertrain/r/narrow"
    a, b = entry(0, key, ttl=10), entry(1, key, ttl=100)
    now = a.issued_ms
    store.put(a, narrow, now=now)
    store.put(b, narrow, now=now + 1)
    renewed = dataclasses.replace(entry(0, key, ttl=10), issued_ms=a.issued_ms + 5)
    assert store.put(renewed, narrow, now=now + 2)  # a renews: still the senior writer
    for i in (2, 3, 4, 5):
        assert store.put(entry(i, key, ttl=3000), narrow, now=now + 3 + i)
        assert a.writer in {e.writer for e in store.get(key, now=now)}
    assert [e.writer for e in store.ranked(key, now=now)] == [a.writer, entry(5, key).writer]


def test_total_entry_byte_and_per_writer_budgets_hold():
    store = RecordStore(max_entries=3, max_keys_per_writer=2)
    now = entry(0).issued_ms
    assert store.put(entry(0, "/peertrain/r/stage/1"), STAGE, now=now)
    assert store.put(entry(0, "/peertrain/r/stage/2"), STAGE, now=now)
    assert not store.put(entry(0, "/peertrain/r/stage/3"), STAGE, now=now)  # writer at its cap
    assert store.put(entry(1, "/peertrain/r/stage/3"), STAGE, now=now)
    assert not store.put(entry(2, "/peertrain/r/stage/4"), STAGE, now=now)  # store full
    assert len(store) == 3 and store.statistics().refused_full == 2
    small = RecordStore(max_bytes=600)
    assert small.put(entry(0, value={"b": b"x" * 300}), STAGE, now=now)
    assert not small.put(entry(1, value={"b": b"x" * 300}), STAGE, now=now)


def test_replaced_entries_do_not_grow_the_expiry_heap_without_bound():
    store = RecordStore()
    base = entry(0)
    for n in range(3000):
        store.put(
            dataclasses.replace(base, issued_ms=base.issued_ms + n), STAGE, now=base.issued_ms
        )
    assert len(store) == 1 and len(store._expiry) <= 2 * len(store) + 1025
