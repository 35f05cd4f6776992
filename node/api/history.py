"""What the dashboard remembers between polls: per-run samples and recent events.

The daemon's status is a snapshot; a loss curve, traffic per round and "who joined when" need
the past. `StatusHistory.observe(status)` is fed one status a second by the web service and
keeps bounded rings: a sample per run per new round (time, round, loss, update bytes) and the
changes between two snapshots as events. Memory is fixed: `MAX_SAMPLES` per run, `MAX_RUNS`
runs, `MAX_EVENTS` events, whatever the node lives through.
"""

from __future__ import annotations

import time
from collections import OrderedDict, deque
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from .round_times import RoundTimes

MAX_SAMPLES = 256  # rounds per run on the loss curve
MAX_RUNS = 16
MAX_EVENTS = 64


@dataclass(frozen=True, slots=True)
class RoundSample:
    time: float  # time.time() when the round was first seen
    round: int
    loss: float | None
    bytes_published: int  # cumulative outer-update bytes sent
    bytes_fetched: int  # and received


@dataclass(frozen=True, slots=True)
class Event:
    time: float
    kind: str  # peer-joined | peer-left | member-joined | member-left | round | resync | ...
    text: str


class StatusHistory:
    def __init__(self, *, clock=time.time) -> None:
        self._clock = clock
        self._runs: OrderedDict[str, deque[RoundSample]] = OrderedDict()
        self._times: dict[str, RoundTimes] = {}  # the runs of `_runs`: their rounds' durations
        self._events: deque[Event] = deque(maxlen=MAX_EVENTS)
        self._last: Mapping[str, Any] | None = None

    def observe(self, status: Mapping[str, Any]) -> None:
        """Record what changed since the previous status."""
        for run in runs_of(status):
            self._sample(run)
        if self._last is not None:
            for kind, text in _changes(self._last, status):
                self._events.append(Event(self._clock(), kind, text))
        self._last = status

    def _sample(self, run: Mapping[str, Any]) -> None:
        samples = self._runs.get(run["run_id"])
        if samples is None:
            samples = self._runs[run["run_id"]] = deque(maxlen=MAX_SAMPLES)
            self._times[run["run_id"]] = RoundTimes()
            while len(self._runs) > MAX_RUNS:
                self._times.pop(self._runs.popitem(last=False)[0], None)
        self._runs.move_to_end(run["run_id"])
        self._times[run["run_id"]].seen(run["round"], self._clock())
        if samples and samples[-1].round == run["round"]:
            if samples[-1].loss == run["loss"]:
                return
            samples.pop()  # the round's loss arrived after its number: keep the newer figure
        samples.append(
            RoundSample(
                time=self._clock(),
                round=run["round"],
                loss=run["loss"],
                bytes_published=run.get("bytes_published", 0),
                bytes_fetched=run.get("bytes_fetched", 0),
            )
        )

    def samples(self, run_id: str) -> list[RoundSample]:
        return list(self._runs.get(run_id, ()))

    def last_round_seconds(self, run_id: str) -> float | None:
        """Seconds between the last two rounds seen (to a poll's resolution)."""
        samples = self._runs.get(run_id)
        if not samples or len(samples) < 2:
            return None
        return samples[-1].time - samples[-2].time

    def round_times(self, run_id: str) -> RoundTimes | None:
        """The durations of the run's rounds seen so far (None: the run was never seen)."""
        return self._times.get(run_id)

    def events(self) -> list[Event]:
        return list(self._events)

    def as_dict(self) -> dict[str, Any]:
        """The `history` part of /api/status."""
        return {
            "runs": {rid: [asdict(s) for s in samples] for rid, samples in self._runs.items()},
            "events": [asdict(e) for e in self._events],
        }


def runs_of(status: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The runs of a status: none, the one, or each of many."""
    run = status.get("run")
    if not run:
        return []
    return list(run["runs"]) if "runs" in run else [run]


def _changes(before: Mapping[str, Any], after: Mapping[str, Any]) -> Iterable[tuple[str, str]]:
    names = {**before.get("peer_names", {}), **after.get("peer_names", {})}
    names[after["peer_id"]] = f"{after['name']} (this node)"
    old, new = set(before.get("peers", ())), set(after.get("peers", ()))
    for peer in sorted(new - old):
        yield "peer-joined", f"{names.get(peer, peer[-8:])} connected"
    for peer in sorted(old - new):
        yield "peer-left", f"{names.get(peer, peer[-8:])} disconnected"
    earlier = {r["run_id"]: r for r in runs_of(before)}
    for run in runs_of(after):
        if (prior := earlier.get(run["run_id"])) is not None:
            yield from _run_changes(prior, run, names)
    penalties = _penalties(after) - _penalties(before)
    if penalties > 0:
        yield "penalty", f"{penalties} peer fault(s) penalised"


def _run_changes(
    before: Mapping[str, Any], after: Mapping[str, Any], names: Mapping[str, str]
) -> Iterable[tuple[str, str]]:
    name = after["name"]
    old, new = set(before["members"]), set(after["members"])
    for peer in sorted(new - old):
        yield "member-joined", f"{names.get(peer, peer[-8:])} joined {name}"
    for peer in sorted(old - new):
        yield "member-left", f"{names.get(peer, peer[-8:])} left {name}"
    if after["round"] > before["round"]:
        loss = after["loss"]
        shown = f", loss {loss:.4f}" if isinstance(loss, float) else ""
        yield "round", f"{name} reached round {after['round']}{shown}"
    for key, kind, words in (
        ("resyncs", "resync", "re-synced to the majority state"),
        ("rejected_updates", "rejected", "rejected update(s)"),
    ):
        grew = after.get(key, 0) - before.get(key, 0)
        if grew > 0:
            yield kind, f"{name}: {grew} {words}" if kind == "rejected" else f"{name} {words}"
    if after.get("error") and after["error"] != before.get("error"):
        yield "error", f"{name}: {after['error']}"


def _penalties(status: Mapping[str, Any]) -> int:
    return int(status.get("shield", {}).get("peer_faults", 0))
