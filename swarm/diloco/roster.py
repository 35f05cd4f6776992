"""Whose updates a round counts: the group of the last round, plus a few newcomers.

A lease in RunState costs a stranger one signature, so "every live member holding state for the
round" would let a wave of fresh IDs into the very next round, outnumber the honest members and
move any robust rule. The roster grows instead by at most `admit_per_round` newcomers per round
and holds at most `max_members`: N Sybils take N / admit_per_round rounds to arrive, during
which honest rounds go on, and never exceed the cap. Anchors are never kept out.

Newcomers are ranked by a hash of (round, state checksum the round starts from, peer ID): every
member that agrees on the start state computes the same roster, and nobody can grind IDs for a
good rank before that state exists. In invite runs only certified members are candidates and no
rate applies (the creator already chose them).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable


class Roster:
    """The counted group, round by round, as one member computes it."""

    def __init__(
        self, *, max_members: int, admit_per_round: int | None, protected: Iterable[str] = ()
    ) -> None:
        self.max_members = max_members
        self.admit_per_round = admit_per_round  # None: no rate (invite runs)
        self.protected = frozenset(protected)
        self.round = -1
        self.counted: frozenset[str] = frozenset()

    def advance(self, round_: int, candidates: set[str], salt: bytes) -> frozenset[str]:
        """The group of `round_`, from the live members holding its start state (`candidates`).
        Computed once per round: later calls for the same round return the same group."""
        if round_ == self.round:
            return self.counted
        kept = {p for p in self.counted if p in candidates}
        kept |= self.protected & candidates
        newcomers = sorted(candidates - kept, key=lambda p: _rank(round_, salt, p))
        room = max(self.max_members - len(kept), 0)
        if self.admit_per_round is not None:
            room = min(room, self.admit_per_round)
        self.round, self.counted = round_, frozenset(kept | set(newcomers[:room]))
        return self.counted

    def seed(self, members: set[str]) -> None:
        """A joiner takes the group it found (capped) as the last round's."""
        self.counted = frozenset(sorted(members)[: self.max_members]) | (self.protected & members)


def _rank(round_: int, salt: bytes, peer: str) -> bytes:
    return hashlib.blake2b(b"%d|" % round_ + salt + peer.encode(), digest_size=16).digest()
