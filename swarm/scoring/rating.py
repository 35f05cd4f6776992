"""From gains to ratings to who counts: credit per round, EMAs over rounds, four thresholds.

Credit normalises a gain by what honest work gains this round, so ratings mean the same early
in a run (large gains) and late (small ones):

    reference = median heldout gain of the counted group's updates (rated honest work)
    credit_i  = clip(heldout_gain_i / reference, −¼, 2), or 0 when it was not the sender's work
                (a copy of another update of this round or of the last: copies.py) or changes
                nothing (a zero update)
    fit_i     = clip(fit_i / reference, −2, 2): how much better it does on its own shard

    rating_i ← rating_i + α · (credit_i − rating_i)        (starting at 0, α = `ALPHA`)
    fitness_i ← fitness_i + α · (fit_i − fitness_i)

Fit is an average over rounds, not a verdict per round: inner steps overfit their shard a
little, so honest work fits it better on average, but one round's two probes are noise (on
digits, honest fit/reference ranged −0.2 to 2.7 in single rounds; an update trained on another
member's shard −1.0 to 0.1, a copy about 0). On a corpus too large to revisit, honest work
barely overfits and the fit test loses its power: an update trained on the wrong shard then
passes for honest work (it still helps the model).

A round whose reference gained nothing, or less than `INFORMATIVE` times the spread of the
reference gains, carries no information (the model has converged, or the probes are too noisy to
tell): nobody's rating moves. Non-finite gains (NaN or an overflow from a scaled update) earn −1.

Harm is judged on the loss's own scale as well as the reference's. Near convergence honest
updates each overfit their shard and their held-out gains are noise around 0: on digits after
round 5, four honest updates measured e.g. +0.015, +0.019, −0.117, −0.003 (−19x the median),
and over 30 rounds of 3 seeds the worst honest update raised the held-out loss by 1.25x the loss
itself, while a sign flip of an update scaled 10x raised it by 1.4 to 70 (10x to 700x the loss
of 0.07 to 0.3 after warm-up). Judged against the reference alone, honest members were dropped
as harmful (a 4-member run then trained on with three).

Who counts (the counted group is decided by roster.py from the trusted scorers' cards):
- a founder (present at round 0, when nothing is rated yet) counts from round 1 if its first
  evaluation says so (`founded`: a credit ≥ `FOUNDER_CREDIT`, its own work, on its own shard,
  harmless); otherwise it earns its place as a newcomer does;
- a newcomer counts once it has `MIN_EVALUATIONS` evaluated rounds, a rating ≥ `ADMIT_RATING`
  and, in its first `FIT_CHECKED_FOR` evaluations, a fitness > `FIT_MIN` (about three rounds of
  honest work on its own shard; a free rider's rating stays near 0 however long it waits);
- a counted member stops counting when its rating falls below `DROP_RATING` (from its second
  evaluation on), or at once when one update was harmful (flagged `HARMFUL`: it raised the
  held-out loss by `HARM_LOSS` times the loss itself and by `HARM_RATIO` times what the
  round's typical update lowers it; or to a non-finite value);
- a candidate rated and refused waits behind unrated ones for its next evaluation slot.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from peertrain.crdt.scorecard import MAX_RATED, Rating, ScoreCard

from .probe import Gain


@dataclass(frozen=True, slots=True)
class Credit:
    value: float  # normalised held-out gain, clipped (0 for a copy or a zero update)
    fit: float  # normalised own-shard advantage, clipped
    flag: str = ""


ALPHA = 0.35
ADMIT_RATING = 0.4
MIN_EVALUATIONS = 3
FIT_CHECKED_FOR = 2 * MIN_EVALUATIONS
DROP_RATING = 0.15
HARM_RATIO = 4.0  # harmful: a held-out gain ≤ −max(HARM_RATIO × reference, HARM_LOSS × loss)
HARM_LOSS = 3.0
INFORMATIVE = 2.0  # a round rates only when the reference gain ≥ INFORMATIVE × its spread
FOUNDER_CREDIT = 0.5  # a founder's first credit that earns its place at once (honest: ~1)
FIT_MIN = 0.0  # fitness (the fit's EMA) a newcomer needs: better on its own shard than held-out
# the floor is shallow: an honest member's worst rounds near convergence measure −20x and
# are noise (below), so one of them must not undo three good ones; harm is told apart by its
# flag, not by the credit
CREDIT_RANGE = (-0.25, 2.0)

COPY = "copy"  # the same update as another sender's of this round (the better-fitted one keeps it)
REPLAY = "replay"  # the same update as one of the last round
OFF_SHARD = "off-shard"  # its fitness says it trains on data other than its assigned shard
NON_FINITE = "non-finite"
HARMFUL = "harmful"  # raised the held-out loss far beyond the probes' noise
ZERO = "zero"  # the update changes nothing
MISSING = "missing"  # on probation and sent nothing in time


def reference_gain(gains: Mapping[str, Gain], reference: Iterable[str]) -> float | None:
    """The median held-out gain of the reference senders present; None when the round says
    nothing: the median is not positive, or smaller than the spread of the reference gains
    (their median absolute deviation) `INFORMATIVE` times, as when the model has converged and
    gains are noise."""
    values = [gains[p].heldout for p in reference if p in gains]
    values = [v for v in values if math.isfinite(v)]
    if not values:
        return None
    median = statistics.median(values)
    spread = statistics.median(abs(v - median) for v in values)
    return median if median > 0 and median >= INFORMATIVE * spread else None


def credit(gain: Gain, reference: float, flag: str = "") -> Credit:
    """One update's credit and fit against the round's reference gain."""
    if not (math.isfinite(gain.heldout) and math.isfinite(gain.shard)):
        return Credit(-1.0, 0.0, NON_FINITE)
    fit = min(max(gain.fit / reference, -2.0), 2.0)
    if flag:  # copies.py found it was somebody else's update
        return Credit(0.0, min(fit, 0.0), flag)
    if gain.heldout == 0.0 and gain.shard == 0.0:  # θ unchanged to the last bit: no work sent
        return Credit(0.0, 0.0, ZERO)
    ratio = gain.heldout / reference
    value = min(max(ratio, CREDIT_RANGE[0]), CREDIT_RANGE[1])
    return Credit(value, fit, HARMFUL if harmful(gain, reference) else "")


def harmful(gain: Gain, reference: float | None = None) -> bool:
    """It raised the held-out loss by `HARM_LOSS` times the loss itself and, in a round with a
    reference gain, by `HARM_RATIO` times that; or to a non-finite value."""
    if not (math.isfinite(gain.heldout) and math.isfinite(gain.shard)):
        return True
    bound = HARM_LOSS * gain.base
    if reference is not None:
        bound = max(bound, HARM_RATIO * reference)
    return bound > 0 and gain.heldout <= -bound


def harm_credits(gains: Mapping[str, Gain]) -> dict[str, Credit]:
    """In a round that says nothing about honest work (no reference gain: converged, or the
    probes too noisy), only the harm it still shows: honest-working Sybils that attacked
    together after round 10 of a converged digits run kept their places to the end, every
    round of their attack being one that moved no rating."""
    return {
        p: Credit(-1.0, 0.0, HARMFUL if math.isfinite(g.heldout) else NON_FINITE)
        for p, g in gains.items()
        if harmful(g)
    }


def earned(rating: Rating | None) -> bool:
    """A place earned: enough evaluations, a good rating, no harm last round, and while the
    record is young (`FIT_CHECKED_FOR` evaluations) a positive fitness. Later the rating alone
    decides: on large shards an honest member's fit wanders around 0, and a founder dropped for
    one late round could not come back."""
    if rating is None or rating.evaluations < MIN_EVALUATIONS:
        return False
    young = rating.evaluations < FIT_CHECKED_FOR
    return (
        rating.rating >= ADMIT_RATING
        and not _harmful(rating)
        and (rating.fit > FIT_MIN or not young)
    )


def founded(rating: Rating | None) -> bool:
    """A founder's place earned on its first evaluation: its round-0 update removed at least
    `FOUNDER_CREDIT` of what the reference removed, fitted its own shard, and carries no flag
    (not a copy, a zero, missing, off its shard or harmful). Only the first: a founder that
    free-rode round 0 and worked once later earns its place as any newcomer does."""
    return (
        rating is not None
        and rating.evaluations == 1
        and rating.last >= FOUNDER_CREDIT
        and rating.fit > FIT_MIN
        and not rating.flag
    )


def collapsed(rating: Rating | None) -> bool:
    """A counted member whose work no longer earns its place: a rating below `DROP_RATING`
    after two evaluations (one round of noise does not end a founding member), or one harmful
    update."""
    if rating is None:
        return False
    return (rating.evaluations >= 2 and rating.rating < DROP_RATING) or _harmful(rating)


def _harmful(rating: Rating) -> bool:
    """Its last update did harm: flagged so by the scorer (the flag is the last round's)."""
    return rating.flag in (HARMFUL, NON_FINITE)


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

    def update(self, round_: int, credits: Mapping[str, Credit]) -> None:
        """Fold one round's credits in (each sender once per round)."""
        if round_ <= self.round:
            return
        self.round = round_
        for peer, c in sorted(credits.items()):
            old = self._by_peer.pop(peer, None)
            rating, fit = (old.rating, old.fit) if old is not None else (0.0, 0.0)
            fit += ALPHA * (c.fit - fit)
            flag = c.flag or (OFF_SHARD if fit <= FIT_MIN else "")
            self._by_peer[peer] = Rating(
                peer=peer,
                rating=rating + ALPHA * (c.value - rating),
                evaluations=(old.evaluations if old is not None else 0) + 1,
                last=c.value,
                fit=fit,
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
    credit, a harm flag if any scorer saw harm; None when no card rates it."""
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
        fit=statistics.median_low(r.fit for r in rated),
        # harm seen by any scorer first: it ends the place, as the worst last credit did
        flag=next((r.flag for r in sorted(rated, key=_harm_first) if r.flag), ""),
    )


def _harm_first(rating: Rating) -> bool:
    return not _harmful(rating)
