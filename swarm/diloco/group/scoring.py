"""Contribution scores in a DiLoCo group: who scores, whose cards decide, who is on probation.

With `scoring = "anchors"` (an open run's spec), the anchors are the scorers: each round they
pull the counted updates and those of a few candidates on probation, rate every sender
(swarm/scoring/) before the outer step, and publish their card in the run state. Every member
reads the live anchors' cards (`rating`) when its roster decides the next group (roster.py):
newcomers count once rated, a member whose rating collapses stops counting, and the anchors
themselves always count. Probationers train and send like anyone; only the scorers pull their
updates, so the extra traffic is the scorers', `admit_per_round` updates a round at most.

Peer IDs cost nothing, but a rating costs rounds of useful work on the sender's own shard,
judged on batches drawn after the round's start state exists.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable, Collection
from typing import Any

import torch
import trio
from peertrain.crdt.admission import Admission
from peertrain.crdt.replicator import Replicator
from peertrain.crdt.scorecard import Rating, ScoreCard
from peertrain.swarm.diloco.member.build import BuiltMember, probe_batches
from peertrain.swarm.diloco.member.run_spec import DiLoCoSpec
from peertrain.swarm.exchange.errors import ExchangeError
from peertrain.swarm.exchange.gossip import UpdateGossip
from peertrain.swarm.exchange.interface import Contribution
from peertrain.swarm.scoring.probe import Probe
from peertrain.swarm.scoring.rating import consensus, earned
from peertrain.swarm.scoring.scorer import Scorer

log = logging.getLogger(__name__)

HELDOUT_POOL = 32  # held-out batches the probes draw from
PROBATION_GRACE = 2.0  # seconds a scorer waits past the round's close for probationers' updates
FOUNDING_GRACE = 10.0  # in round 0, when every founder is on probation and starts with the anchor


class GroupScoring:
    """One member's part in contribution scores: scoring (if it is a scorer) and reading."""

    def __init__(
        self,
        *,
        spec: DiLoCoSpec,
        me: str,
        replicator: Replicator,
        admission: Admission,
        built: BuiltMember,
        gossip: UpdateGossip,
    ) -> None:
        self.spec, self.me, self.replicator, self.admission = spec, me, replicator, admission
        self.state = replicator.state
        self.scorers = admission.trusted_attesters()
        self.scorer: Scorer | None = None
        self.gossip = gossip
        self.missing: frozenset[str] = frozenset()  # probationers silent in the last round
        self.member = built.member
        if me in self.scorers:
            member = built.member
            heldout, shard_batches = probe_batches(built, pool=HELDOUT_POOL)
            probe = Probe(
                member.model,
                heldout=heldout,
                shard_batches=shard_batches,
                batches=spec.score_batches,
            )
            own = self.state.doc.scores.get(me)
            self.scorer = Scorer(probe, member.encoder.codec, member.layout.numel, own)

    def cards(self) -> list[ScoreCard]:
        """The live scorers' cards (ours included)."""
        live = self.state.members()
        cards = sorted(self.state.doc.scores.items())
        return [card for peer, card in cards if peer in self.scorers and peer in live]

    def rating(self, peer: str) -> Rating | None:
        """`peer` as the scorers rate it (rating.consensus of their cards)."""
        return consensus(self.cards(), peer)

    async def rate(
        self,
        thread: Callable[..., Awaitable[Any]],
        round_: int,
        contributions: Collection[Contribution],
        group: Collection[str],
        probation: Collection[str],
        salt: bytes,
    ) -> None:
        """Rate this round's senders on the torch thread (`thread`) against our θ_global, which
        must still be the round's start, and publish our card on the event loop."""
        if self.scorer is None:
            return
        contributions = await self._late_probationers(round_, contributions, probation)
        theta, reference = self.member.global_params, self.yardstick(group)
        card = await thread(
            lambda: self.score(round_, theta, contributions, group, probation, salt, reference)
        )
        self.publish(card)

    def yardstick(self, group: Collection[str]) -> set[str]:
        """Whose gains say what honest work gains this round: the anchors' and those of counted
        members that earned their rating. Not the counted group as such: founding members
        count unrated, and three zero-senders among five founders made the median gain 0, so no
        round ever said anything and nobody's rating moved (seen in process)."""
        rated = {p for p in group if earned(self.rating(p))}
        return set(self.admission.anchors) | rated

    async def _late_probationers(
        self, round_: int, pulled: Collection[Contribution], probation: Collection[str]
    ) -> list[Contribution]:
        """The round closes when the counted updates are in; a probationer's may follow as late
        after the close as the round's last counted update came after its first (at least
        `PROBATION_GRACE` seconds), fetched by the checksum it signed; a founder's within
        `FOUNDING_GRACE` (round 0 counts the anchors alone, and an honest founder rated
        `MISSING` there would queue behind probation). A fixed 2 s was no time on a loaded
        machine: twelve daemons on two cores spread a round's updates over seconds, and an
        honest candidate was rated missing at each of its turns and never counted. One that
        sends nothing by then is rated on nothing (`MISSING`): a slot held by silence goes to
        the next. Candidates are fetched side by side (at most `admit_per_round` of them)."""
        out = list(pulled)
        waiting = set(probation) - {c.sender for c in out} - {self.me}
        grace = FOUNDING_GRACE if round_ == 0 else max(PROBATION_GRACE, self.gossip.spread(round_))

        async def pull(peer: str) -> None:
            while True:
                with contextlib.suppress(LookupError, ExchangeError):
                    payload = await self.gossip.fetch_update(round_, peer, [peer])
                    out.append(Contribution(sender=peer, payload=payload))
                    waiting.discard(peer)
                    return
                await trio.sleep(0.1)

        with trio.move_on_after(min(grace, self.spec.round_timeout) if waiting else 0):
            async with trio.open_nursery() as nursery:
                for peer in sorted(waiting):
                    nursery.start_soon(pull, peer)
        self.missing = frozenset(waiting)
        return out

    def score(
        self,
        round_: int,
        theta: torch.Tensor,
        contributions: Collection[Contribution],
        group: Collection[str],
        probation: Collection[str],
        salt: bytes,
        yardstick: Collection[str],
    ) -> ScoreCard | None:
        """Rate this round's senders (torch thread, before the outer step) against the gains of
        `yardstick`: our new card, for `publish` on the event loop, or None (not a scorer, or
        nothing learnt this round)."""
        if self.scorer is None:
            return None
        payloads = {c.sender: c.payload for c in contributions}
        dealt = set(group) | set(probation)  # shards go to both (driver)
        shards = {p: self.spec.shard_for(p, dealt, salt) for p in payloads}
        reference = set(yardstick) & set(payloads)
        missing = self.missing - set(payloads)
        return self.scorer.score(round_, theta, payloads, shards, reference, salt, missing=missing)

    def publish(self, card: ScoreCard | None) -> None:
        if card is not None:
            self.replicator.writer.publish_scores(card)

    def status(self, counted: Collection[str], probation: Collection[str]) -> dict:
        """For status: who counts and who is on probation, every rated peer as the scorers rate
        it (at most `MAX_RATED` per card), and our own scoring's cost if we score."""
        cards = self.cards()
        rated = sorted({r.peer for card in cards for r in card.ratings})
        ratings = {p: _brief(r) for p in rated if (r := consensus(cards, p)) is not None}
        out: dict = {
            "counted": sorted(counted),
            "probation": sorted(probation),
            "ratings": ratings,
            "scored_round": max((card.round for card in cards), default=None),
        }
        if self.scorer is not None:
            s = self.scorer.statistics
            out |= {"evaluations": s.last_evaluations, "seconds": round(s.last_seconds, 3)}
        return out


def _brief(rating: Rating) -> dict:
    return {
        "rating": round(rating.rating, 3),
        "evaluations": rating.evaluations,
        "last": round(rating.last, 3),
        "fit": round(rating.fit, 3),
        "flag": rating.flag,
    }


def group_scoring(spec: DiLoCoSpec, admission: Admission, **parts: Any) -> GroupScoring | None:
    """The group's scoring when the run's spec asks for it (open runs only: an invite run's
    creator already chose who counts); `parts`: the rest of `GroupScoring`'s arguments."""
    if spec.scoring == "off" or admission.invite:
        return None
    return GroupScoring(spec=spec, admission=admission, **parts)


def rating_reader(scoring: GroupScoring | None) -> Callable[[str], Rating | None] | None:
    return scoring.rating if scoring is not None else None
