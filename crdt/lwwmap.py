"""Last-writer-wins map: one LWW register per key, deletes as stamped tombstones.

A delete writes a tombstone (`None`) under a fresh stamp, so a concurrent older `set` cannot
resurrect the key. Tombstones cost memory; `collect_tombstones(before)` drops those older than a
grace period. That is safe once every replica has seen the tombstone: a replica that missed both
the write and the delete for longer than the grace period could bring the key back, the usual
price of collecting tombstones without global knowledge (Cassandra's gc_grace works the same).
The RunState membership table avoids deletes: a member's lease simply expires.

Wire: `[[key, wall_ms, counter, writer, value or nil], ...]` sorted by the key's canonical bytes.
"""

from __future__ import annotations

import builtins
from collections.abc import Iterator
from typing import Generic, Self, TypeVar, cast

from .hlc import Stamp
from .lattice import Lattice
from .lww import LWWRegister, read_stamped
from .wire import Codec, Wire, check_ascending, optional, read_list

K = TypeVar("K")
V = TypeVar("V")


class LWWMap(Lattice, Generic[K, V]):
    """Map of LWW registers; `set` and `delete` return deltas and apply them locally."""

    __slots__ = ("key_codec", "value_codec", "_regs", "_stored")

    def __init__(self, key_codec: Codec[K], value_codec: Codec[V]) -> None:
        self.key_codec = key_codec
        self.value_codec = value_codec
        self._stored: Codec[V | None] = optional(value_codec)
        self._regs: dict[K, LWWRegister[V | None]] = {}

    # -- reading

    def get(self, key: K) -> V | None:
        reg = self._regs.get(key)
        return None if reg is None else reg.value

    def stamp(self, key: K) -> Stamp | None:
        reg = self._regs.get(key)
        return None if reg is None else reg.stamp

    def items(self) -> Iterator[tuple[K, V]]:
        for key, reg in self._regs.items():
            if reg.value is not None:
                yield key, reg.value

    def registers(self) -> Iterator[tuple[K, Stamp, V | None]]:
        """Every key with its stamp, tombstones (value None) included."""
        for key, reg in self._regs.items():
            yield key, reg.stamp, reg.value  # type: ignore[misc]

    def __contains__(self, key: object) -> bool:
        reg = self._regs.get(cast(K, key))  # any hashable key is a valid dict lookup
        return reg is not None and reg.value is not None

    def __len__(self) -> int:
        return sum(1 for _ in self.items())

    # -- delta mutators

    def set(self, key: K, value: V, stamp: Stamp) -> Self:
        if value is None:
            raise ValueError("None is the tombstone; use delete()")
        return self._write(key, value, stamp)

    def delete(self, key: K, stamp: Stamp) -> Self:
        return self._write(key, None, stamp)

    def _write(self, key: K, value: V | None, stamp: Stamp) -> Self:
        delta = self._empty()
        delta._regs[key] = LWWRegister(self._stored, stamp, value)
        self.merge(delta)
        return delta

    def collect_tombstones(self, before_wall_ms: int) -> int:
        """Drop tombstones stamped before `before_wall_ms`; return how many."""
        old = [k for k, r in self._regs.items() if r.value is None and r.stamp[0] < before_wall_ms]  # type: ignore[index]
        for key in old:
            del self._regs[key]
        return len(old)

    # -- lattice

    def merge(self, other: Self) -> None:
        for key, theirs in other._regs.items():
            mine = self._regs.get(key)
            if mine is None:
                self._regs[key] = theirs.copy()
            else:
                mine.merge(theirs)

    def copy(self) -> Self:
        out = self._empty()
        out._regs = {k: r.copy() for k, r in self._regs.items()}
        return out

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, LWWMap):
            return NotImplemented
        return self._regs == other._regs

    def project(self, key: K) -> Self:
        out = self._empty()
        if key in self._regs:
            out._regs[key] = self._regs[key].copy()
        return out

    def drop(self, key: K) -> None:
        self._regs.pop(key, None)

    def keys(self) -> builtins.set[K]:  # `set` in this class body is the method below
        """Every key, tombstoned ones included."""
        return set(self._regs)

    def _empty(self) -> Self:
        return type(self)(self.key_codec, self.value_codec)

    # -- wire

    def to_wire(self) -> Wire:
        rows = sorted(self._regs.items(), key=lambda kv: self.key_codec.sort_key(kv[0]))
        return [[self.key_codec.encode(k), *reg.to_wire()] for k, reg in rows]

    @classmethod
    def from_wire(
        cls, obj: Wire, key_codec: Codec[K], value_codec: Codec[V], *, max_entries: int
    ) -> LWWMap[K, V]:
        out = cls(key_codec, value_codec)
        order = []
        for row in read_list(obj, "LWW map", max_len=max_entries):
            row = read_list(row, "LWW map entry", max_len=5, length=5)
            key = key_codec.decode(row[0])
            stamp, value = read_stamped(row[1:], out._stored)
            out._regs[key] = LWWRegister(out._stored, stamp, value)
            order.append(key_codec.sort_key(key))
        check_ascending(order, "LWW map keys")
        return out
