"""Add-wins observed-remove set with dots, optionally windowed per writer.

Each add creates a fresh dot `(replica, seq)` tagged with the element; a remove deletes the dots
it has observed by putting them in its causal context without an entry. A dot is present iff
some replica holds it as an entry and no replica's context covers it without the entry, so an
add concurrent with a remove survives (add wins). An element present under several dots has
several *holders* (`holders(e)`): the RunState checkpoint registry uses this to list who serves
a checkpoint, and lets each peer add and remove only its own dots.

Bounded memory (`window=W`): only a writer's last W seqs may be live. Dots at or below
`max_seq(r) - W` are treated as seen and removed. That rule grows with the context, so it is a
closure on the lattice and merges stay commutative, associative and idempotent; it caps both
entries and dot cloud at W per writer whatever that writer sends. A writer that wants an old
element kept past W newer writes re-adds it (`add` also retires its own older dot for it).

Wire: `[[[replica, seq, element], ...] sorted by dot, causal context]`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Generic, Self, TypeVar

from peertrain.protocol.errors import DecodeError

from .dots import CausalContext
from .lattice import Lattice
from .wire import Codec, Wire, check_ascending, read_int, read_list, read_str

E = TypeVar("E")


class AWORSet(Lattice, Generic[E]):
    """Add-wins OR-set; `add`/`remove` return deltas and apply them locally."""

    __slots__ = ("codec", "window", "_entries", "_context")

    def __init__(self, codec: Codec[E], *, window: int | None = None) -> None:
        if window is not None and window < 1:
            raise ValueError("window must be positive")
        self.codec = codec
        self.window = window
        self._entries: dict[str, dict[int, E]] = {}
        self._context = CausalContext()

    # -- reading

    def elements(self) -> set[E]:
        return {e for by_seq in self._entries.values() for e in by_seq.values()}

    def __contains__(self, element: object) -> bool:
        return any(element in by_seq.values() for by_seq in self._entries.values())

    def __len__(self) -> int:
        return len(self.elements())

    def holders(self, element: E) -> set[str]:
        """Replicas with a live dot for `element`."""
        return {r for r, by_seq in self._entries.items() if element in by_seq.values()}

    def entries(self) -> Iterator[tuple[str, int, E]]:
        for r, by_seq in self._entries.items():
            for seq, e in by_seq.items():
                yield r, seq, e

    def entry_count(self) -> int:
        return sum(len(by_seq) for by_seq in self._entries.values())

    @property
    def context(self) -> CausalContext:
        return self._context

    def replicas(self) -> set[str]:
        return self._context.replicas()

    # -- delta mutators

    def add(self, replica: str, element: E, *, min_seq: int = 1) -> Self:
        """Add `element` under a fresh dot of `replica`, retiring `replica`'s older dots for it.

        `min_seq` lets a writer that may have forgotten its own earlier dots (a restart) start
        above them; see `RunWriter`.
        """
        delta = self._empty()
        seq = max(self._context.max_seq(replica) + 1, min_seq)
        delta._entries[replica] = {seq: element}
        delta._context.add(replica, seq)
        for old_seq, e in self._entries.get(replica, {}).items():
            if e == element:
                delta._context.add(replica, old_seq)
        delta._apply_window(replica)
        self.merge(delta)
        return delta

    def remove(self, element: E, *, replica: str | None = None) -> Self:
        """Remove the observed dots of `element` (only `replica`'s, if given)."""
        delta = self._empty()
        for r, seq, e in list(self.entries()):
            if e == element and (replica is None or r == replica):
                delta._context.add(r, seq)
        for r in delta._context.replicas():
            delta._apply_window(r)
        self.merge(delta)
        return delta

    # -- lattice

    def merge(self, other: Self) -> None:
        for r, theirs in other._entries.items():
            mine = self._entries.get(r)
            for seq, e in theirs.items():
                if mine is not None and seq in mine:
                    if mine[seq] != e:  # one dot, two elements: only a lying writer does that
                        mine[seq] = max(mine[seq], e, key=self.codec.sort_key)
                elif not self._context.contains(r, seq):
                    mine = self._entries.setdefault(r, {})
                    mine[seq] = e
        for r in other._context.replicas():
            mine = self._entries.get(r)
            if mine:
                theirs = other._entries.get(r, {})
                for seq in [s for s in mine if s not in theirs and other._context.contains(r, s)]:
                    del mine[seq]
                if not mine:
                    del self._entries[r]
            self._context.merge_replica(other._context, r)
            self._apply_window(r)

    def copy(self) -> Self:
        out = self._empty()
        out._entries = {r: dict(by_seq) for r, by_seq in self._entries.items()}
        out._context = self._context.copy()
        return out

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, AWORSet):
            return NotImplemented
        return self._entries == other._entries and self._context == other._context

    # -- per-replica slices (ownership checks, garbage collection)

    def project(self, replica: str) -> Self:
        out = self._empty()
        if replica in self._entries:
            out._entries[replica] = dict(self._entries[replica])
        out._context = self._context.project(replica)
        return out

    def drop(self, replica: str) -> None:
        self._entries.pop(replica, None)
        self._context.drop(replica)

    def _empty(self) -> Self:
        return type(self)(self.codec, window=self.window)

    def _apply_window(self, replica: str) -> None:
        if self.window is None:
            return
        floor = self._context.max_seq(replica) - self.window
        if floor <= 0:
            return
        self._context.raise_floor(replica, floor)
        mine = self._entries.get(replica)
        if mine:
            for seq in [s for s in mine if s <= floor]:
                del mine[seq]
            if not mine:
                del self._entries[replica]

    # -- wire

    def to_wire(self) -> Wire:
        rows = [
            [r, seq, self.codec.encode(by_seq[seq])]
            for r, by_seq in sorted(self._entries.items())
            for seq in sorted(by_seq)
        ]
        return [rows, self._context.to_wire()]

    @classmethod
    def from_wire(
        cls,
        obj: Wire,
        codec: Codec[E],
        *,
        window: int | None = None,
        max_entries: int,
        max_replicas: int,
    ) -> AWORSet[E]:
        rows, ctx = read_list(obj, "OR-set", max_len=2, length=2)
        out = cls(codec, window=window)
        max_cloud = max_entries if window is None else window * max_replicas
        out._context = CausalContext.from_wire(ctx, max_replicas=max_replicas, max_cloud=max_cloud)
        keys = []
        for row in read_list(rows, "OR-set entries", max_len=max_entries):
            r, seq, e = read_list(row, "OR-set entry", max_len=3, length=3)
            r, seq = read_str(r, "entry replica", max_len=128), read_int(seq, "entry seq", lo=1)
            if not out._context.contains(r, seq):
                raise DecodeError("OR-set entry outside its own causal context")
            out._entries.setdefault(r, {})[seq] = codec.decode(e)
            keys.append((r, seq))
        check_ascending(keys, "OR-set entries")
        for r in out._context.replicas():
            out._apply_window(r)
        return out
