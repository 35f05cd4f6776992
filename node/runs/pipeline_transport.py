"""`StageTransport` over libp2p: what a trainer (and a stage server) sends to stage servers.

Each call opens one stream on `/peertrain/pipeline/1.0.0` (pipeline_wire.py), sends the request
and its tensors, reads the reply and its tensors, and closes. Anything that goes wrong with one
server — no connection, a reset, a timeout, a refusal (`ErrorResponse`: wrong stage, bad input),
a reply that does not decode or whose tensors fail their digests — surfaces as
`ServerUnavailable`, so the trainer excludes that server and retries the call on another server
of the same stage (swarm/pipeline/trainer.py). Every call has a deadline: a server that hangs
costs `timeout`, never a stuck microbatch.

Streams reuse the one connection libp2p keeps per peer (Yamux), so a call costs a stream open
plus one round trip, not a dial.
"""

from __future__ import annotations

import torch
import trio
from libp2p.abc import IHost
from libp2p.peer.id import ID
from peertrain.protocol.errors import PeertrainError
from peertrain.protocol.framing import read_message, write_message
from peertrain.protocol.messages import ErrorResponse, Request, Response, check_reply
from peertrain.protocol.tensors import PreparedTensor
from peertrain.swarm.pipeline.boundary import BoundaryTensor
from peertrain.swarm.pipeline.errors import ServerUnavailable

from .pipeline_wire import (
    MAX_BOUNDARY_BYTES,
    MAX_STATE_BYTES,
    PIPELINE,
    GradientsReply,
    GradientsRequest,
    StageCall,
    StageReply,
    StateReply,
    StateRequest,
    boundary_of,
    prepare_boundary,
    read_payloads,
    write_payloads,
)


class NetworkStageTransport:
    """The three pipeline calls, plus the two a stage server needs from its peers."""

    def __init__(self, host: IHost, run_id: str, *, timeout: float = 20.0) -> None:
        self.host, self.run_id, self.timeout = host, run_id, timeout
        self.bytes_sent = self.bytes_received = 0

    # --- StageTransport ------------------------------------------------------------------
    async def forward(self, peer, *, stage: int, x: BoundaryTensor) -> BoundaryTensor:
        reply, tensors = await self._stage_call(peer, "forward", stage, (x,))
        if len(reply.tensors) != 1:
            raise ServerUnavailable(f"{peer}: forward answered {len(reply.tensors)} tensors")
        return boundary_of(reply.tensors[0], tensors[0])

    async def backward(
        self, peer, *, stage: int, x: BoundaryTensor, grad_out: BoundaryTensor
    ) -> BoundaryTensor | None:
        reply, tensors = await self._stage_call(peer, "backward", stage, (x, grad_out))
        return boundary_of(reply.tensors[0], tensors[0]) if reply.tensors else None

    async def loss_backward(
        self, peer, *, stage: int, x: BoundaryTensor, targets: torch.Tensor
    ) -> tuple[float, BoundaryTensor | None]:
        labels = tuple(int(v) for v in targets.tolist())
        reply, tensors = await self._stage_call(peer, "loss", stage, (x,), targets=labels)
        return reply.loss, boundary_of(reply.tensors[0], tensors[0]) if reply.tensors else None

    async def _stage_call(
        self,
        peer,
        op: str,
        stage: int,
        boundaries: tuple[BoundaryTensor, ...],
        targets: tuple[int, ...] = (),
    ) -> tuple[StageReply, list[torch.Tensor]]:
        prepared = tuple(prepare_boundary(b) for b in boundaries)
        call = StageCall(
            run=self.run_id,
            op=op,
            stage=stage,
            tensors=tuple(p.header for p in prepared),
            targets=targets,
        )
        return await self._exchange(peer, call, prepared, StageReply, MAX_BOUNDARY_BYTES)

    # --- between servers of one stage ----------------------------------------------------
    async def gradients(self, peer, *, stage: int, round_: int) -> tuple[torch.Tensor, int]:
        """Peer's contribution (flat gradient sum, samples) to averaging round `round_`."""
        req = GradientsRequest(run=self.run_id, stage=stage, round=round_)
        reply, tensors = await self._exchange(peer, req, (), GradientsReply, MAX_STATE_BYTES)
        return flat_tensor(reply, tensors), reply.samples

    async def state(self, peer, *, stage: int) -> tuple[torch.Tensor, int, int]:
        """Peer's stage state: (flat state, Adam step, averaging rounds applied)."""
        reply, tensors = await self._exchange(
            peer, StateRequest(run=self.run_id, stage=stage), (), StateReply, MAX_STATE_BYTES
        )
        return flat_tensor(reply, tensors), reply.adam_step, reply.round

    # --- one exchange ----------------------------------------------------------------------
    async def _exchange(
        self,
        peer,
        request: Request,
        prepared: tuple[PreparedTensor, ...],
        reply_type: type[Response],
        max_nbytes: int,
    ):
        pid = ID.from_base58(peer) if isinstance(peer, str) else peer
        idle = min(self.timeout, 10.0)
        with trio.move_on_after(self.timeout):
            try:
                stream = await self.host.new_stream(pid, [str(PIPELINE)])
            except Exception as exc:  # libp2p's many dial/stream errors: this server is unavailable
                raise ServerUnavailable(f"{peer}: cannot open a pipeline stream: {exc}") from None
            try:
                await write_message(stream, request, idle_timeout=idle)
                await write_payloads(stream, prepared, idle_timeout=idle)
                reply = check_reply(
                    request,
                    await read_message(stream, (reply_type, ErrorResponse), idle_timeout=idle),
                )
                tensors = await read_payloads(
                    stream, reply.tensors, max_nbytes=max_nbytes, idle_timeout=idle
                )
            except (
                PeertrainError
            ) as exc:  # RemoteError (refused), DecodeError, StreamEnded, PeerTimeout…
                raise ServerUnavailable(f"{peer}: {type(exc).__name__}: {exc}") from None
            except Exception as exc:  # a muxer error escaping the framing layer
                raise ServerUnavailable(f"{peer}: {exc!r}") from None
            finally:
                with trio.CancelScope(shield=True), trio.move_on_after(1.0):
                    try:
                        await stream.close()
                    except Exception:  # already reset by the peer
                        pass
            self.bytes_sent += sum(p.header.nbytes for p in prepared)
            self.bytes_received += sum(t.numel() for t in tensors)
            return reply, tensors
        raise ServerUnavailable(f"{peer}: no answer within {self.timeout:g} s")


def flat_tensor(reply, tensors: list[torch.Tensor]) -> torch.Tensor:
    """The one flat fp32 tensor a gradients or state reply carries; ServerUnavailable otherwise."""
    from peertrain.protocol import codecs

    if (
        len(reply.tensors) != 1
        or reply.tensors[0].codec != "fp32"
        or len(reply.tensors[0].shape) != 1
    ):
        raise ServerUnavailable("expected one flat fp32 tensor")
    header = reply.tensors[0]
    try:
        return codecs.decode(
            tensors[0], "fp32", dtype="float32", shape=tuple(header.shape), block_size=1
        )
    except PeertrainError as exc:
        raise ServerUnavailable(f"bad tensor: {exc}") from None
