"""RequestRate: how often an IP block may ask for work that costs us more than it costs them.

A peer ID is free, an IP block is not (node/net/budget.py's `ip_prefix`: /24, /48). A service
whose answer is expensive (a dial-back builds a throwaway host and dials up to four addresses)
lets each block ask a small burst, then one request every `every` seconds, and all blocks
together `overall` a second. A refused request is closed without blame: an honest client behind
a busy NAT asks another server. The table holds at most `max_blocks` blocks; the one idle the
longest is forgotten first, which only hands that block a fresh burst. Loopback and private
blocks are one machine or one LAN (`is_local`): a local swarm's daemons all share them, so they
are not limited.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable

from .budget import ip_prefix, is_local


class RequestRate:
    def __init__(
        self,
        *,
        burst: float = 4,
        every: float = 15.0,
        overall: float = 2.0,
        overall_burst: float = 16,
        max_blocks: int = 4096,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.burst, self.every = burst, every
        self.overall, self.overall_burst = overall, overall_burst
        self.max_blocks, self.clock = max_blocks, clock
        self._blocks: OrderedDict[str, tuple[float, float]] = OrderedDict()  # → (tokens, at)
        self._all = (overall_burst, clock())
        self.refused = 0

    def admits(self, ip: str) -> bool:
        """Take one request's turn for `ip`'s block; False when the block or everyone is over,
        or `ip` is no IP address (nothing we could dial back)."""
        try:
            block = ip_prefix(ip)
        except ValueError:
            return False
        if is_local(block):
            return True
        now = self.clock()
        tokens, at = self._blocks.pop(block, (self.burst, now))
        tokens = min(self.burst, tokens + (now - at) / self.every)
        everyone = min(self.overall_burst, self._all[0] + (now - self._all[1]) * self.overall)
        admitted = tokens >= 1 and everyone >= 1
        if admitted:
            tokens, everyone = tokens - 1, everyone - 1
        else:
            self.refused += 1
        self._blocks[block] = (tokens, now)  # the newest at the end: eviction takes the front
        while len(self._blocks) > self.max_blocks:
            self._blocks.popitem(last=False)
        self._all = (everyone, now)
        return admitted
