"""Adaptive rebalancing: servers migrate from the least-loaded stage to the most-loaded one.

A pipeline runs at the speed of its slowest stage, so capacity parked in an idle stage is wasted.
Every stage has a load = demand / capacity, where demand is the stage's compute per sample (a
stage twice as deep needs twice the capacity) and capacity is the sum of its servers' measured
throughputs. Every period, each server evaluates the same pure function on the same view (the
stage announcements in the DHT / RunState) and gets the same answer: at most ONE move, from the
least-loaded stage to the most-loaded one, and only if the move lowers the pipeline's worst load
by at least `MIN_GAIN`.
The mover is the donor stage's server with the lowest hash of (peer id, period): deterministic, so
everyone agrees on who moves without talking, different from period to period, so the same peer is
not always the one uprooted. One mover per period is what keeps peers from stampeding: if every
server of an idle stage moved on seeing the imbalance, the idle stage would become the bottleneck.

The mover downloads the new stage's parameters before it announces itself there (the caller's
job; `StageServer.load_state` takes them), so it never serves a stage with stale weights.

A new peer joins the stage with the most need: the highest load, i.e. the one where its capacity
lowers the pipeline's bottleneck most.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

# A move must lower the worst stage load by this fraction. Throughputs are measured, and a
# server slowed for a while (a busy machine, a cold start after its own move) looks up to a few
# times slower than it is; without a margin, equal servers in a balanced layout start trading
# places on such noise, and every move costs a state download and a warm-up.
MIN_GAIN = 0.15


@dataclass(frozen=True, slots=True, kw_only=True)
class StageView:
    """What every peer knows about one stage: its servers' throughputs and its demand."""

    demand: float  # compute per sample, in any unit shared by all stages
    servers: Mapping[str, float]  # peer id -> measured throughput (samples/s)

    @property
    def capacity(self) -> float:
        return sum(self.servers.values())

    @property
    def load(self) -> float:
        capacity = self.capacity
        return float("inf") if capacity <= 0 else self.demand / capacity


@dataclass(frozen=True, slots=True, kw_only=True)
class Move:
    peer: str
    source: int
    target: int


def mover_rank(peer: str, period: int) -> bytes:
    """The deterministic order in which a donor stage's servers are picked to move."""
    return hashlib.blake2b(f"{peer}/{period}".encode(), digest_size=16).digest()


def plan_move(stages: Sequence[StageView], period: int) -> Move | None:
    """The one move of `period`, or None when no single move lowers the worst stage load."""
    if len(stages) < 2:
        return None
    target = max(range(len(stages)), key=lambda s: (stages[s].load, -s))
    donors = [s for s in range(len(stages)) if s != target and len(stages[s].servers) > 1]
    if not donors:
        return None
    source = min(donors, key=lambda s: (stages[s].load, s))
    peer = min(stages[source].servers, key=lambda p: mover_rank(p, period))
    speed = stages[source].servers[peer]
    after_source = _load(stages[source].demand, stages[source].capacity - speed)
    after_target = _load(stages[target].demand, stages[target].capacity + speed)
    if max(after_source, after_target) > (1.0 - MIN_GAIN) * stages[target].load:
        return None  # the move would shift the bottleneck, or lower it by too little to pay
    return Move(peer=peer, source=source, target=target)


def apply_move(stages: Sequence[StageView], move: Move) -> list[StageView]:
    """The view after `move` (what every peer expects once the mover re-announces)."""
    result = list(stages)
    source, target = stages[move.source], stages[move.target]
    speed = source.servers[move.peer]
    result[move.source] = StageView(
        demand=source.demand, servers={p: v for p, v in source.servers.items() if p != move.peer}
    )
    result[move.target] = StageView(
        demand=target.demand, servers={**target.servers, move.peer: speed}
    )
    return result


def stage_for_new_peer(stages: Sequence[StageView]) -> int:
    """The stage a joining server should serve: the most loaded (lowest index on ties)."""
    if not stages:
        raise ValueError("a pipeline has at least one stage")
    return max(range(len(stages)), key=lambda s: (stages[s].load, -s))


def _load(demand: float, capacity: float) -> float:
    return float("inf") if capacity <= 1e-12 else demand / capacity
