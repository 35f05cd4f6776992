"""The contract every CRDT here follows: a join-semilattice with in-place merge.

A delta-state CRDT (Almeida, Shoker, Baquero, "Delta State Replicated Data Types", 2018) is a
state type with a join (`merge`) that is commutative, associative and idempotent, plus delta
mutators: each local update returns a small state (the delta) such that joining it into any
replica has the update's effect. Deltas are states, so they travel, batch (join deltas into a
delta group) and deduplicate exactly like full states. `tests/crdt/conformance.py` checks
these laws on every subclass.

`merge` is synchronous and mutates in place: it is called on the event loop for every delta
received, so it must be cheap and never await.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Self

from peertrain.protocol.packing import pack

from .wire import Wire


class Lattice(ABC):
    """A join-semilattice state; subclasses define `merge`, `copy`, `to_wire` and `__eq__`."""

    __slots__ = ()

    @abstractmethod
    def merge(self, other: Self) -> None:
        """Join `other` into `self` (least upper bound), in place."""

    @abstractmethod
    def copy(self) -> Self:
        """An independent copy (mutating it never changes `self`)."""

    @abstractmethod
    def to_wire(self) -> Wire:
        """The canonical msgpack-ready form (see `wire.py`)."""

    @abstractmethod
    def __eq__(self, other: object) -> bool: ...

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.to_wire()!r})"

    def join(self, other: Self) -> Self:
        """`self ⊔ other` as a new value."""
        result = self.copy()
        result.merge(other)
        return result

    def leq(self, other: Self) -> bool:
        """`self ⊑ other`: merging `self` into `other` would change nothing."""
        return other.join(self) == other

    def encode(self) -> bytes:
        """Canonical bytes: equal states encode identically."""
        return pack(self.to_wire())
