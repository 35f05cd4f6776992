"""Who serves which stage, read from the replicated RunState: the view every peer decides from.

A stage server's member record (crdt/records.py) carries its role `pipeline-server/<stage>` and its
measured throughput; it renews the record every few seconds with a short lease, so a dead server
drops out of every view by itself when its lease runs out, and a move is one write of a new role.
Trainers are `pipeline-trainer` (`pipeline-trainer/static` while they measure the fixed-pipeline
baseline, during which servers do not rebalance). Trainers build their wiring from this view;
servers run the rebalancing rule (rebalance.py) on it. RunState is a CRDT, so every peer converges
on the same view without asking anyone; the DHT stage keys carry the same facts for peers outside
the run (discovery), but a DHT get stops at the first replica and may miss entries, so decisions
are taken on RunState.

A server that has not measured itself yet announces throughput 0; the view counts it as fast
as the mean of its measured peers (1.0 when none is measured), as the wiring does, so a fresh
server is neither invisible nor a bottleneck.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from peertrain.crdt.runstate import RunState
from peertrain.crdt.writer import RunWriter

from .rebalance import StageView

SERVER_ROLE = "pipeline-server/"
TRAINER_ROLE = "pipeline-trainer"
STATIC_TRAINER_ROLE = "pipeline-trainer/static"  # measuring the fixed-pipeline baseline


def server_role(stage: int) -> str:
    return f"{SERVER_ROLE}{stage}"


def stage_of_role(role: str) -> int | None:
    if not role.startswith(SERVER_ROLE):
        return None
    tail = role[len(SERVER_ROLE) :]
    return int(tail) if tail.isdigit() and len(tail) <= 5 else None


@dataclass(frozen=True, slots=True, kw_only=True)
class PipelinePeer:
    """What a stage service or a trainer loop needs of its run: who it is, its replica of
    RunState (the view it decides from), its writer (its own member record) and its addresses
    (for that record)."""

    me: str
    state: RunState
    writer: RunWriter
    addrs: Callable[[], Sequence[str]] = tuple


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerEntry:
    stage: int
    throughput: float
    stamp: tuple[int, int]  # changes whenever the server renews its record (a re-announcement)


def servers(state: RunState, num_stages: int) -> dict[str, ServerEntry]:
    """Live stage servers by peer ID (servers claiming a stage outside the pipeline ignored)."""
    out = {}
    for peer, member in state.members().items():
        stage = stage_of_role(member.info.role)
        if stage is not None and stage < num_stages:
            stamp = (member.stamp.wall_ms, member.stamp.counter)
            out[peer] = ServerEntry(stage=stage, throughput=member.info.throughput, stamp=stamp)
    return out


def trainers(state: RunState) -> list[str]:
    roles = (TRAINER_ROLE, STATIC_TRAINER_ROLE)
    return sorted(p for p, m in state.members().items() if m.info.role in roles)


def in_static_phase(state: RunState) -> bool:
    """Some trainer is measuring the static baseline: servers hold rebalancing meanwhile, or the
    baseline would be measured on a layout that moves under it."""
    return any(m.info.role == STATIC_TRAINER_ROLE for m in state.members().values())


def stage_views(entries: Mapping[str, ServerEntry], demands: list[float]) -> list[StageView]:
    """One `StageView` per stage; unmeasured servers count at the mean measured throughput."""
    measured = [e.throughput for e in entries.values() if e.throughput > 0]
    default = sum(measured) / len(measured) if measured else 1.0
    return [
        StageView(
            demand=demand,
            servers={
                p: (e.throughput if e.throughput > 0 else default)
                for p, e in sorted(entries.items())
                if e.stage == stage
            },
        )
        for stage, demand in enumerate(demands)
    ]
