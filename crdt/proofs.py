"""`ProofStore`: the signed envelopes that back each owner's slots, kept to be forwarded.

Anti-entropy sends a partner what it lacks, but we may only send another owner's slots as that
owner signed them. So for every owner we keep the newest snapshot it signed and the deltas it
signed after that snapshot (a snapshot with seq n subsumes every delta with seq <= n), at most
`max_deltas` of them: the oldest go first. Evicting is safe: the data stays merged in our state;
only our ability to *prove* it to others lapses until the owner's next snapshot reaches us (an
owner serves a fresh snapshot of itself to every partner). Memory per owner is thus bounded by
`(1 + max_deltas) * MAX_DELTA_ENVELOPE` whatever the owner sends.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .signed import SignedDelta


@dataclass(slots=True)
class _OwnerProofs:
    snapshot_seq: int = -1
    snapshot: bytes | None = None
    deltas: dict[int, bytes] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class ProofStoreStatistics:
    owners: int
    envelopes: int
    bytes: int


class ProofStore:
    """Per-owner signed snapshot + later deltas, bounded."""

    def __init__(self, *, max_deltas: int = 8) -> None:
        self.max_deltas = max_deltas
        self._owners: dict[str, _OwnerProofs] = {}

    def add(self, delta: SignedDelta) -> bool:
        """Keep `delta` if it adds to what we can prove; return whether it was kept."""
        proofs = self._owners.setdefault(delta.signer, _OwnerProofs())
        if delta.seq <= proofs.snapshot_seq:
            return False
        if delta.snapshot:
            proofs.snapshot_seq, proofs.snapshot = delta.seq, delta.raw
            proofs.deltas = {s: raw for s, raw in proofs.deltas.items() if s > delta.seq}
            return True
        if delta.seq in proofs.deltas:
            return False
        proofs.deltas[delta.seq] = delta.raw
        while len(proofs.deltas) > self.max_deltas:
            del proofs.deltas[min(proofs.deltas)]
        return delta.seq in proofs.deltas

    def envelopes(self, owner: str) -> list[bytes]:
        proofs = self._owners.get(owner)
        if proofs is None:
            return []
        head = [proofs.snapshot] if proofs.snapshot is not None else []
        return head + [proofs.deltas[s] for s in sorted(proofs.deltas)]

    def drop(self, owner: str) -> None:
        self._owners.pop(owner, None)

    def statistics(self) -> ProofStoreStatistics:
        envelopes = [raw for owner in self._owners for raw in self.envelopes(owner)]
        return ProofStoreStatistics(
            owners=len(self._owners),
            envelopes=len(envelopes),
            bytes=sum(len(raw) for raw in envelopes),
        )
