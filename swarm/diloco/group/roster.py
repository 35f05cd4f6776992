"""Whose updates a round counts: the group of the last round, plus a few newcomers.

A lease in RunState costs a stranger one signature, so "every live member holding state for the
round" would let a wave of fresh IDs into the very next round, outnumber the honest members and
move any robust rule. The roster grows instead by at most `admit_per_round` newcomers per round
and holds at most `max_members`: N Sybils take N / admit_per_round rounds to arrive, during
which honest rounds go on, and never exceed the cap. Anchors are never kept out, and a member's
first group may hold the quorum the creator signed (`min_members`) at once.

Newcomers are ranked by a hash of (round, state checksum the round starts from, peer ID): every
member that agrees on the start state computes the same roster, and nobody can grind IDs for a
good rank before that state exists. In invite runs only certified members are candidates and no
rate applies (the creator already chose them).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

from peertrain.crdt.admission import Admission
from peertrain.crdt.runstate import RunState


class Roster:
    """The counted group, round by round, as one member computes it."""

    def __init__(
        self,
        *,
        max_members: int,
        admit_per_round: int | None,
        protected: Iterable[str] = (),
        first_round: int = 1,
    ) -> None:
        self.max_members = max_members
        self.admit_per_round = admit_per_round  # None: no rate (invite runs)
        self.first_round = first_round  # the quorum the creator signed (min_members) starts at once
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
            rate = self.admit_per_round
            if self.round < 0 and not self.counted:  # our first group: the signed quorum
                rate = max(rate, self.first_round - len(kept))
            room = min(room, rate)
        self.round, self.counted = round_, frozenset(kept | set(newcomers[:room]))
        return self.counted

    def contributed(self, senders: set[str]) -> None:
        """After a round: whoever was counted but sent nothing in time is a newcomer again (a
        member that announces states but withholds updates would hold every round to its
        deadline otherwise)."""
        self.counted = self.counted & frozenset(senders)

    def seed(self, members: set[str]) -> None:
        """Take `members` (capped) as the last round's group: a joiner's start, or the group of
        a trusted record whose round we applied again."""
        self.counted = frozenset(sorted(members)[: self.max_members]) | (self.protected & members)


def _rank(round_: int, salt: bytes, peer: str) -> bytes:
    return hashlib.blake2b(b"%d|" % round_ + salt + peer.encode(), digest_size=16).digest()


def expected_members(state: RunState, me: str, round_: int) -> set[str]:
    """Whose updates round `round_` waits for before a driver exists: the live members that hold
    state for it, and `me`. A driver replaces it on its gossip with its counted group (the
    roster: roster.py), which a wave of fresh IDs cannot flood."""
    live = {p for p in state.members() if state.is_live(p)} | {me}
    providers = set()
    for provs in state.checkpoints().get(round_, {}).values():
        providers |= set(provs)
    return (live & providers) | {me}


class CountedGroup:
    """The roster read against RunState: who may send, whom a round waits for."""

    def __init__(self, state: RunState, admission: Admission, roster: Roster, me: str) -> None:
        self.state, self.admission, self.roster, self.me = state, admission, roster, me

    def candidates(self, round_: int) -> set[str]:
        """Live members (admitted ones, in invite runs) that hold a state of `round_`, and us."""
        providers: set[str] = set()
        for provs in self.state.checkpoints().get(round_, {}).values():
            providers |= set(provs)
        admitted = {p for p in providers if self.state.is_live(p) and self.admission.admits(p)}
        return admitted | {self.me}

    def of_round(self, round_: int, salt: bytes) -> frozenset[str]:
        """The counted group of `round_` (the roster decides once per round). Last round's
        members stay while their lease does, whether or not they announced this round's start
        state yet: one that repaired its state (a download, seconds under load) announced it
        after we decided, was left out and, always a step behind, never got back in (seen: an
        anchor alone for four rounds beside three honest members). One that is gone costs the
        round its deadline once, then `contributed` drops it. For the same reason a newcomer
        may hold the state of the round before: a restarted member adopts each new state a
        download's time after the group decided, and stayed a newcomer one step behind for
        good (seen in the churn run; announcing an older state costs a stranger no more than
        announcing the newest, and the rate still applies)."""
        candidates = self.candidates(round_) | self.candidates(round_ - 1) | self.live_counted()
        return self.roster.advance(round_, candidates, salt) | {self.me}

    def expected(self, round_: int) -> set[str]:
        """Whose updates round `round_` waits for: the counted group's live members."""
        if round_ != self.roster.round:
            return self.candidates(round_) & (set(self.roster.counted) | {self.me})
        return self.live_counted() | {self.me}

    def live_counted(self) -> set[str]:
        return {p for p in self.roster.counted if self.state.is_live(p)}

    def may_send(self, peer: str) -> bool:
        """Whose updates the gossip pulls (and whom it asks for copies): the counted group."""
        return peer == self.me or (peer in self.roster.counted and self.state.is_live(peer))
