"""TokenBucket: a link of fixed bandwidth, for a daemon's shaped uplink and in-memory transports.

A daemon started with the hidden `--uplink-mbit M` (research/testing: a home uplink on loopback)
sends every Noise message of every connection through one bucket (transport/noise.py), so its
peers share its uplink as they would at home; tests and benchmarks shape in-memory links too.

A peer's uplink admits `rate` bytes a second with a small burst; a send larger than the tokens
at hand goes into debt and sleeps until it is paid, so back-to-back sends queue behind each
other (one trio.Lock, FIFO) as they would on a real uplink. Time is trio's, so an
`autojump_clock` test runs a slow link in no wall time.
"""

from __future__ import annotations

import trio


class TokenBucket:
    def __init__(self, rate: float, *, burst: float | None = None) -> None:
        if rate <= 0:
            raise ValueError("a link's rate must be positive")
        self.rate = rate  # bytes per second
        self.burst = burst if burst is not None else rate / 20  # 50 ms worth
        self._tokens = self.burst
        self._stamp: float | None = None
        self._lock = trio.Lock()
        self.bytes = 0  # sent through this link so far
        self.waited = 0.0  # seconds senders spent waiting for tokens

    async def take(self, nbytes: int) -> None:
        """Return once `nbytes` may have left through the link."""
        async with self._lock:
            now = trio.current_time()
            if self._stamp is not None:
                self._tokens = min(self.burst, self._tokens + (now - self._stamp) * self.rate)
            self._tokens -= nbytes
            self._stamp = now
            if self._tokens < 0:
                wait = -self._tokens / self.rate
                await trio.sleep(wait)
                self.waited += wait
                self._tokens, self._stamp = 0.0, trio.current_time()
            self.bytes += nbytes
