"""Whose updates a round counts: the group of the last round, plus a few newcomers.

A lease in RunState costs a stranger one signature, so "every live member holding state for the
round" would let a wave of fresh IDs into the very next round, outnumber the honest members and
move any robust rule. The roster grows instead by at most `admit_per_round` newcomers per round
and holds at most `max_members`: N Sybils take N / admit_per_round rounds to arrive, during
which honest rounds go on, and never exceed the cap. Anchors are never kept out, and a member's
first group may hold the quorum the creator signed (`min_members`) at once.

With contribution scores (`rated`: the scorers' ratings, group/scoring.py), arriving is not
enough: a newcomer counts only once it has earned a rating, the best-rated first, and a member
whose rating collapsed stops counting. Until then it is a candidate, and up to
`admit_per_round` candidates a round are on probation: the scorers pull and rate their updates,
candidates part-way through their evaluation first, unrated ones next, refused ones last.

The members present when the run starts (round 0, up to `max_members`) are its founders. Round
0 counts the anchors alone and rates every founder's update; a founder whose first rating says
it worked (rating.founded) counts from round 1, ahead of the rate, and the others earn a place
as newcomers do. Counting founders unrated instead let eight free riders beside four honest
members into the aggregates of rounds 0 and 1 (a rating collapses only at its second
evaluation), which cost the honest run about a round; queueing honest founders behind
probation at the rate cost more (counted from round 5 to 8, ending 25% above the run without
free riders).

Newcomers are ranked by a hash of (round, state checksum the round starts from, peer ID): every
member that agrees on the start state computes the same roster, and nobody can grind IDs for a
good rank before that state exists. In invite runs only certified members are candidates and no
rate applies (the creator already chose them).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable

from peertrain.crdt.admission import Admission
from peertrain.crdt.runstate import RunState
from peertrain.crdt.scorecard import Rating
from peertrain.swarm.diloco.member.run_spec import DiLoCoSpec
from peertrain.swarm.scoring.rating import collapsed, earned, founded, refused

Rated = Callable[[str], Rating | None]


class Roster:
    """The counted group, round by round, as one member computes it."""

    def __init__(
        self,
        *,
        max_members: int,
        admit_per_round: int | None,
        protected: Iterable[str] = (),
        first_round: int = 1,
        rated: Rated | None = None,
    ) -> None:
        self.max_members = max_members
        self.admit_per_round = admit_per_round  # None: no rate (invite runs)
        self.first_round = first_round  # the quorum the creator signed (min_members) starts at once
        self.protected = frozenset(protected)
        self.round = -1
        self.counted: frozenset[str] = frozenset()
        self.rated = rated  # contribution scores: whose work earned a place (None: off)
        self.probation: frozenset[str] = frozenset()  # candidates the scorers rate this round
        self.lapsed: frozenset[str] = frozenset()  # counted, then late once (with scores)
        self.founders: frozenset[str] = frozenset()  # round 0's candidates (with scores)

    def advance(self, round_: int, candidates: set[str], salt: bytes) -> frozenset[str]:
        """The group of `round_`, from the live members holding its start state (`candidates`).
        Computed once per round: later calls for the same round return the same group."""
        if round_ == self.round:
            return self.counted
        kept = {p for p in self.counted if p in candidates and not self._collapsed(p)}
        kept |= self.protected & candidates
        if round_ == 0 and self.rated is not None and kept:
            return self._found(salt, candidates, frozenset(kept))
        founding = round_ == 0 or self.rated is None  # the signed quorum needs no rating
        eligible = candidates - kept
        if not founding:
            eligible = {p for p in eligible if earned(self._rating(p)) or self._returns(p)}
            eligible |= {p for p in candidates - kept if self._founded(p)}
        order = sorted(eligible, key=lambda p: self._order(round_, salt, p))
        room = max(self.max_members - len(kept), 0)
        first = [p for p in order if self._founded(p)][:room]  # founders need no rate
        kept |= set(first)
        newcomers = [p for p in order if p not in kept]
        room -= len(first)
        if self.admit_per_round is not None:
            rate = self.admit_per_round
            if self.round < 0 and not self.counted:  # our first group: the signed quorum
                rate = max(rate, self.first_round - len(kept))
            if founding and self.rated is not None:  # scores, but no anchor at round 0 to
                rate = room  # rate the founders: they count at once, ratings prune them later
            room = min(room, rate)
        self.round, self.counted = round_, frozenset(kept | set(newcomers[:room]))
        self.lapsed -= self.counted
        self.probation = self._probation(round_, salt, candidates - self.counted)
        return self.counted

    def _found(self, salt: bytes, candidates: set[str], anchors: frozenset[str]) -> frozenset[str]:
        """Round 0 with scores: the anchors count, every other member present founds the run and
        is on probation (bounded by `max_members`, chosen by the unguessable rank)."""
        others = sorted(candidates - anchors, key=lambda p: _rank(0, salt, p))
        self.founders = frozenset(others[: self.max_members])
        self.round, self.counted, self.probation = 0, anchors, self.founders
        return self.counted

    def _founded(self, peer: str) -> bool:
        return peer in self.founders and founded(self._rating(peer))

    def _rating(self, peer: str) -> Rating | None:
        return self.rated(peer) if self.rated is not None else None

    def _collapsed(self, peer: str) -> bool:
        return peer not in self.protected and collapsed(self._rating(peer))

    def _order(self, round_: int, salt: bytes, peer: str) -> tuple[float, bytes]:
        """Best-rated first (all equal without scores), then the unguessable hash."""
        rating = self._rating(peer)
        return (-rating.rating if rating is not None else 0.0, _rank(round_, salt, peer))

    def _probation(self, round_: int, salt: bytes, candidates: set[str]) -> frozenset[str]:
        if self.rated is None:
            return frozenset()

        def order(peer: str) -> tuple[int, bytes]:
            rating = self._rating(peer)
            if rating is None:
                tier = 1
            else:
                tier = 2 if refused(rating) else 0  # part-way through first
            return tier, _rank(round_, salt, peer)

        slots = self.admit_per_round or self.max_members
        return frozenset(sorted(candidates, key=order)[:slots])

    def contributed(self, senders: set[str]) -> None:
        """After a round: whoever was counted but sent nothing in time is a newcomer again (a
        member that announces states but withholds updates would hold every round to its
        deadline otherwise)."""
        lapsed = self.counted - frozenset(senders)
        self.counted = self.counted & frozenset(senders)
        if self.rated is not None:  # bounded: at most a group's worth
            self.lapsed = frozenset(sorted(self.lapsed | lapsed)[: self.max_members])

    def _returns(self, peer: str) -> bool:
        """With scores: a member that lapsed (late once, on a loaded machine) comes back on the
        rating it has, if its work was rated and has not collapsed, without earning a place
        anew: founders dropped in their first rounds queued behind probationers for rounds
        and the group trained with half its members (seen: 12 daemons on two cores)."""
        rating = self._rating(peer)
        return peer in self.lapsed and rating is not None and not collapsed(rating)

    def seed(self, members: set[str]) -> None:
        """Take `members` (capped) as the last round's group: a joiner's start, or the group of
        a trusted record whose round we applied again."""
        self.counted = frozenset(sorted(members)[: self.max_members]) | (self.protected & members)


def roster_for(spec: DiLoCoSpec, admission: Admission, *, rated: Rated | None) -> Roster:
    """Open runs: a rate and a cap, anchors always in (with contribution scores, newcomers
    count once `rated` says so); invite runs: certified members only, no rate."""
    invite = admission.invite
    return Roster(
        max_members=spec.max_members,
        admit_per_round=None if invite else spec.admit_per_round,
        protected=() if invite else admission.anchors,
        first_round=spec.min_members,
        rated=rated,
    )


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
        self.scores_probation = False  # a scorer pulls the probationers' updates too

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
        counted = self.roster.advance(round_, candidates, salt)
        if self.roster.rated is not None and self.me not in counted:
            return counted  # with scores, an uncounted member's update is not ours to add either
        return counted | {self.me}

    def expected(self, round_: int) -> set[str]:
        """Whose updates round `round_` waits for: the counted group's live members."""
        if round_ != self.roster.round:
            return self.candidates(round_) & (set(self.roster.counted) | {self.me})
        return self.live_counted() | {self.me}

    def live_counted(self) -> set[str]:
        return {p for p in self.roster.counted if self.state.is_live(p)}

    def may_send(self, peer: str) -> bool:
        """Whose updates the gossip pulls (and whom it asks for copies): the counted group, and
        for a scorer (`scores_probation`) the candidates on probation too."""
        if peer == self.me:
            return True
        listed = peer in self.roster.counted or (
            self.scores_probation and peer in self.roster.probation
        )
        return listed and self.state.is_live(peer)
