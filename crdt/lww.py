"""Last-writer-wins register ordered by hybrid-clock stamps.

The register holds one value and the `Stamp` (wall ms, counter, writer) of the write that set
it; the join keeps the greater stamp. Stamps from distinct writers never tie (the writer ID is
part of them), and an honest writer never reuses a stamp; should a lying writer send two values
under one stamp, the value with the greater canonical bytes wins, so replicas still converge.

Wire: `nil` (never written) or `[wall_ms, counter, writer, value]`.
"""

from __future__ import annotations

from typing import Generic, Self, TypeVar

from .hlc import MAX_COUNTER, Stamp
from .lattice import Lattice
from .wire import MAX_SEQ, Codec, Wire, read_int, read_list, read_str

V = TypeVar("V")


class LWWRegister(Lattice, Generic[V]):
    """A register whose `set` returns the delta (a register holding just the new write)."""

    __slots__ = ("codec", "stamp", "value")

    def __init__(self, codec: Codec[V], stamp: Stamp | None = None, value: V | None = None) -> None:
        self.codec = codec
        self.stamp = stamp
        self.value = value

    def set(self, value: V, stamp: Stamp) -> Self:
        delta = type(self)(self.codec, stamp, value)
        self.merge(delta)
        return delta

    def merge(self, other: Self) -> None:
        if other.stamp is None:
            return
        if (
            self.stamp is None
            or other.stamp > self.stamp
            or (
                other.stamp == self.stamp
                and self.codec.sort_key(other.value) > self.codec.sort_key(self.value)  # type: ignore[arg-type]
            )
        ):
            self.stamp, self.value = other.stamp, other.value

    def copy(self) -> Self:
        return type(self)(self.codec, self.stamp, self.value)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, LWWRegister):
            return NotImplemented
        return self.stamp == other.stamp and self.value == other.value

    def to_wire(self) -> Wire:
        if self.stamp is None:
            return None
        wall, counter, writer = self.stamp
        return [wall, counter, writer, self.codec.encode(self.value)]  # type: ignore[arg-type]

    @classmethod
    def from_wire(cls, obj: Wire, codec: Codec[V]) -> LWWRegister[V]:
        if obj is None:
            return cls(codec)
        return cls(codec, *read_stamped(obj, codec))


def read_stamped(obj: Wire, codec: Codec[V]) -> tuple[Stamp, V]:
    wall, counter, writer, value = read_list(obj, "LWW write", max_len=4, length=4)
    stamp = Stamp(
        read_int(wall, "stamp wall ms", hi=MAX_SEQ),
        read_int(counter, "stamp counter", hi=MAX_COUNTER),
        read_str(writer, "stamp writer", max_len=128),
    )
    return stamp, codec.decode(value)
