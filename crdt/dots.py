"""Dots and causal contexts: what a replica has seen, compactly.

A dot `(replica, seq)` names one event, the seq-th write of that replica. A causal context is
the set of dots a state has seen, kept as a version vector (every seq up to `vv[r]` seen) plus
a dot cloud (seen seqs above `vv[r]`, left by lost or reordered deltas). `compact` folds the
cloud into the vector whenever the gap closes, so a replica that received everything costs one
integer per writer.

On the wire: `[[replica, vv, [cloud seqs ascending]], ...]` sorted by replica.
"""

from __future__ import annotations

from collections.abc import Iterator

from peertrain.protocol.errors import DecodeError

from .wire import Wire, check_ascending, read_int, read_list, read_str

Dot = tuple[str, int]


class CausalContext:
    """A set of dots as version vector + dot cloud; canonical after every public call."""

    __slots__ = ("_vv", "_cloud")

    def __init__(self) -> None:
        self._vv: dict[str, int] = {}
        self._cloud: dict[str, set[int]] = {}

    def contains(self, replica: str, seq: int) -> bool:
        return seq <= self._vv.get(replica, 0) or seq in self._cloud.get(replica, ())

    def max_seq(self, replica: str) -> int:
        cloud = self._cloud.get(replica)
        return max(cloud) if cloud else self._vv.get(replica, 0)

    def replicas(self) -> set[str]:
        return set(self._vv) | set(self._cloud)

    def dots(self, replica: str) -> Iterator[int]:
        """Every seq of `replica` in the context (may be long: mind the version vector)."""
        yield from range(1, self._vv.get(replica, 0) + 1)
        yield from sorted(self._cloud.get(replica, ()))

    def cloud_size(self) -> int:
        return sum(len(c) for c in self._cloud.values())

    def add(self, replica: str, seq: int) -> None:
        if not self.contains(replica, seq):
            self._cloud.setdefault(replica, set()).add(seq)
            self._compact(replica)

    def raise_floor(self, replica: str, floor: int) -> None:
        """Mark every seq of `replica` up to `floor` as seen."""
        if floor > self._vv.get(replica, 0):
            self._vv[replica] = floor
            self._compact(replica)

    def merge(self, other: CausalContext) -> None:
        for replica in other.replicas():
            self.merge_replica(other, replica)

    def merge_replica(self, other: CausalContext, replica: str) -> None:
        theirs = other._vv.get(replica, 0)
        if theirs > self._vv.get(replica, 0):
            self._vv[replica] = theirs
        if replica in other._cloud:
            self._cloud.setdefault(replica, set()).update(other._cloud[replica])
        self._compact(replica)

    def project(self, replica: str) -> CausalContext:
        """Only `replica`'s dots."""
        out = CausalContext()
        if replica in self._vv:
            out._vv[replica] = self._vv[replica]
        if replica in self._cloud:
            out._cloud[replica] = set(self._cloud[replica])
        return out

    def drop(self, replica: str) -> None:
        self._vv.pop(replica, None)
        self._cloud.pop(replica, None)

    def copy(self) -> CausalContext:
        out = CausalContext()
        out._vv = dict(self._vv)
        out._cloud = {r: set(c) for r, c in self._cloud.items()}
        return out

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, CausalContext):
            return NotImplemented
        return self._vv == other._vv and self._cloud == other._cloud

    __hash__ = None  # type: ignore[assignment]

    def _compact(self, replica: str) -> None:
        vv = self._vv.get(replica, 0)
        cloud = self._cloud.get(replica)
        if cloud:
            cloud.difference_update([s for s in cloud if s <= vv])
            while vv + 1 in cloud:
                vv += 1
                cloud.discard(vv)
            if not cloud:
                del self._cloud[replica]
        if vv:
            self._vv[replica] = vv
        else:
            self._vv.pop(replica, None)

    def to_wire(self) -> Wire:
        return [
            [r, self._vv.get(r, 0), sorted(self._cloud.get(r, ()))] for r in sorted(self.replicas())
        ]

    @classmethod
    def from_wire(
        cls, obj: Wire, *, max_replicas: int, max_cloud: int, replica_len: int = 128
    ) -> CausalContext:
        rows = read_list(obj, "causal context", max_len=max_replicas)
        out = cls()
        for row in rows:
            replica, vv, cloud = read_list(row, "context row", max_len=3, length=3)
            replica = read_str(replica, "context replica", max_len=replica_len)
            vv = read_int(vv, "version vector entry")
            cloud = read_list(cloud, "dot cloud", max_len=max_cloud)
            seqs = [read_int(s, "cloud seq", lo=1) for s in cloud]
            check_ascending(seqs, "dot cloud")
            if seqs and seqs[0] <= vv + 1:
                raise DecodeError("dot cloud is not compact (a seq at or next to the vector)")
            if not vv and not seqs:
                raise DecodeError("empty causal context row")
            if vv:
                out._vv[replica] = vv
            if seqs:
                out._cloud[replica] = set(seqs)
        check_ascending([row[0] for row in rows], "causal context replicas")
        if out.cloud_size() > max_cloud:
            raise DecodeError(f"dot clouds hold more than {max_cloud} dots in all")
        return out
