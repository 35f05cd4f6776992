"""Hybrid logical clocks: stamps that follow wall time yet never run backwards.

Last-writer-wins needs a total order on writes that matches real time closely enough that "the
latest write wins" means what a user expects, yet stays monotone when a peer's wall clock steps
back or lags behind peers it has heard from (Kulkarni et al., "Logical Physical Clocks", 2014).
A `Stamp` is (wall ms, counter, writer); the writer's peer ID breaks ties between peers, so two
distinct writers never produce equal stamps.

Remote stamps further ahead of our wall clock than `max_drift_ms` are refused (`ClockDrift`):
otherwise one peer with a clock set to next year would pin every clock it touches there.

Observing a remote stamp moves our clock past it only up to `max_advance_ms` (1 s) beyond our
own wall clock. Without that bound a stranger's stamp just inside the 60 s drift window pinned
our clock 60 s ahead, and a peer 200 ms behind us then refused our own lease renewals as too
far in its future. Our stamps stay monotone either way; a write of ours may then order before
a stamp from a clock far ahead of ours, which only matters within one owner's slot, and only
the owner writes there.

`PEERTRAIN_CLOCK_SKEW_MS` (an integer, default 0) is added to this process's wall clock: the
fault tests skew a member's clock without touching the machine's (benchmarks/soak.py runs two
members 2 s ahead and behind; no libfaketime needed). Read once, at import.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import NamedTuple

from .errors import ClockDrift

MAX_COUNTER = 2**32 - 1


# a skewed clock is a fault volunteers bring; tests inject it here, the one wall-clock read
CLOCK_SKEW_MS = int(os.environ.get("PEERTRAIN_CLOCK_SKEW_MS") or 0)


def wall_clock_ms() -> int:
    """Milliseconds since the Unix epoch (plus `CLOCK_SKEW_MS`)."""
    return time.time_ns() // 1_000_000 + CLOCK_SKEW_MS


class Stamp(NamedTuple):
    """A totally ordered write time: compares by wall ms, then counter, then writer."""

    wall_ms: int
    counter: int
    writer: str


class HybridClock:
    """The clock of one writer; `now()` for local writes, `observe()` for remote stamps."""

    __slots__ = (
        "writer",
        "_wall_ms",
        "_max_drift_ms",
        "_max_advance_ms",
        "_last_wall",
        "_last_counter",
    )

    def __init__(
        self,
        writer: str,
        *,
        wall_ms: Callable[[], int] = wall_clock_ms,
        max_drift_ms: int = 60_000,
        max_advance_ms: int = 1_000,
    ) -> None:
        self.writer = writer
        self._wall_ms = wall_ms
        self._max_drift_ms = max_drift_ms
        self._max_advance_ms = max_advance_ms
        self._last_wall = 0
        self._last_counter = 0

    def now(self) -> Stamp:
        """A stamp greater than every stamp this clock issued or observed."""
        physical = self._wall_ms()
        if physical > self._last_wall:
            self._last_wall, self._last_counter = physical, 0
        else:
            self._advance_counter()
        return Stamp(self._last_wall, self._last_counter, self.writer)

    def observe(self, remote: Stamp) -> None:
        """Move past `remote` so later local stamps order after it; refuse far-future stamps."""
        physical = self._wall_ms()
        self.check(remote, physical)
        if remote.wall_ms > physical + self._max_advance_ms:
            return  # a clock far ahead of ours must not drag ours along (see the module doc)
        if remote.wall_ms > self._last_wall:
            self._last_wall, self._last_counter = remote.wall_ms, remote.counter
        elif remote.wall_ms == self._last_wall and remote.counter > self._last_counter:
            self._last_counter = remote.counter

    def check(self, remote: Stamp, physical: int | None = None) -> None:
        """Raise `ClockDrift` if `remote` lies more than the allowed drift in our future."""
        physical = self._wall_ms() if physical is None else physical
        if remote.wall_ms > physical + self._max_drift_ms:
            ahead = (remote.wall_ms - physical) / 1000
            raise ClockDrift(f"stamp from {remote.writer} is {ahead:.1f} s in the future")

    def _advance_counter(self) -> None:
        if self._last_counter >= MAX_COUNTER:  # counter exhausted within one ms: borrow the next ms
            self._last_wall, self._last_counter = self._last_wall + 1, 0
        else:
            self._last_counter += 1
