"""Penalties for misbehaving peers: a bounded scoreboard that bans repeat offenders for a while.

Remote misbehaviour (undecodable bytes, bad signatures, oversized messages, timeouts) never
stops the node: the handler logs it and calls `penalise`. Scores decay so an honest peer that
once sent something odd (a version skew, a flaky link) is not punished forever; a peer whose
score crosses `ban_threshold` is disconnected and refused for `ban_seconds`.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class ScoreboardStatistics:
    tracked: int
    banned: int
    penalties: int


class PeerScoreboard:
    """Per-peer penalty scores with exponential decay; at most `max_peers` tracked (LRU)."""

    def __init__(
        self,
        *,
        ban_threshold: float = 100.0,
        half_life: float = 300.0,
        ban_seconds: float = 600.0,
        max_peers: int = 10_000,
        clock=time.monotonic,
    ):
        self.ban_threshold = ban_threshold
        self.half_life = half_life
        self.ban_seconds = ban_seconds
        self.max_peers = max_peers
        self._clock = clock
        self._scores: OrderedDict[str, tuple[float, float]] = OrderedDict()  # peer → (score, at)
        self._banned_until: OrderedDict[str, float] = OrderedDict()
        self._penalties = 0
        self.on_ban: list[Callable[[str], None]] = []  # enforcement (node/net/bans.py) listens

    def penalise(self, peer: str, points: float, reason: str) -> bool:
        """Add `points` to `peer`'s score; return True if this bans it."""
        now = self._clock()
        score = self.score(peer) + points
        self._scores[peer] = (score, now)
        self._scores.move_to_end(peer)
        while len(self._scores) > self.max_peers:
            self._scores.popitem(last=False)
        self._penalties += 1
        log.warning("penalised %s by %g (score %.0f): %s", peer, points, score, reason)
        if score >= self.ban_threshold and not self.is_banned(peer):
            self._banned_until[peer] = now + self.ban_seconds
            while len(self._banned_until) > self.max_peers:
                self._banned_until.popitem(last=False)
            log.warning("banned %s for %.0f s", peer, self.ban_seconds)
            for listener in self.on_ban:
                listener(peer)
            return True
        return False

    def score(self, peer: str) -> float:
        entry = self._scores.get(peer)
        if entry is None:
            return 0.0
        score, at = entry
        return score * 0.5 ** ((self._clock() - at) / self.half_life)

    def is_banned(self, peer: str) -> bool:
        until = self._banned_until.get(peer)
        if until is None:
            return False
        if self._clock() >= until:
            del self._banned_until[peer]
            return False
        return True

    def statistics(self) -> ScoreboardStatistics:
        banned = sum(1 for p in list(self._banned_until) if self.is_banned(p))
        return ScoreboardStatistics(
            tracked=len(self._scores), banned=banned, penalties=self._penalties
        )


def is_misbehaviour(exc: BaseException) -> bool:
    """Protocol errors that only a faulty or hostile peer causes. A stream that ended or stalled
    is what honest peers do when they cancel or leave: not worth a penalty."""
    from peertrain.protocol.errors import PeerTimeout, ProtocolError, StreamEnded

    return isinstance(exc, ProtocolError) and not isinstance(exc, StreamEnded | PeerTimeout)
