"""Keeping a stage's copies in step over the network: rounds, checksums, and state for repairs.

The pieces of `StageAverager` (swarm/pipeline/averaging.py) that talk to other servers of the
stage, wired onto `/peertrain/pipeline/1.0.0`: a round-k contribution travels as a
`GradientsReply` that also carries the replier's state checksum after round k-1, so every server
learns the others' checksums at equal rounds inside the all-gather it already runs (no extra
message); a copy that lost to the stage's majority (swarm/pipeline/drift.py) downloads the state
with the `StateRequest` that movers use, answered from `StageAverager.export` so the round it
names is the one the state is after. A repair waits while this server moves (`may_repair`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import trio
from peertrain.protocol.messages import ErrorCode
from peertrain.swarm.pipeline.averaging import Contribution, StageAverager

from ..net.rpc import refuse
from .pipeline_transport import NetworkStageTransport, flat_tensor
from .pipeline_wire import (
    MAX_STATE_BYTES,
    GradientsReply,
    GradientsRequest,
    StateReply,
    StateRequest,
    prepare_flat,
)

if TYPE_CHECKING:
    from peertrain.swarm.pipeline.stage import StageServer


class StagePeerTransport(NetworkStageTransport):
    """The trainer-facing calls, plus a stage server's calls to its stage's other servers."""

    async def contribution(self, peer, *, stage: int, round_: int) -> Contribution:
        """Peer's contribution to round `round_`, with its state checksum after `round_ - 1`."""
        req = GradientsRequest(run=self.run_id, stage=stage, round=round_)
        reply, tensors = await self._exchange(peer, req, (), GradientsReply, MAX_STATE_BYTES)
        return Contribution(flat_tensor(reply, tensors), reply.samples, reply.checksum)


def stage_averager(
    transport: StagePeerTransport,
    server: StageServer,
    *,
    me: str,
    stage: int,
    completed: int,
    peers: Callable[[], list[str]],
    may_repair: Callable[[], bool],
) -> StageAverager:
    """The averager of this server in `stage`; every call it makes asks for that stage (a round
    still running when the server moves asks the right servers)."""
    return StageAverager(
        server,
        me=me,
        fetch=lambda peer, round_: transport.contribution(peer, stage=stage, round_=round_),
        peers=peers,
        completed=completed,
        fetch_state=lambda peer: transport.state(peer, stage=stage),
        may_repair=may_repair,
    )


async def answer_gradients(
    averager: StageAverager, nursery: trio.Nursery, peer: str, req: GradientsRequest
):
    """(reply, tensors) for a peer's round request; starts the round if it is our next."""
    contribution = await averager.contribution(nursery, req.round, peer)
    if contribution is None:
        return refuse(req, ErrorCode.NOT_FOUND, f"no contribution for round {req.round}"), ()
    prepared = (await trio.to_thread.run_sync(prepare_flat, "gradients", contribution.flat),)
    return req.reply(
        GradientsReply,
        samples=contribution.samples,
        tensors=(prepared[0].header,),
        checksum=contribution.checksum,
    ), prepared


async def answer_state(averager: StageAverager, req: StateRequest):
    """(reply, tensors): the stage state and the round it is the state after, for a mover or a
    drifted copy."""
    flat, adam_step, completed = await averager.export()
    prepared = (await trio.to_thread.run_sync(prepare_flat, "stage-state", flat),)
    return req.reply(
        StateReply, round=completed, adam_step=adam_step, tensors=(prepared[0].header,)
    ), prepared
