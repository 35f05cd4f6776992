"""The run's replicated document as one lattice: members, progress, checkpoints, bans.

`RunDoc` composes the basic CRDTs; its join is the join of each part, so it is a CRDT too and
deltas of it are `RunDoc`s. Every part is keyed by the peer that owns it:

- `members`: LWW map peer → `MemberInfo`; only the peer itself writes its entry;
- `progress`: G-counter, one slot per peer;
- `checkpoints`: OR-set of `CheckpointRef`; a dot's replica is the peer that serves the copy,
  so `holders(ref)` lists the providers;
- `bans`: OR-set of `BanVote`; a dot's replica is the voter;
- `scores`: LWW map scorer → `ScoreCard` (crdt/scorecard.py); only the scorer writes its card.
  It travels as a fifth wire field only when some card exists, so documents without scores
  (every run that does not score) keep the four-field encoding, and their digests.

`writers()` lists every peer a document writes for; a signed delta is acceptable only when that
is exactly its signer (`RunState.apply_remote`). Windows bound each owner's sets; they are part
of the lattice's definition, so every peer must use the same values (protocol constants).
"""

from __future__ import annotations

from typing import Self, TypeVar

from peertrain.protocol.errors import DecodeError

from .counters import GCounter
from .lattice import Lattice
from .lwwmap import LWWMap
from .orset import AWORSet
from .records import BAN, CHECKPOINT, MEMBER, PEER, BanVote, CheckpointRef, MemberInfo
from .scorecard import SCORE_CARD, ScoreCard
from .wire import Codec, Wire, read_list

E = TypeVar("E")

CHECKPOINT_WINDOW = 32  # a provider's last 32 checkpoint announcements stay live
BAN_WINDOW = 16


class RunDoc(Lattice):
    """Members, progress, checkpoints and bans of one run, or a delta of them."""

    __slots__ = ("members", "progress", "checkpoints", "bans", "scores")

    def __init__(self) -> None:
        self.members: LWWMap[str, MemberInfo] = LWWMap(PEER, MEMBER)
        self.progress = GCounter()
        self.checkpoints: AWORSet[CheckpointRef] = AWORSet(CHECKPOINT, window=CHECKPOINT_WINDOW)
        self.bans: AWORSet[BanVote] = AWORSet(BAN, window=BAN_WINDOW)
        self.scores: LWWMap[str, ScoreCard] = LWWMap(PEER, SCORE_CARD)

    @classmethod
    def of(
        cls,
        *,
        members: LWWMap[str, MemberInfo] | None = None,
        progress: GCounter | None = None,
        checkpoints: AWORSet[CheckpointRef] | None = None,
        bans: AWORSet[BanVote] | None = None,
        scores: LWWMap[str, ScoreCard] | None = None,
    ) -> RunDoc:
        """A document holding the given component deltas (the others empty)."""
        out = cls()
        out.members = members if members is not None else out.members
        out.progress = progress if progress is not None else out.progress
        out.checkpoints = checkpoints if checkpoints is not None else out.checkpoints
        out.bans = bans if bans is not None else out.bans
        out.scores = scores if scores is not None else out.scores
        return out

    def merge(self, other: Self) -> None:
        self.members.merge(other.members)
        self.progress.merge(other.progress)
        self.checkpoints.merge(other.checkpoints)
        self.bans.merge(other.bans)
        self.scores.merge(other.scores)

    def copy(self) -> Self:
        out = type(self)()
        out.members = self.members.copy()
        out.progress = self.progress.copy()
        out.checkpoints = self.checkpoints.copy()
        out.bans = self.bans.copy()
        out.scores = self.scores.copy()
        return out

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, RunDoc):
            return NotImplemented
        return (
            self.members == other.members
            and self.progress == other.progress
            and self.checkpoints == other.checkpoints
            and self.bans == other.bans
            and self.scores == other.scores
        )

    def owners(self) -> set[str]:
        """Peers with any slot in this document."""
        return (
            self.members.keys()
            | self.progress.replicas()
            | self.checkpoints.replicas()
            | self.bans.replicas()
            | self.scores.keys()
        )

    def writers(self) -> set[str]:
        """Every peer this document writes for: slot owners and register stamp writers."""
        stamped = {stamp.writer for _, stamp, _ in self.members.registers()}
        stamped |= {stamp.writer for _, stamp, _ in self.scores.registers()}
        return self.owners() | stamped

    def has_scores(self) -> bool:
        return next(self.scores.registers(), None) is not None

    def is_empty(self) -> bool:
        return not self.owners()

    def project(self, owner: str) -> RunDoc:
        """Only `owner`'s slots: what `owner` alone may sign."""
        out = RunDoc()
        out.members = self.members.project(owner)
        out.progress = self.progress.project(owner)
        out.checkpoints = self.checkpoints.project(owner)
        out.bans = self.bans.project(owner)
        out.scores = self.scores.project(owner)
        return out

    def drop(self, owner: str) -> None:
        """Forget `owner` entirely (garbage collection of an expired member)."""
        self.members.drop(owner)
        self.progress.drop(owner)
        self.checkpoints.drop(owner)
        self.bans.drop(owner)
        self.scores.drop(owner)

    def to_wire(self) -> Wire:
        wire = [
            self.members.to_wire(),
            self.progress.to_wire(),
            self.checkpoints.to_wire(),
            self.bans.to_wire(),
        ]
        return [*wire, self.scores.to_wire()] if self.has_scores() else wire

    @classmethod
    def from_wire(cls, obj: Wire, *, max_owners: int = 1) -> RunDoc:
        """Strict decode; `max_owners=1` for signed deltas, which carry one owner's slots."""
        fields = read_list(obj, "run document", max_len=5)
        if len(fields) not in (4, 5):
            raise DecodeError(f"a run document has 4 or 5 fields, not {len(fields)}")
        members, progress, checkpoints, bans = fields[:4]
        out = cls()
        if len(fields) == 5:
            out.scores = LWWMap.from_wire(fields[4], PEER, SCORE_CARD, max_entries=max_owners)
            if not out.has_scores():
                raise DecodeError("an empty score map is encoded by leaving it out")
        out.members = LWWMap.from_wire(members, PEER, MEMBER, max_entries=max_owners)
        out.progress = GCounter.from_wire(progress, max_replicas=max_owners)
        out.checkpoints = _windowed_set(checkpoints, CHECKPOINT, CHECKPOINT_WINDOW, max_owners)
        out.bans = _windowed_set(bans, BAN, BAN_WINDOW, max_owners)
        return out


def _windowed_set(obj: Wire, codec: Codec[E], window: int, max_owners: int) -> AWORSet[E]:
    """An add-wins set of at most `window` entries per owner, strictly decoded."""
    return AWORSet.from_wire(
        obj, codec, window=window, max_entries=window * max_owners, max_replicas=max_owners
    )
