"""How long a run's rounds take, as a Prometheus histogram (`peertrain_run_round_duration_seconds`).

A gauge of the last round's duration showed one figure per scrape and lost every round between
two scrapes; a histogram keeps them all in fixed buckets, so `histogram_quantile` and
`rate(…_sum) / rate(…_count)` give a run's pace over any window. Rounds are timed from the
status history's one-a-second samples (node/api/history.py): to a poll's resolution, and a jump
over several rounds (fast rounds, a catch-up) counts each of them at their average.
"""

from __future__ import annotations

import bisect

# seconds: a small model's CPU round takes about one, a large model's an hour
BUCKETS = (1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0)


class RoundTimes:
    """One run's round durations: a count per bucket (the last: beyond every bound) and a sum."""

    def __init__(self) -> None:
        self.counts = [0] * (len(BUCKETS) + 1)
        self.sum = 0.0
        self._last: tuple[int, float] | None = None  # (round, when it was first seen)

    def seen(self, round_: int, now: float) -> None:
        """The run is at `round_` at `now`: the rounds since the last new one are timed."""
        last = self._last
        if last is None or round_ < last[0]:  # first sight, or the run was started again
            self._last = (round_, now)
            return
        rounds = round_ - last[0]
        if rounds == 0:
            return
        each = max(now - last[1], 0.0) / rounds
        self.counts[bisect.bisect_left(BUCKETS, each)] += rounds
        self.sum += each * rounds
        self._last = (round_, now)

    @property
    def count(self) -> int:
        return sum(self.counts)

    def cumulative(self) -> list[tuple[str, float]]:
        """(upper bound, rounds at most that long) as Prometheus exposes them, "+Inf" last."""
        out, total = [], 0
        for bound, count in zip([*map(str, BUCKETS), "+Inf"], self.counts, strict=True):
            total += count
            out.append((bound, float(total)))
        return out
