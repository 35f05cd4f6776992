"""Admission of inbound streams: banned peers are refused, and each peer and all peers together
get a bounded number of concurrent handlers, so a flood of streams waits or is reset instead of
growing memory. One object per protocol handler. With `keep_free`, the last slots go only to
peers holding none: a few greedy peers cannot fill a service and lock a newcomer out."""

from __future__ import annotations

import contextlib
from collections import defaultdict
from collections.abc import AsyncIterator

import trio
from libp2p.abc import INetStream

from .penalties import PeerScoreboard
from .streams import close_quietly, reset_quietly


class StreamSlots:
    def __init__(
        self,
        scoreboard: PeerScoreboard,
        *,
        max_total: int,
        max_per_peer: int,
        keep_free: int = 0,
    ):
        self.scoreboard = scoreboard
        self.max_per_peer = max_per_peer
        self.max_total = max_total
        self.keep_free = keep_free  # slots a peer already holding one may not take
        self._total = trio.CapacityLimiter(max_total)
        self._per_peer: defaultdict[str, int] = defaultdict(int)

    @contextlib.asynccontextmanager
    async def admit(self, stream: INetStream) -> AsyncIterator[str | None]:
        """Yield the peer's base58 ID while it holds a slot, or None (stream reset) if refused.
        The stream is closed on the way out either way."""
        peer = stream.muxed_conn.peer_id.to_base58()
        if self.scoreboard.is_banned(peer) or not self._may_take(peer):
            await reset_quietly(stream)
            yield None
            return
        self._per_peer[peer] += 1
        try:
            async with self._total:
                yield peer
        finally:
            self._per_peer[peer] -= 1
            if not self._per_peer[peer]:
                del self._per_peer[peer]
            await close_quietly(stream)

    def _may_take(self, peer: str) -> bool:
        held = self._per_peer.get(peer, 0)
        if held >= self.max_per_peer:
            return False
        # counted from our own table (streams admitted, serving or waiting for a slot): checked
        # and counted with no checkpoint between, so a burst of streams cannot all slip past
        return held == 0 or self.max_total - sum(self._per_peer.values()) > self.keep_free
