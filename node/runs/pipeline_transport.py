"""The pipeline transport over libp2p: calls to stage servers, and the handler that answers them.

Client (`NetworkStageTransport`, a `StagePeerTransport`): each call opens one stream on
`/peertrain/pipeline/1.0.0` (swarm/pipeline/wire.py), sends the request
and its tensors, reads the reply and its tensors, and closes. Anything that goes wrong with one
server — no connection, a reset, a timeout, a refusal (`ErrorResponse`: wrong stage, bad input),
a reply that does not decode or whose tensors fail their digests — surfaces as
`ServerUnavailable`, so the trainer excludes that server and retries the call on another server
of the same stage (swarm/pipeline/trainer.py). Every call has a deadline: a server that hangs
costs `timeout`, never a stuck microbatch.

Streams reuse the one connection libp2p keeps per peer (Yamux), so a call costs a stream open
plus one round trip, not a dial.

Server (`PipelineHandler`, on node/net/rpc.py's `serve_one` like every request/response
protocol): decodes a request at the edge and calls this node's `StageService`
(swarm/pipeline/stage_service.py), the same methods the in-process network calls. Remote
misbehaviour never stops the server: a request for a run we are not in, or for a stage we do
not serve, is refused (`ErrorResponse`; a small penalty for the wrong stage: an honest trainer
may lag a move by a second); an undecodable, oversized, non-finite or mis-shaped tensor, or a
forged digest, is refused with a penalty (`PeerScoreboard`), and the server goes on. A call
from a peer with no live member record in the run's RunState is refused before its tensors are
read (`dropped_calls`), with a small penalty: an honest trainer's record may trail its first
call by a moment (it retries elsewhere until we see it), a stranger's never arrives.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import trio
from libp2p.abc import IHost, INetStream
from libp2p.peer.id import ID
from peertrain.protocol.errors import DecodeError, PeertrainError, ProtocolError
from peertrain.protocol.framing import read_message, write_message
from peertrain.protocol.messages import ErrorCode, ErrorResponse, Request, Response, check_reply
from peertrain.protocol.tensors import PreparedTensor
from peertrain.swarm.pipeline.averaging import StageContribution
from peertrain.swarm.pipeline.boundary import BoundaryTensor
from peertrain.swarm.pipeline.errors import NotServing, ServerUnavailable, WrongStage
from peertrain.swarm.pipeline.stage_service import StageService
from peertrain.swarm.pipeline.wire import (
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
    prepare_flat,
    read_payloads,
    write_payloads,
)

from ..net.penalties import PeerScoreboard, is_misbehaviour
from ..net.rpc import Answer, refuse, serve_one
from ..net.stream_limits import StreamSlots

WRONG_STAGE = 101  # ErrorResponse code: the server serves another stage (it may just have moved)
BAD_INPUT_PENALTY = 25.0
WRONG_STAGE_PENALTY = 1.0
NON_MEMBER_PENALTY = 2.0
MEMBER_GRACE = 3.0  # seconds a call waits for its caller's member record (anti-entropy: 2 s)
IDLE_TIMEOUT = 10.0
ANSWER_TIMEOUT = 120.0


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
        # flat: a language model's labels are (rows, seq); the last stage reshapes them
        labels = tuple(int(v) for v in targets.reshape(-1).tolist())
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
    async def contribution(self, peer, *, stage: int, round_: int) -> StageContribution:
        """Peer's contribution to round `round_`, with its state checksum after `round_ - 1`."""
        req = GradientsRequest(run=self.run_id, stage=stage, round=round_)
        reply, tensors = await self._exchange(peer, req, (), GradientsReply, MAX_STATE_BYTES)
        return StageContribution(flat_tensor(reply, tensors), reply.samples, reply.checksum)

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
            except Exception as exc:  # noqa: BLE001 — libp2p's many dial/stream error types all
                # mean one thing here: this server is unavailable (translated into our tree)
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
            except PeertrainError as exc:  # RemoteError (refused), DecodeError, StreamEnded, …
                raise ServerUnavailable(f"{peer}: {type(exc).__name__}: {exc}") from None
            except Exception as exc:  # noqa: BLE001 — a muxer error escaping the framing layer:
                # this server is unavailable (translated into our tree)
                raise ServerUnavailable(f"{peer}: {exc!r}") from None
            finally:
                with trio.CancelScope(shield=True), trio.move_on_after(1.0):
                    try:
                        await stream.close()
                    except Exception:  # noqa: BLE001 — silence is right: the peer has
                        pass  # already reset the stream, and the call's outcome is settled
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


class PipelineHandler:
    """Answers `/peertrain/pipeline/1.0.0` streams with this node's `StageService`.

    Set as the host's stream handler by the pipeline session (node/runs/pipeline_session.py)."""

    def __init__(
        self,
        service: StageService,
        run_id: str,
        scoreboard: PeerScoreboard,
        *,
        is_member: Callable[[str], bool],
    ) -> None:
        self.service, self.run_id, self.scoreboard = service, run_id, scoreboard
        self.is_member = is_member  # a live member record in the run's RunState
        self.dropped_calls = 0
        self._slots = StreamSlots(scoreboard, max_total=64, max_per_peer=24)

    async def on_stream(self, stream: INetStream) -> None:
        async with self._slots.admit(stream) as peer:
            if peer is None:
                return
            with trio.move_on_after(ANSWER_TIMEOUT):
                await self._answer(peer, stream)

    async def _answer(self, peer: str, stream: INetStream) -> None:
        async def handle(req: Request) -> Answer:
            reply, prepared = await self._respond(peer, req, stream)
            if isinstance(reply, ErrorResponse):
                self.service.refused += 1

            async def payloads() -> None:
                await write_payloads(stream, prepared, idle_timeout=IDLE_TIMEOUT)

            return Answer(reply, payloads if prepared else None)

        await serve_one(
            stream,
            peer,
            (StageCall, GradientsRequest, StateRequest),
            handle,
            scoreboard=self.scoreboard,
            idle_timeout=IDLE_TIMEOUT,
            label="pipeline",
        )

    async def _respond(self, peer: str, req: Request, stream: INetStream):
        """(reply, prepared tensors) for one decoded request; a refusal for what we cannot or
        will not serve (a stranger, a bad payload, another stage, a stage that is not ready)."""
        if req.run == self.run_id and not await self._member(peer):
            self.dropped_calls += 1  # before its tensors are read or anything is computed
            self.scoreboard.penalise(peer, NON_MEMBER_PENALTY, "pipeline: call from a non-member")
            return refuse(req, ErrorCode.NOT_FOUND, "you are no member of this run"), ()
        try:
            return await self._dispatch(peer, req, stream)
        except ProtocolError as exc:  # a payload too big, forged or cut short; bad tensor values
            self._penalise_if_bad(peer, exc)
            return refuse(req, ErrorCode.BAD_REQUEST, str(exc)), ()
        except WrongStage as exc:
            if not exc.moved:
                reason = f"pipeline: stage {req.stage} asked of {self.service.stage}"
                self.scoreboard.penalise(peer, WRONG_STAGE_PENALTY, reason)
            return refuse(req, WRONG_STAGE, str(exc)), ()
        except NotServing as exc:
            return refuse(req, ErrorCode.BUSY, str(exc)), ()

    async def _member(self, peer: str) -> bool:
        with trio.move_on_after(MEMBER_GRACE):
            while not self.is_member(peer):  # noqa: ASYNC110 - RunState has no event to wait on
                await trio.sleep(0.1)
            return True
        return False

    async def _dispatch(self, peer: str, req: Request, stream: INetStream):
        """(reply, prepared tensors) for one decoded request."""
        assert isinstance(req, StageCall | GradientsRequest | StateRequest)
        tensors: list[torch.Tensor] = []
        if isinstance(req, StageCall):  # the payloads follow the message: take them off first
            tensors = await read_payloads(
                stream, req.tensors, max_nbytes=MAX_BOUNDARY_BYTES, idle_timeout=IDLE_TIMEOUT
            )
        if req.run != self.run_id:
            return refuse(req, ErrorCode.NOT_FOUND, "not in that run"), ()
        if isinstance(req, StateRequest):
            return await self._state(req)
        self.service.check_stage(req.stage)
        if isinstance(req, GradientsRequest):
            return await self._gradients(peer, req)
        malformed = self._malformed(req)
        if malformed is not None:
            self._penalise_if_bad(peer, DecodeError("malformed stage call"))
            return refuse(req, ErrorCode.BAD_REQUEST, malformed), ()
        return await self._stage_call(req, tensors)

    def _malformed(self, req: StageCall) -> str | None:
        """Why a stage call cannot be served as sent (None: it can)."""
        expected = {"forward": 1, "backward": 2, "loss": 1}[req.op]
        last = (req.op == "loss") != (req.stage == self.service.spec.stages - 1)
        if last or len(req.tensors) != expected or (req.op != "loss" and req.targets):
            return f"{req.op} with {len(req.tensors)} tensors at stage {req.stage}"
        return None

    async def _stage_call(self, req: StageCall, tensors: list[torch.Tensor]):
        service, x = self.service, boundary_of(req.tensors[0], tensors[0])
        loss, result = 0.0, None
        if req.op == "forward":
            result = await service.forward(req.stage, x)
        elif req.op == "backward":
            grad_out = boundary_of(req.tensors[1], tensors[1])
            result = await service.backward(req.stage, x, grad_out)
        else:
            targets = torch.tensor(req.targets, dtype=torch.int64)
            loss, result = await service.loss_backward(req.stage, x, targets)
        prepared = () if result is None else (prepare_boundary(result),)
        headers = tuple(p.header for p in prepared)
        return req.reply(StageReply, loss=float(loss), tensors=headers), prepared

    async def _gradients(self, peer: str, req: GradientsRequest):
        contribution = await self.service.contribution(peer, req.stage, req.round)
        if contribution is None:
            return refuse(req, ErrorCode.NOT_FOUND, f"no contribution for round {req.round}"), ()
        prepared = (await trio.to_thread.run_sync(prepare_flat, "gradients", contribution.flat),)
        reply = req.reply(
            GradientsReply,
            samples=contribution.samples,
            tensors=(prepared[0].header,),
            checksum=contribution.checksum,
        )
        return reply, prepared

    async def _state(self, req: StateRequest):
        flat, adam_step, completed = await self.service.export_state(req.stage)
        prepared = (await trio.to_thread.run_sync(prepare_flat, "stage-state", flat),)
        reply = req.reply(
            StateReply, round=completed, adam_step=adam_step, tensors=(prepared[0].header,)
        )
        return reply, prepared

    def _penalise_if_bad(self, peer: str, exc: ProtocolError) -> None:
        if is_misbehaviour(exc):
            self.scoreboard.penalise(peer, BAD_INPUT_PENALTY, f"pipeline: {exc}")
