"""Grow-only and positive-negative counters: one slot per replica.

A G-counter maps each replica to how much it has counted; the value is the sum and the join
is the pointwise maximum, so a replica only ever raises its own slot and duplicates or stale
deltas change nothing. A PN-counter is two G-counters, increments and decrements. The RunState
progress counter is a G-counter whose slots only their owners may write.

Wire: G-counter `[[replica, count], ...]` sorted by replica; PN-counter `[P, N]`.
"""

from __future__ import annotations

from typing import Self

from peertrain.protocol.errors import DecodeError

from .lattice import Lattice
from .wire import MAX_SEQ, Wire, check_ascending, read_int, read_list, read_str


class GCounter(Lattice):
    """Grow-only counter; `increment` returns the delta (the replica's new slot value)."""

    __slots__ = ("_slots",)

    def __init__(self, slots: dict[str, int] | None = None) -> None:
        self._slots: dict[str, int] = dict(slots or {})

    @property
    def value(self) -> int:
        return sum(self._slots.values())

    def get(self, replica: str) -> int:
        return self._slots.get(replica, 0)

    def slots(self) -> dict[str, int]:
        return dict(self._slots)

    def increment(self, replica: str, amount: int = 1) -> GCounter:
        if amount < 0:
            raise ValueError("a G-counter only grows")
        new = self._slots.get(replica, 0) + amount
        if new > MAX_SEQ:
            raise OverflowError("counter slot would leave the encodable range")
        delta = GCounter({replica: new} if new else {})
        self.merge(delta)
        return delta

    def merge(self, other: GCounter) -> None:
        for replica, count in other._slots.items():
            if count > self._slots.get(replica, 0):
                self._slots[replica] = count

    def copy(self) -> Self:
        return type(self)(self._slots)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, GCounter):
            return NotImplemented
        return self._slots == other._slots

    def project(self, replica: str) -> GCounter:
        return GCounter({replica: self._slots[replica]} if replica in self._slots else {})

    def drop(self, replica: str) -> None:
        self._slots.pop(replica, None)

    def replicas(self) -> set[str]:
        return set(self._slots)

    def to_wire(self) -> Wire:
        return [[r, c] for r, c in sorted(self._slots.items())]

    @classmethod
    def from_wire(cls, obj: Wire, *, max_replicas: int, replica_len: int = 128) -> GCounter:
        out = cls()
        rows = read_list(obj, "G-counter", max_len=max_replicas)
        for row in rows:
            r, c = read_list(row, "G-counter slot", max_len=2, length=2)
            r = read_str(r, "G-counter replica", max_len=replica_len)
            c = read_int(c, "G-counter count")
            if c == 0:
                raise DecodeError("G-counter slots are never zero on the wire")
            out._slots[r] = c
        check_ascending([row[0] for row in rows], "G-counter replicas")
        return out


class PNCounter(Lattice):
    """Counter that goes both ways: increments and decrements as two G-counters."""

    __slots__ = ("_p", "_n")

    def __init__(self) -> None:
        self._p = GCounter()
        self._n = GCounter()

    @property
    def value(self) -> int:
        return self._p.value - self._n.value

    def increment(self, replica: str, amount: int = 1) -> PNCounter:
        return self._delta(p=self._p.increment(replica, amount))

    def decrement(self, replica: str, amount: int = 1) -> PNCounter:
        return self._delta(n=self._n.increment(replica, amount))

    def _delta(self, *, p: GCounter | None = None, n: GCounter | None = None) -> PNCounter:
        delta = PNCounter()
        delta._p, delta._n = p or GCounter(), n or GCounter()
        return delta

    def merge(self, other: PNCounter) -> None:
        self._p.merge(other._p)
        self._n.merge(other._n)

    def copy(self) -> Self:
        out = type(self)()
        out._p, out._n = self._p.copy(), self._n.copy()
        return out

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, PNCounter):
            return NotImplemented
        return self._p == other._p and self._n == other._n

    def to_wire(self) -> Wire:
        return [self._p.to_wire(), self._n.to_wire()]

    @classmethod
    def from_wire(cls, obj: Wire, *, max_replicas: int) -> PNCounter:
        p, n = read_list(obj, "PN-counter", max_len=2, length=2)
        out = cls()
        out._p = GCounter.from_wire(p, max_replicas=max_replicas)
        out._n = GCounter.from_wire(n, max_replicas=max_replicas)
        return out
