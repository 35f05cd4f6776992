"""Which server of a stage gets the next task: throughput-weighted, earliest-virtual-finish wiring.

Per stage the trainer keeps a min-heap of (virtual load, random tiebreak, peer). To send a task of
b samples it pops the minimum and pushes the peer back with load + cost · b · (seconds per sample),
so over many tasks every peer receives work in proportion to its measured throughput: a peer twice
as fast accrues virtual load half as quickly and is popped twice as often. A backward task counts
`backward_cost` (2.5) forwards.

Seconds per sample is a bias-corrected EMA (as in Adam: divide by 1 − β^n) of the time measured
around each call, normalised to forward-equivalent samples, so the first few measurements are not
pulled towards the zero the average starts from. A peer with no measurement yet is assumed as fast
as the mean of the measured ones (1 s/sample if none is measured).

New peers enter at the current minimum load: entering at zero would flood them with every task
until they caught up with peers that have been serving for an hour. A failed peer is excluded until
it re-announces (`announce` again), and re-enters at the minimum like a new one.

Everything here is synchronous and O(log n) per task; the random tiebreak (seeded) keeps equally
loaded peers from always being served in the same order by every trainer.
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Hashable
from dataclasses import dataclass

from .errors import NoServerAvailable

PeerKey = Hashable
BACKWARD_COST = 2.5


@dataclass(frozen=True, slots=True, kw_only=True)
class PeerStatistics:
    peer: PeerKey
    seconds_per_sample: float | None  # None: not measured yet
    tasks: int
    samples: float  # forward-equivalent samples assigned (b, or 2.5·b for a backward)


class ThroughputEMA:
    """Bias-corrected exponential moving average of seconds per forward-equivalent sample."""

    def __init__(self, *, beta: float = 0.9) -> None:
        if not 0.0 <= beta < 1.0:
            raise ValueError("beta must be in [0, 1)")
        self.beta = beta
        self._raw = 0.0
        self._count = 0

    def update(self, seconds_per_sample: float) -> None:
        self._raw = self.beta * self._raw + (1.0 - self.beta) * seconds_per_sample
        self._count += 1

    @property
    def value(self) -> float | None:
        if self._count == 0:
            return None
        return self._raw / (1.0 - self.beta**self._count)


class StageWiring:
    """The dispatcher for one stage's servers; see the module docstring."""

    def __init__(
        self, *, seed: int = 0, beta: float = 0.9, backward_cost: float = BACKWARD_COST
    ) -> None:
        self._rng = random.Random(seed)
        self._beta = beta
        self.backward_cost = backward_cost
        self._heap: list[tuple[float, float, int, PeerKey]] = []
        self._load: dict[PeerKey, float] = {}  # active peers only; the heap may hold stale rows
        self._ema: dict[PeerKey, ThroughputEMA] = {}
        self._tasks: dict[PeerKey, int] = {}
        self._samples: dict[PeerKey, float] = {}
        self._seq = 0  # breaks exact ties between rows without ever comparing peers

    # --- membership -----------------------------------------------------------------------
    def announce(self, peer: PeerKey) -> None:
        """Add a peer (or bring back an excluded one) at the current minimum virtual load."""
        if peer in self._load:
            return
        self._ema.setdefault(peer, ThroughputEMA(beta=self._beta))
        self._tasks.setdefault(peer, 0)
        self._samples.setdefault(peer, 0.0)
        self._push(peer, self._min_load())

    def exclude(self, peer: PeerKey) -> None:
        """Stop sending to `peer` (its call failed) until it announces itself again."""
        self._load.pop(peer, None)  # its heap rows become stale and are skipped when popped

    @property
    def peers(self) -> list[PeerKey]:
        return list(self._load)

    # --- dispatch -------------------------------------------------------------------------
    def choose(self, samples: int, *, backward: bool = False) -> PeerKey:
        """The peer for a task of `samples`; charges it the task's expected time."""
        while self._heap:
            load, _, _, peer = heapq.heappop(self._heap)
            if self._load.get(peer) != load:
                continue  # stale: excluded, or re-pushed since
            work = samples * (self.backward_cost if backward else 1.0)
            self._tasks[peer] += 1
            self._samples[peer] += work
            self._push(peer, load + work * self._seconds_per_sample(peer))
            return peer
        raise NoServerAvailable("no live server is known for this stage")

    def record(
        self, peer: PeerKey, *, samples: int, seconds: float, backward: bool = False
    ) -> None:
        """Feed the time measured around a successful call into the peer's throughput EMA."""
        if samples <= 0 or seconds < 0:
            raise ValueError("a measurement needs samples > 0 and seconds >= 0")
        work = samples * (self.backward_cost if backward else 1.0)
        self._ema.setdefault(peer, ThroughputEMA(beta=self._beta)).update(seconds / work)

    def throughput(self, peer: PeerKey) -> float:
        """Estimated forward samples per second of `peer`."""
        return 1.0 / self._seconds_per_sample(peer)

    def statistics(self) -> list[PeerStatistics]:
        return [
            PeerStatistics(
                peer=peer,
                seconds_per_sample=self._ema[peer].value,
                tasks=self._tasks[peer],
                samples=self._samples[peer],
            )
            for peer in self._ema
        ]

    # --- internals ------------------------------------------------------------------------
    def _seconds_per_sample(self, peer: PeerKey) -> float:
        own = self._ema[peer].value
        if own is not None:
            return max(own, 1e-9)
        known = [v for p in self._load if (v := self._ema[p].value) is not None]
        return max(sum(known) / len(known), 1e-9) if known else 1.0

    def _min_load(self) -> float:
        return min(self._load.values(), default=0.0)

    def _push(self, peer: PeerKey, load: float) -> None:
        self._load[peer] = load
        self._seq += 1
        heapq.heappush(self._heap, (load, self._rng.random(), self._seq, peer))
        if len(self._heap) > 4 * len(self._load) + 64:  # bound the stale rows
            self._heap = [row for row in self._heap if self._load.get(row[3]) == row[0]]
            heapq.heapify(self._heap)


class PipelineWiring:
    """One `StageWiring` per stage, created on demand."""

    def __init__(self, num_stages: int, *, seed: int = 0, beta: float = 0.9) -> None:
        self.stages = [
            StageWiring(seed=seed * 1009 + index, beta=beta) for index in range(num_stages)
        ]

    def __getitem__(self, stage: int) -> StageWiring:
        return self.stages[stage]
