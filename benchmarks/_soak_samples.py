"""What the soak samples every 10 s: each daemon's round, RSS and open file descriptors, and the
slope of RSS and fds per hour after a warm-up (the target: flat within noise).

A restarted daemon is a new process: a member's slope is fitted over its newest life only
(after that life's own warm-up), so a restart's fresh heap is not read as a leak or a cure.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import psutil

MAX_SAMPLES = 4096  # 10 s apart: 11 hours
MB = 1 << 20


@dataclass
class Sample:
    at: float  # seconds from the soak's start
    pid: int | None
    round: int | None
    rss_mb: float | None
    fds: int | None


@dataclass
class Samples:
    size: int
    by_member: list[list[Sample]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.by_member = [[] for _ in range(self.size)]

    def take(self, at: float, daemons, runs) -> None:
        for m, daemon in enumerate(daemons):
            pid = daemon.process.pid if daemon.alive() else None
            rss, fds = _usage(pid)
            round_ = (runs[m] or {}).get("round")
            series = self.by_member[m]
            series.append(Sample(round(at, 1), pid, round_, rss, fds))
            del series[:-MAX_SAMPLES]

    def slopes(self, warm_up: float) -> list[dict]:
        """Per member: RSS MB/h and fds/h over its newest life after `warm_up` s of it."""
        out = []
        for m, series in enumerate(self.by_member):
            life = _newest_life(series)
            start = life[0].at if life else 0.0
            warm = [s for s in life if s.at - start >= warm_up and s.rss_mb is not None]
            out.append(
                {
                    "member": m,
                    "samples": len(warm),
                    "rss_mb_last": warm[-1].rss_mb if warm else None,
                    "fds_last": warm[-1].fds if warm else None,
                    "rss_mb_per_h": slope_per_hour([(s.at, s.rss_mb) for s in warm]),
                    "fds_per_h": slope_per_hour([(s.at, s.fds) for s in warm]),
                }
            )
        return out


def _usage(pid: int | None) -> tuple[float | None, int | None]:
    if pid is None:
        return None, None
    try:
        process = psutil.Process(pid)
        return round(process.memory_info().rss / MB, 1), process.num_fds()
    except psutil.Error:  # it exited between the check and the read
        return None, None


def _newest_life(series: list[Sample]) -> list[Sample]:
    pid = next((s.pid for s in reversed(series) if s.pid is not None), None)
    return [s for s in series if s.pid == pid and pid is not None]


def slope_per_hour(points: list[tuple[float, float]]) -> float | None:
    """Least-squares slope per hour; None with fewer than three points."""
    if len(points) < 3:
        return None
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    if sxx == 0:
        return None
    sxy = sum((x - mx) * (y - my) for x, y in points)
    return round(sxy / sxx * 3600, 2)
