"""Watching a `LanRun` (testing/lan_run.py) round by round: which checksum each member held at
each round it was seen in, polled from every daemon at once (a round is a second or two, and
asking five daemons one after another would miss rounds).

`Rounds` keeps at most `MAX_ROUNDS` rounds per member: the oldest go first.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

MAX_ROUNDS = 4096


class Rounds:
    """member index → round → the checksum it held there (first seen)."""

    def __init__(self, size: int):
        self.size = size
        self.seen: list[OrderedDict[int, str]] = [OrderedDict() for _ in range(size)]

    def add(self, runs: list[dict[str, Any] | None]) -> None:
        for index, run in enumerate(runs):
            if not run or not run.get("state_checksum"):
                continue
            rounds = self.seen[index]
            rounds.setdefault(int(run["round"]), run["state_checksum"])
            while len(rounds) > MAX_ROUNDS:
                rounds.popitem(last=False)

    def first_agreement(self, members: list[int], since: int) -> int | None:
        """The first round ≥ `since` in which every one of `members` was seen, all with one
        checksum; None if there is none yet."""
        common = set.intersection(*(set(self.seen[i]) for i in members))
        for round_ in sorted(r for r in common if r >= since):
            if len({self.seen[i][round_] for i in members}) == 1:
                return round_
        return None

    def newest(self, members: list[int]) -> int:
        return max((max(self.seen[i], default=-1) for i in members), default=-1)


class Poller:
    """Asks every daemon of a run for its status at once, `interval` apart."""

    def __init__(self, run, rounds: Rounds, interval: float = 0.25):
        self.run, self.rounds, self.interval = run, rounds, interval
        self.pool = ThreadPoolExecutor(max_workers=max(1, run.size))

    def poll(self) -> list[dict[str, Any] | None]:
        statuses = list(self.pool.map(_status, self.run.daemons))
        runs = [(s or {}).get("run") for s in statuses]
        self.rounds.add(runs)
        return runs

    def until(self, done: Callable[[list], bool], timeout: float) -> list:
        """Poll until `done(runs)` holds; raise TimeoutError with the last runs after `timeout`."""
        deadline = time.monotonic() + timeout
        while True:
            runs = self.poll()
            if done(runs):
                return runs
            if time.monotonic() > deadline:
                brief = [(r or {}).get("round") for r in runs]
                raise TimeoutError(f"not reached in {timeout:.0f} s; rounds {brief}")
            time.sleep(self.interval)

    def close(self) -> None:
        self.pool.shutdown(wait=False)


def _status(daemon) -> dict[str, Any] | None:
    """Its status, or None: a daemon killed while it answers resets the control socket (not a
    ControlError), and the next poll asks again."""
    try:
        return daemon.status_or_none(3.0)
    except Exception:  # noqa: BLE001 - any failure to answer is "no answer this time"
        return None


def rounds_of(runs: list[dict[str, Any] | None], members: list[int]) -> list[int]:
    return [int((runs[i] or {}).get("round", -1)) for i in members]
