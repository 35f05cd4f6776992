"""A scorer's signed view of who does useful work: one `ScoreCard` per scorer in RunState.

A scorer (an open run's anchors, or any member for its own view) evaluates the updates it pulls
each round and keeps a rating per sender (swarm/scoring/). It publishes the ratings as one card
in its own slot of the run state: the card is signed with every delta like the rest of the slot,
replicated by anti-entropy, and only its scorer may write it (`RunState.apply_remote`). Members
read the trusted scorers' cards to decide whose updates count (swarm/diloco/group/roster.py).

Every size is capped here: at most `MAX_RATED` ratings per card, short flags, finite numbers;
a card that breaks a bound is a `DecodeError` for its signer, never a half-read card.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from peertrain.protocol.errors import DecodeError

from .records import read_peer
from .wire import Codec, Wire, read_int, read_list, read_str

MAX_RATED = 160  # ratings on one card (~100 bytes each): a full card and the rest of its
# owner's slot stay well inside one signed delta (crdt/signed.py MAX_DELTA_PAYLOAD, 32 KiB)
MAX_FLAG_LEN = 16
RATING_BOUND = 1e6  # ratings are normalised gains (about 1 for honest work); anything past is junk


@dataclass(frozen=True, slots=True, kw_only=True)
class Rating:
    """One sender as a scorer rates it: the EMA of its normalised gains, how many rounds were
    evaluated, the last gain, the EMA of its fit to its own shard, and a flag for what the
    scorer found ("" if nothing)."""

    peer: str
    rating: float
    evaluations: int
    last: float
    fit: float = 0.0  # the EMA of how much better its updates do on its own shard
    flag: str = ""

    def __post_init__(self) -> None:
        for name in ("rating", "last", "fit"):
            value = getattr(self, name)
            if not (math.isfinite(value) and abs(value) <= RATING_BOUND):
                raise ValueError(f"{name} must be finite and at most {RATING_BOUND:g} in size")
        if self.evaluations < 0:
            raise ValueError("evaluations must be non-negative")
        if len(self.flag) > MAX_FLAG_LEN or not self.flag.isascii():
            raise ValueError(f"a flag is at most {MAX_FLAG_LEN} ASCII characters")


@dataclass(frozen=True, slots=True, kw_only=True)
class ScoreCard:
    """A scorer's ratings after round `round`, sorted by peer."""

    round: int
    ratings: tuple[Rating, ...]

    def __post_init__(self) -> None:
        if len(self.ratings) > MAX_RATED:
            raise ValueError(f"a score card rates at most {MAX_RATED} peers")
        peers = [r.peer for r in self.ratings]
        if peers != sorted(set(peers)):
            raise ValueError("a score card rates each peer once, in peer order")

    def get(self, peer: str) -> Rating | None:
        return next((r for r in self.ratings if r.peer == peer), None)


def _read_number(x: object, what: str) -> float:
    if isinstance(x, bool) or not isinstance(x, int | float):
        raise DecodeError(f"{what} is not a number")
    value = float(x)
    if not (math.isfinite(value) and abs(value) <= RATING_BOUND):
        raise DecodeError(f"{what} is not finite or out of range")
    return value


def _decode_rating(x: Wire) -> Rating:
    peer, rating, evaluations, last, fit, flag = read_list(x, "rating", max_len=6, length=6)
    return Rating(
        peer=read_peer(peer),
        rating=_read_number(rating, "rating"),
        evaluations=read_int(evaluations, "rating evaluations"),
        last=_read_number(last, "last gain"),
        fit=_read_number(fit, "fit"),
        flag=read_str(flag, "rating flag", max_len=MAX_FLAG_LEN),
    )


def _encode_card(card: ScoreCard) -> Wire:
    rows = [
        [r.peer, float(r.rating), r.evaluations, float(r.last), float(r.fit), r.flag]
        for r in card.ratings
    ]
    return [card.round, rows]


def _decode_card(x: Wire) -> ScoreCard:
    round_, rows = read_list(x, "score card", max_len=2, length=2)
    try:
        ratings = tuple(_decode_rating(r) for r in read_list(rows, "ratings", max_len=MAX_RATED))
        return ScoreCard(round=read_int(round_, "score card round"), ratings=ratings)
    except ValueError as exc:
        raise DecodeError(str(exc)) from None


SCORE_CARD = Codec(_encode_card, _decode_card)
