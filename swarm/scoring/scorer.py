"""One scorer's round: decode the updates it pulled, measure their gains, rate their senders.

    gains   = probe.gains(θ_global, [(Δ_i, shard_i)], salt)     # probe.py
    flags   = copies.flags(Δ, gains)                             # copies.py: copies, replays
    credit  = rating.credit(gain_i, reference gain, flag_i)      # rating.py
    ratings.update(round, credits) → the card published in RunState

Synchronous and torch-bound: the driver calls it on its torch thread after the exchange and
before the outer step (θ_global must still be the round's start). Its cost is measured and
reported (`ScoringStatistics`): evaluations per round and the seconds they took.
"""

from __future__ import annotations

import time
from collections.abc import Collection, Mapping
from dataclasses import dataclass

import torch
from peertrain.crdt.scorecard import ScoreCard
from peertrain.protocol.errors import DecodeError
from peertrain.swarm.exchange.codec import Payload, UpdateCodec

from .copies import CopyFinder
from .probe import Gain, Probe
from .rating import MISSING, NON_FINITE, Credit, Ratings, credit, harm_credits, reference_gain


@dataclass(slots=True)
class ScoringStatistics:
    rounds: int = 0  # rounds scored
    evaluations: int = 0  # updates evaluated, all rounds
    last_evaluations: int = 0
    last_seconds: float = 0.0  # wall seconds of the last round's scoring
    seconds: float = 0.0  # all rounds


class Scorer:
    def __init__(
        self, probe: Probe, codec: UpdateCodec, numel: int, card: ScoreCard | None = None
    ) -> None:
        """`card`: our own card from the run state (a restarted scorer keeps its ratings)."""
        self.probe, self.codec, self.numel = probe, codec, numel
        self.ratings = Ratings(card)
        self.copies = CopyFinder(numel)
        self.statistics = ScoringStatistics()

    def score(
        self,
        round_: int,
        theta: torch.Tensor,
        payloads: Mapping[str, Payload],
        shards: Mapping[str, int],
        reference: Collection[str],
        salt: bytes,
        *,
        missing: Collection[str] = (),
    ) -> ScoreCard | None:
        """Rate the senders of `payloads` (θ_global `theta` is the round's start) against the
        counted group (`reference`); `missing`: candidates that sent nothing in time (credit
        0). The new card, or None when this round says nothing."""
        started = time.perf_counter()
        deltas: dict[str, torch.Tensor] = {}
        undecodable: dict[str, Credit] = {p: Credit(0.0, 0.0, MISSING) for p in missing}
        for sender, payload in sorted(payloads.items()):
            try:
                deltas[sender] = self.codec.decode(payload, self.numel)
            except DecodeError:
                undecodable[sender] = Credit(-1.0, 0.0, NON_FINITE)
        senders = list(deltas)
        measured = self.probe.gains(theta, [(deltas[p], shards[p]) for p in senders], salt)
        gains: dict[str, Gain] = dict(zip(senders, measured, strict=True))
        flags = self.copies.flags(deltas, gains, reference)
        self._timed(started, len(payloads))
        ref = reference_gain(gains, reference)
        if ref is None:  # no rating moves, but harm is still harm
            credits = harm_credits(gains)
            credits |= {p: c for p, c in undecodable.items() if c.flag == NON_FINITE}
            if not credits:
                return None
        else:
            credits = {p: credit(g, ref, flags.get(p, "")) for p, g in gains.items()}
            credits |= undecodable
        self.ratings.update(round_, credits)
        return self.ratings.card()

    def _timed(self, started: float, evaluations: int) -> None:
        s = self.statistics
        s.last_seconds = time.perf_counter() - started
        s.last_evaluations = evaluations
        s.rounds += 1
        s.evaluations += evaluations
        s.seconds += s.last_seconds
