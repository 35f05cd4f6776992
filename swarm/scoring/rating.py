"""From gains to ratings to who counts: credit per round, an EMA over rounds, three thresholds.

Credit normalises a gain by what honest work gains this round, so ratings mean the same early
in a run (large gains) and late (small ones):

    reference = median heldout gain of the counted group's updates (rated honest work)
    credit_i  = clip(heldout_gain_i / reference, −1, 2), or 0 when it was not the sender's work:
                a copy of another update of this round or of the last (copies.py), or an update
                that does no better on its own shard than on held-out data (fit ≤ `FIT_MIN`):
                inner steps overfit their shard a little, so honest work fits it better (measured
                on digits: honest fit/reference 0.02 to 2.7, an update trained on another
                member's shard −1.0 to 0.03, a copy about 0)

    rating_i ← rating_i + α · (credit_i − rating_i)        (starting at 0, α = `ALPHA`)

A round whose reference gained nothing, or less than the spread of the reference gains, carries
no information (the model has converged, or the probes are too noisy to tell): nobody's rating
moves. Non-finite gains (NaN or an overflow from
a scaled update) earn −1.

Who counts (the counted group is decided by roster.py from the trusted scorers' cards):
- a newcomer counts once it has `MIN_EVALUATIONS` evaluated rounds and a rating ≥ `ADMIT_RATING`
  (about three rounds of honest work; a free rider's rating stays near 0 however long it waits);
- a counted member stops counting when its rating falls below `DROP_RATING` (from its second
  evaluation on), or at once when
  one update was harmful (credit ≤ `HARMFUL`: it raised the held-out loss by as much as the
  group's typical update lowers it);
- a candidate rated and refused waits behind unrated ones for its next evaluation slot.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping

from peertrain.crdt.scorecard import MAX_RATED, Rating, ScoreCard

from .probe import Gain

ALPHA = 0.35
ADMIT_RATING = 0.4
MIN_EVALUATIONS = 3
DROP_RATING = 0.15
HARMFUL = -1.0
FIT_MIN = 0.0  # normalised: how much better an update must do on its own shard than held-out
CREDIT_RANGE = (-1.0, 2.0)

COPY = "copy"  # the same update as another sender's of this round (the better-fitted one keeps it)
REPLAY = "replay"  # the same update as one of the last round
OFF_SHARD = "off-shard"  # trained on data other than its assigned shard
NON_FINITE = "non-finite"
ZERO = "zero"  # the update changes nothing
MISSING = "missing"  # on probation and sent nothing in time


def reference_gain(gains: Mapping[str, Gain], reference: Iterable[str]) -> float | None:
    """The median held-out gain of the reference senders present; None when the round says
    nothing: the median is not positive, or smaller than the spread of the reference gains
    (their median absolute deviation), as when the model has converged and gains are noise."""
    values = [gains[p].heldout for p in reference if p in gains]
    values = [v for v in values if math.isfinite(v)]
    if not values:
        return None
    median = statistics.median(values)
    spread = statistics.median(abs(v - median) for v in values)
    return median if median > 0 and median >= spread else None


def credit(gain: Gain, reference: float, flag: str = "") -> tuple[float, str]:
    """(credit, flag) of one update against the round's reference gain."""
    if not (math.isfinite(gain.heldout) and math.isfinite(gain.shard)):
        return CREDIT_RANGE[0], NON_FINITE
    if flag:  # copies.py found it was somebody else's update
        return 0.0, flag
    if gain.heldout == 0.0 and gain.shard == 0.0:  # θ unchanged to the last bit: no work sent
        return 0.0, ZERO
    normalised = min(max(gain.heldout / reference, CREDIT_RANGE[0]), CREDIT_RANGE[1])
    if gain.fit / reference <= FIT_MIN:
        return min(normalised, 0.0), OFF_SHARD  # harm still counts; help on others' data does not
    return normalised, ""


def earned(rating: Rating | None) -> bool:
    return (
        rating is not None
        and rating.evaluations >= MIN_EVALUATIONS
        and rating.rating >= ADMIT_RATING
        and rating.last > HARMFUL
    )


def collapsed(rating: Rating | None) -> bool:
    """A counted member whose work no longer earns its place: a rating below `DROP_RATING`
    after two evaluations (one round of noise does not end a founding member), or one harmful
    update."""
    if rating is None:
        return False
    return (rating.evaluations >= 2 and rating.rating < DROP_RATING) or rating.last <= HARMFUL


def refused(rating: Rating | None) -> bool:
    """Evaluated enough and not admitted: behind unrated candidates for probation."""
    return rating is not None and rating.evaluations >= MIN_EVALUATIONS and not earned(rating)


class Ratings:
    """One scorer's ratings, bounded to `MAX_RATED` peers (the least recently rated go first)."""

    def __init__(self, card: ScoreCard | None = None) -> None:
        self.round = card.round if card is not None else -1
        self._by_peer: dict[str, Rating] = {r.peer: r for r in card.ratings} if card else {}

    def get(self, peer: str) -> Rating | None:
        return self._by_peer.get(peer)

    def update(self, round_: int, credits: Mapping[str, tuple[float, str]]) -> None:
        """Fold one round's credits in (each sender once per round)."""
        if round_ <= self.round:
            return
        self.round = round_
        for peer, (value, flag) in sorted(credits.items()):
            old = self._by_peer.pop(peer, None)
            rating = old.rating if old is not None else 0.0
            evaluations = old.evaluations if old is not None else 0
            self._by_peer[peer] = Rating(
                peer=peer,
                rating=rating + ALPHA * (value - rating),
                evaluations=evaluations + 1,
                last=value,
                flag=flag,
            )
        while len(self._by_peer) > MAX_RATED:  # insertion order: least recently rated first
            del self._by_peer[next(iter(self._by_peer))]

    def card(self) -> ScoreCard:
        return ScoreCard(
            round=max(self.round, 0), ratings=tuple(sorted(self._by_peer.values(), key=_peer))
        )


def _peer(rating: Rating) -> str:
    return rating.peer


def consensus(cards: Iterable[ScoreCard], peer: str) -> Rating | None:
    """`peer` as the trusted scorers rate it: the median rating over their cards (the lower
    median, so a single scorer of two cannot lift a peer alone), fewest evaluations, worst last
    credit; None when no card rates it."""
    rated = [r for card in cards if (r := card.get(peer)) is not None]
    if not rated:
        return None
    if len(rated) == 1:
        return rated[0]
    return Rating(
        peer=peer,
        rating=statistics.median_low(r.rating for r in rated),
        evaluations=min(r.evaluations for r in rated),
        last=min(r.last for r in rated),
        flag=next((r.flag for r in rated if r.flag), ""),
    )
